"""Two versions of Taskhub side by side: the throughput benchmark of another checkout (an
older commit in a git worktree, with its own venv) and of this one, in alternating rounds,
each against its own round's ceiling. On a machine whose speed swings from hour to hour,
only such a comparison within one run tells a change of the code from a change of the host.

    git worktree add /tmp/before <commit>      # then set its venv up (its ./dev or pip)
    .venv/bin/python -m benchmarks versus --other /tmp/before --rounds 3 -- \\
        --tasks 2000 --workers 4,16 --targets ceiling,sqlite,postgres

Every round runs the throughput scenario with ``--rounds 1 …`` in the other checkout, then
in this one (the order alternates round by round); in a checkout of the older, flat layout
as ``python -m benchmarks.throughput``. The JSON lines of every run go to
stdout with a ``code`` key (``other`` / ``this``); a markdown table of median shares of the
ceiling per code, target and W, and this code's median over the other's, to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness.cli import scenario_parser
from benchmarks.harness.report import emit, log, markdown_table

HERE = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = scenario_parser("versus", __doc__, servers=False)
    parser.add_argument("--other", type=Path, required=True, help="the other checkout")
    parser.add_argument(
        "--other-python", type=Path, help="its interpreter (default: OTHER/.venv/bin/python)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    args, rest = parser.parse_known_args(argv)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if "--rounds" in rest:
        parser.error("give --rounds before --; each throughput run is one round")
    return args, rest


def throughput_module(checkout: Path) -> str:
    """The throughput scenario's module in ``checkout``: this layout's, or the flat one's
    of older commits."""
    if (checkout / "benchmarks" / "scenarios" / "throughput.py").exists():
        return "benchmarks.scenarios.throughput"
    return "benchmarks.throughput"


def run_once(python: Path, checkout: Path, throughput_args: list[str]) -> list[dict[str, Any]]:
    """One round of the throughput benchmark in ``checkout``: its results."""
    module = throughput_module(checkout)
    command = [str(python), "-m", module, "--rounds", "1", *throughput_args]
    done = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=False)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 and not results:
        raise RuntimeError(f"{checkout}: throughput exited {done.returncode}:\n{done.stderr}")
    return results


def shares(results: list[dict[str, Any]]) -> dict[tuple[str, int], float]:
    """Each (target, W) run's tasks/s as a percentage of the same run's ceiling."""
    ceiling = {r["workers"]: r["tasks_per_s"] for r in results if r["target"] == "ceiling"}
    return {
        (r["target"], r["workers"]): 100 * r["tasks_per_s"] / ceiling[r["workers"]]
        for r in results
        if r["target"] != "ceiling" and not r.get("error") and ceiling.get(r["workers"])
    }


def table(by_code: dict[str, list[dict[tuple[str, int], float]]]) -> str:
    keys = sorted({key for rounds in by_code.values() for shares_ in rounds for key in shares_})
    rows = []
    for target, workers in keys:
        medians = {}
        for code in ("other", "this"):
            values = [s[(target, workers)] for s in by_code[code] if (target, workers) in s]
            medians[code] = statistics.median(values) if values else None
        spread = {
            code: [round(s[(target, workers)]) for s in by_code[code] if (target, workers) in s]
            for code in ("other", "this")
        }
        change = (
            f"{medians['this'] / medians['other']:.2f}"
            if medians["this"] is not None and medians["other"]
            else None
        )
        rows.append(
            [
                target,
                workers,
                None if medians["other"] is None else f"{medians['other']:.0f} {spread['other']}",
                None if medians["this"] is None else f"{medians['this']:.0f} {spread['this']}",
                change,
            ]
        )
    headers = ["target", "W", "other: % of ceiling", "this: % of ceiling", "this / other"]
    return markdown_table(headers, rows, left=2)


def main(argv: list[str] | None = None) -> int:
    args, throughput_args = parse_args(argv)
    other_python = args.other_python or args.other / ".venv" / "bin" / "python"
    codes = {"other": (other_python, args.other), "this": (Path(sys.executable), HERE)}
    by_code: dict[str, list[dict[tuple[str, int], float]]] = defaultdict(list)
    lines: list[dict[str, Any]] = []
    for round_number in range(1, args.rounds + 1):
        order = ["other", "this"] if round_number % 2 else ["this", "other"]
        for code in order:
            python, checkout = codes[code]
            results = run_once(python, checkout, throughput_args)
            for result in results:
                lines.append(emit({**result, "code": code, "round": round_number}))
            by_code[code].append(shares(results))
    if args.json_out is not None:
        args.json_out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    log(table(by_code))
    return 0


if __name__ == "__main__":
    sys.exit(main())
