"""`chatctl simulate` and the report it writes: tables, CSVs and PNG plots in the folder."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from clients.chatctl.main import main
from fleet import run_scenario


def test_simulate_prints_the_figures_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "report"
    argv = ["simulate", "replica-dies", "--scale", "0.01", "--duration", "130", "--json"]
    assert main([*argv, "--report", str(folder)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["scenario"] == "replica-dies" and printed["figures"]
    names = {f["name"] for f in printed["figures"]}
    assert "answers lost" in names
    written = sorted(p.name for p in folder.iterdir())
    assert written == ["fleet.csv", "summary.md", "tiers.csv", "timeline.png", "ttft.png"]
    assert (folder / "timeline.png").read_bytes().startswith(b"\x89PNG")
    assert "# A replica dies" in (folder / "summary.md").read_text()
    for table in ("fleet.csv", "tiers.csv"):
        header, *rows = list(csv.reader((folder / table).read_text().splitlines()))
        assert rows and all(len(row) == len(header) for row in rows)


def test_simulate_refuses_a_duration_inside_the_warm_up(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "cache-lost", "--duration", "10"]) == 1
    assert "warm-up" in capsys.readouterr().err


@pytest.mark.parametrize("duration", ["70", "80"])
def test_simulate_refuses_a_duration_that_leaves_nothing_to_measure(
    capsys: pytest.CaptureFixture[str], duration: str
) -> None:
    # cache-lost warms up 70 s; the last 10 s (the users' patience) are never counted.
    assert main(["simulate", "cache-lost", "--duration", duration]) == 1
    assert "must exceed 80 s" in capsys.readouterr().err


def test_run_scenario_refuses_a_duration_that_leaves_nothing_to_measure() -> None:
    with pytest.raises(ValueError, match="more than 70 simulated s"):
        run_scenario("gpus-run-out", scale=0.01, duration_s=65.0, variants=("rungs 1-3",))


def test_simulate_refuses_a_scale_outside_the_region() -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "cache-lost", "--scale", "2"])
    assert exit_.value.code == 2


def test_simulate_region_lost_prints_its_figures_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "regions"
    argv = ["simulate", "region-lost", "--scale", "0.01", "--duration", "85", "--json"]
    assert main([*argv, "--report", str(folder)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["scenario"], printed["seed"]) == ("region-lost", 1)
    summary = printed["summary"]
    assert [r["name"] for r in summary["regions"]] == [
        "us-east",
        "europe",
        "us-west",
        "asia-south",
        "asia-east",
    ]
    assert summary["loss"]["region"] == "us-east" and summary["loss"]["lost_at_s"] == 60.0
    assert sorted(p.name for p in folder.iterdir()) == ["regions.csv", "summary.md", "tiers.csv"]
    text = (folder / "summary.md").read_text()
    assert text.startswith("# A whole region lost: its users' conversations start elsewhere\n")
    assert "- us-east lost at 60 s: out after " in text
    for table in ("regions.csv", "tiers.csv"):
        header, *rows = list(csv.reader((folder / table).read_text().splitlines()))
        assert rows and all(len(row) == len(header) for row in rows)


def test_simulate_refuses_a_duration_before_the_region_is_lost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # region-lost loses its region at 60 s; the users' patience (10 s) follows.
    assert main(["simulate", "region-lost", "--duration", "70"]) == 1
    assert "--duration must exceed 70 s" in capsys.readouterr().err
