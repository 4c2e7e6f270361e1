"""What the soak measures of each process: resident memory (VmRSS) and open file descriptors,
read from /proc every few seconds and kept per slot (a role's place in the platform, such as
`gateway-1`), so a process restarted under a new pid stays in its slot; and what the samples
say: the memory slope over a window, and whether the descriptors grew.

The slope is a least-squares line through the RSS samples in the window; its growth across the
window (slope x window length) over the window's mean RSS is the figure, so 0.05 means the line
rose 5 % of the process's memory over the window. It is taken only for a slot whose one process
lived through the whole window: a restarted process starts small and would read as growth.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

VM_RSS = re.compile(r"^VmRSS:\s+(\d+) kB", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float  # seconds since the traffic started
    pid: int
    rss: int  # bytes
    fds: int


def read_process(pid: int) -> tuple[int, int] | None:
    """(RSS bytes, open descriptors) of a process; None once it is gone."""
    try:
        found = VM_RSS.search(Path(f"/proc/{pid}/status").read_text())
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    if found is None:  # a zombie: exited, not yet reaped
        return None
    return int(found.group(1)) * 1024, fds


def _read_all(pids: dict[str, int]) -> dict[str, tuple[int, int, int]]:
    read = {}
    for slot, pid in pids.items():
        got = read_process(pid)
        if got is not None:
            read[slot] = (pid, *got)
    return read


@dataclass
class Sampler:
    """Samples the processes `pids()` names (slot -> pid, read anew each round, so restarted
    processes are followed) every interval_s, from the clock's zero."""

    pids: Callable[[], dict[str, int]]
    interval_s: float
    clock: Callable[[], float]
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self.sample_once()
            next_at += self.interval_s
            await asyncio.sleep(max(0.0, next_at - loop.time()))

    async def sample_once(self) -> None:
        at_s = self.clock()
        read = await asyncio.to_thread(_read_all, self.pids())
        for slot, (pid, rss, fds) in read.items():
            self.samples.setdefault(slot, []).append(Sample(at_s, pid, rss, fds))


# What the samples say ----------------------------------------------------------------------------


def lived_through(samples: list[Sample], start_s: float, end_s: float, gap_s: float) -> bool:
    """One process was sampled from start_s to end_s (within gap_s at both ends), no other."""
    window = [s for s in samples if start_s <= s.at_s <= end_s]
    return (
        len(window) >= 3
        and len({s.pid for s in window}) == 1
        and window[0].at_s - start_s <= gap_s
        and end_s - window[-1].at_s <= gap_s
    )


def memory_growth(samples: list[Sample], start_s: float, end_s: float) -> float:
    """The least-squares line's rise over [start_s, end_s], as a share of the mean RSS there."""
    window = [s for s in samples if start_s <= s.at_s <= end_s]
    n = len(window)
    mean_t = sum(s.at_s for s in window) / n
    mean_rss = sum(s.rss for s in window) / n
    spread = sum((s.at_s - mean_t) ** 2 for s in window)
    if spread == 0:
        return 0.0
    slope = sum((s.at_s - mean_t) * (s.rss - mean_rss) for s in window) / spread
    return slope * (end_s - start_s) / mean_rss


def fd_growth(samples: list[Sample], end_s: float) -> int:
    """How many more descriptors the process held at most in the run's last third than at most
    in its first: a leak of one per message or per fault grows without bound, while the
    connections that come and go with faults stay within a few."""
    first = [s.fds for s in samples if s.at_s <= end_s / 3]
    last = [s.fds for s in samples if s.at_s >= end_s * 2 / 3]
    if not first or not last:
        return 0
    return max(last) - max(first)


def rss_at(samples: list[Sample], marks: list[float]) -> list[float]:
    """RSS in MB of the sample nearest each mark (seconds): the shape of the curve, which tells
    a store filling up to its bound (it levels off) from a leak (it does not)."""
    return [
        round(min(samples, key=lambda s, at=at: abs(s.at_s - at)).rss / (1024 * 1024), 1)
        for at in marks
    ]


@dataclass(frozen=True, slots=True)
class SlotFigures:
    slot: str
    restarts: int  # processes seen in the slot, less one
    rss_first_mb: float
    rss_last_mb: float
    rss_peak_mb: float
    fds_min: int
    fds_max: int
    fd_growth: int | None  # None: restarted, so no one process spans the run
    memory_growth: float | None  # None: no one process lived through the window
    rss_mb_at: list[float]  # at MARKS evenly spaced marks from the start to the end


MARKS = 7


def figures(
    slot: str, samples: list[Sample], window: tuple[float, float], end_s: float, gap_s: float
) -> SlotFigures:
    mb = 1024 * 1024
    one_process = len({s.pid for s in samples}) == 1
    return SlotFigures(
        slot=slot,
        restarts=len({s.pid for s in samples}) - 1,
        rss_first_mb=round(samples[0].rss / mb, 1),
        rss_last_mb=round(samples[-1].rss / mb, 1),
        rss_peak_mb=round(max(s.rss for s in samples) / mb, 1),
        fds_min=min(s.fds for s in samples),
        fds_max=max(s.fds for s in samples),
        fd_growth=fd_growth(samples, end_s) if one_process else None,
        memory_growth=(
            round(memory_growth(samples, *window), 4)
            if lived_through(samples, *window, gap_s)
            else None
        ),
        rss_mb_at=rss_at(samples, [end_s * i / (MARKS - 1) for i in range(MARKS)]),
    )
