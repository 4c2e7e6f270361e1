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
