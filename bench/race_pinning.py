"""The race's `--pin-engines`: every engine process on one core, everything else the race runs
(the platform's services, the peer routers, the round-robin proxy and the race's own client)
on the other, so no router's CPU takes time from the engines and no engine's from a router.

The race pins itself to the routers' core before it starts anything, so every process it
starts (and every process those start) begins there; a sweep then moves the engines, found by
their program's name, to the engines' core, every thread of them. It runs once after start-up
and then every `interval_s`, so an engine started later (the churn's restart, a nodeagent
restarting a crashed one) is moved within the interval; the churn's restart also asks for a
sweep at once. A thread takes its creator's cores, so threads started after a sweep follow.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

ENGINE_CORE = 0
ROUTER_CORE = 1
ENGINE_PROGRAMS = ("llama-server",)


def descendants(root: int) -> list[int]:
    """Every process below root, from one read of /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def is_engine(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return argv0.decode(errors="replace").rsplit("/", 1)[-1] in ENGINE_PROGRAMS


def pin(pid: int, core: int) -> bool:
    """Puts every thread of pid on core; False when the process is gone."""
    try:
        threads = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return False
    for tid in threads:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.sched_setaffinity(tid, {core})
    return True


@dataclass
class Pinning:
    """Where the race's processes run; `enabled` False leaves everything where it is."""

    enabled: bool
    interval_s: float = 1.0
    root: int = field(default_factory=os.getpid)
    engines: set[int] = field(default_factory=set)
    routers: set[int] = field(default_factory=set)
    _task: asyncio.Task[None] | None = None

    def check(self) -> None:
        """Fails early, with the reason, on a machine where two cores cannot be told apart."""
        if not self.enabled:
            return
        cores = os.sched_getaffinity(0)
        if not {ENGINE_CORE, ROUTER_CORE} <= cores:
            raise SystemExit(
                f"--pin-engines needs cores {ENGINE_CORE} and {ROUTER_CORE}; "
                f"this process may use {sorted(cores)}"
            )

    def pin_self(self) -> None:
        """The race's own process (its client) and, by inheritance, all it starts later."""
        if self.enabled:
            pin(self.root, ROUTER_CORE)

    def sweep(self) -> None:
        if not self.enabled:
            return
        for pid in descendants(self.root):
            engine = is_engine(pid)
            if pin(pid, ENGINE_CORE if engine else ROUTER_CORE):
                (self.engines if engine else self.routers).add(pid)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.to_thread(self.sweep)
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self.enabled and self._task is None:
            self._task = asyncio.create_task(self._sweep_forever(), name="pinning")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def header(self) -> str:
        """The report's line on where the processes ran."""
        if not self.enabled:
            return "engines not pinned: every process may run on any core (--pin-engines pins)"
        return (
            f"engines pinned: {len(self.engines)} engine process(es) on core {ENGINE_CORE} "
            "(a restarted one counts again); "
            f"{len(self.routers)} router process(es) and the race's client on core "
            f"{ROUTER_CORE} (re-swept every {self.interval_s:g} s)"
        )
