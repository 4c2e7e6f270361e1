"""What every benchmark here shares: one core to run on, and one way to publish its result."""

from __future__ import annotations

import os
from pathlib import Path


def pin_to_one_core() -> int | None:
    """Pins this process to one CPU; None when the platform does not allow it."""
    try:
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):  # not Linux, or not allowed: measure unpinned
        return None
    return cpu


def publish(name: str, text: str) -> None:
    """Prints the table and its JSON line, and keeps them as bench/results/<name>.txt."""
    print(text)
    (Path(__file__).parent / "results" / f"{name}.txt").write_text(text + "\n")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), from /proc; 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    """The q-quantile of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
