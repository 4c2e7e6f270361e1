"""The soak, three minutes of it: mixed traffic through the edge while nodes, a gateway and a
scheduler are SIGKILLed and restarted, run as `bench/soak.py` runs (the 30-minute run's result
is bench/results/soak.txt). It checks what three minutes can show: no answer lost, and no
long-lived process holding more descriptors as it goes. Memory slopes need the long run.

And the arithmetic the soak judges memory by."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.soak_samples import Sample, fd_growth, lived_through, memory_growth, rss_at

ROOT = Path(__file__).resolve().parents[2]
MINUTES = 3
# Time for the platform to start and stop around the traffic, on a loaded machine.
RUN_BOUND_S = MINUTES * 60 + 150


@pytest.mark.slow
@pytest.mark.timeout(RUN_BOUND_S + 30)
def test_three_minutes_of_faults_lose_no_answer_and_leak_no_descriptor(tmp_path: Path) -> None:
    state = tmp_path / "platform"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'gen'}"}
    done = subprocess.run(
        [sys.executable, "bench/soak.py", "--minutes", str(MINUTES), "--kill-every-s", "15",
         "--out", str(tmp_path / "soak.txt"), "--state-dir", str(state)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_BOUND_S, check=False,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("{"), f"no result; logs in {state}\n{done.stderr[-3000:]}"
    result = json.loads(lines[-1])
    table = "\n".join(lines[:-1])
    # Enough happened for the checks to mean something: every slot of the kill set died at
    # least once mid-traffic, and answers were stopped, dropped and resumed, and blocked.
    assert all(kills >= 1 for kills in result["kills"].values()), table
    assert result["accepted"] >= 100 and result["stopped"] >= 1, table
    assert result["dropped_and_resumed"] >= 1 and result["blocked"] >= 1, table
    assert result["lost"] == 0, f"{result['lost_examples']}; logs in {state}\n{table}"
    assert result["ids_out_of_order"] == 0 and result["inexact"] == 0, table
    assert result["fds_bounded"], table
    assert done.returncode == 0, table


def line(pid: int, rss_at: list[tuple[float, float]], fds: int = 20) -> list[Sample]:
    return [Sample(at, pid, int(rss), fds) for at, rss in rss_at]


def test_memory_growth_is_the_fitted_rise_over_the_window_as_a_share_of_the_mean() -> None:
    # 100 MB rising 1 MB a minute: 10 MB over ten minutes, about 9.5 % of the mean (105 MB).
    mb = 1024 * 1024
    samples = line(7, [(t, 100 * mb + t / 60 * mb) for t in range(0, 601, 5)])
    assert memory_growth(samples, 0, 600) == pytest.approx(10 / 105)
    # Noise around a flat level reads as flat; samples outside the window are not read.
    wobbly = line(7, [(t, 100 * mb + (mb if t % 10 else -mb)) for t in range(0, 601, 5)])
    assert abs(memory_growth(wobbly, 0, 600)) < 0.001
    assert memory_growth([*line(7, [(-50, 10 * mb)]), *wobbly], 0, 600) == pytest.approx(
        memory_growth(wobbly, 0, 600)
    )


def test_only_a_process_that_lived_through_the_window_is_measured() -> None:
    whole = line(7, [(t, 1000) for t in range(0, 601, 5)])
    assert lived_through(whole, 100, 600, gap_s=12.5)
    restarted = line(7, [(t, 1000) for t in range(0, 300, 5)]) + line(
        8, [(t, 1000) for t in range(300, 601, 5)]
    )
    assert not lived_through(restarted, 100, 600, gap_s=12.5)
    assert lived_through(restarted, 300, 600, gap_s=12.5)  # restarted before the window
    died = line(7, [(t, 1000) for t in range(0, 400, 5)])
    assert not lived_through(died, 100, 600, gap_s=12.5)


def test_descriptor_growth_compares_the_last_thirds_peak_with_the_firsts() -> None:
    steady = [Sample(t, 7, 0, 20 + (t // 5) % 3) for t in range(0, 181, 5)]
    assert fd_growth(steady, 180) == 0
    leaking = [Sample(t, 7, 0, 20 + t // 5) for t in range(0, 181, 5)]
    assert fd_growth(leaking, 180) == 36 - 12


def test_the_curve_is_read_at_evenly_spaced_marks_from_the_nearest_samples() -> None:
    mb = 1024 * 1024
    samples = line(7, [(t, (100 + t // 60) * mb) for t in range(0, 601, 5)])
    assert rss_at(samples, [0, 298, 600]) == [100.0, 105.0, 110.0]  # t = 0, 300, 600
