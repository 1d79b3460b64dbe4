"""``python -m benchmarks``: the suite, several scenarios in one run
(``benchmarks/scenarios/suite.py``; ``--help`` for its options), or one scenario with all
of its own options, ``python -m benchmarks <scenario> …`` (``benchmarks/scenarios/``)."""

from __future__ import annotations

import sys

from benchmarks.scenarios import COMMANDS, scenario_main


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] and arguments[0] in COMMANDS:
        return scenario_main(arguments[0])(arguments[1:])
    return scenario_main("suite")(arguments)


if __name__ == "__main__":
    sys.exit(main())
