"""``python -m benchmarks versus``: shares of each round's own ceiling, medians per code, the
ratio."""

from benchmarks.scenarios.versus import parse_args, shares, table


def run(ceiling: float, sqlite: float, workers: int = 4) -> list[dict[str, object]]:
    return [
        {"target": "ceiling", "workers": workers, "tasks_per_s": ceiling},
        {"target": "sqlite", "workers": workers, "tasks_per_s": sqlite, "error": None},
    ]


def test_a_share_is_of_the_same_runs_ceiling() -> None:
    assert shares(run(200.0, 150.0)) == {("sqlite", 4): 75.0}
    assert shares(
        [*run(200.0, 150.0), {"target": "postgres", "workers": 16, "tasks_per_s": 9}]
    ) == {("sqlite", 4): 75.0}  # no ceiling at W = 16: no share


def test_the_table_compares_medians_of_the_two_codes() -> None:
    other = [shares(run(100, 60)), shares(run(300, 240)), shares(run(200, 140))]  # 60, 80, 70
    this = [shares(run(100, 77)), shares(run(300, 210)), shares(run(200, 150))]  # 77, 70, 75
    text = table({"other": other, "this": this})
    assert "| sqlite | 4 | 70 [60, 80, 70] | 75 [77, 70, 75] | 1.07 |" in text


def test_throughput_arguments_follow_the_double_dash() -> None:
    args, rest = parse_args(["--other", "/x", "--rounds", "2", "--", "--tasks", "10"])
    assert args.rounds == 2 and str(args.other) == "/x"
    assert rest == ["--tasks", "10"]
