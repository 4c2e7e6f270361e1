"""What every benchmark here shares: one core to run on, and one way to publish its result."""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
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


@contextlib.contextmanager
def profiled(pid: int, out: Path | None, rate: int = 250, native: bool = False) -> Iterator[None]:
    """Samples one process with py-spy while the block runs and leaves its stacks in `out`
    (collapsed format: one line per stack, then its sample count); nothing when out is None.
    `native` adds the C frames (gRPC core, uvloop), where a Python-only profile shows the
    event loop's own frame."""
    if out is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    recorder = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
         "--output", str(out), *(["--native"] if native else ["--nonblocking"])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=60)


def top_frames(stacks: Path, limit: int = 25) -> str:
    """The frames that hold the most samples of a collapsed-stacks file: own (the frame on top)
    and total (anywhere in the stack), as shares of all samples."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in stacks.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        samples += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            total[frame] += int(count)
    lines = [f"{samples} samples; own share, then total share"]
    lines += [f"  own {n / samples:6.1%}  {frame}" for frame, n in own.most_common(limit)]
    lines += [f"  tot {n / samples:6.1%}  {frame}" for frame, n in total.most_common(limit)]
    return "\n".join(lines)


def checkout_env(checkout: str) -> dict[str, str]:
    """The environment that makes a platform's services import another checkout (a side-by-side
    run's `--against`). `python -m` puts the working directory first on the path, ahead of
    PYTHONPATH: run from this checkout, the services would import this one. PYTHONSAFEPATH
    leaves it out, so the other checkout (and its generated code) comes first."""
    return {"PYTHONPATH": f"{checkout}:{checkout}/gen", "PYTHONSAFEPATH": "1"}
