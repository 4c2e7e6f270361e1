"""The fleet simulator's hot modules compiled with mypyc: the same source files, built as C
extensions into a directory of their own, for runs where the simulator's speed matters (the
whole region, bench/sim_region.py).

mypyc compiles type-annotated Python to C; attribute reads and calls between compiled
functions skip the interpreter, and on the simulator's loop (a replica's step, the picker, the
gateway's policies) that halves the time per message (measured side by side in
bench/sim_region.py; the results are the same to the last digit, tests/fleet/test_compiled.py).

The build copies the `domain` and `fleet` packages whole into `build/sim-mypyc` and compiles the
modules in `COMPILED` there, in place, so a process that puts that directory first on its path
imports every module of both packages from the copy: compiled ones as extensions, the rest as
the same Python. The source tree is never touched: tests, services and `chatctl` keep running
the plain modules. A digest of the packages' sources (and of Python's and mypy's versions) is
kept beside the build, so a changed source is rebuilt, never run stale.

A compiled module checks its annotations at run time (an `int` attribute refuses a float), and
mypyc refuses to build a module mypy finds a type error in: the listed modules must stay
strictly typed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("domain", "fleet")
# What the simulator's loop runs through; the rest (reports, scenarios, plots) runs once.
COMPILED = (
    "domain/context.py",
    "domain/ladder.py",
    "domain/limiter.py",
    "domain/picker.py",
    "domain/pool_index.py",
    "domain/pools.py",
    "domain/prefix_cache.py",
    "domain/rendezvous_columns.py",
    "domain/replica_hardware.py",
    "domain/replica_requests.py",
    "domain/replica_sim.py",
    "domain/router.py",
    "domain/shedding.py",
    "domain/start_wait.py",
    "domain/tiers.py",
    "domain/types.py",
    "fleet/directory.py",
    "fleet/events.py",
    "fleet/recorder.py",
    "fleet/region.py",
    "fleet/regions.py",
    "fleet/replicas.py",
    "fleet/sim_gateway.py",
    "fleet/workload.py",
)
STAMP = ".source-digest"


class BuildError(RuntimeError):
    """mypyc could not build the modules (a type error, no C compiler); the message says why."""


@dataclass(frozen=True, slots=True)
class Build:
    path: Path  # put first on sys.path (PYTHONPATH) to import the compiled modules
    built: bool  # False when an up-to-date build was reused
    seconds: float  # how long building took (0 when reused)


def source_digest(root: Path = REPO) -> str:
    """Names and contents of every file of the copied packages, with the versions of Python
    and mypy that compile them: any change means a new build."""
    digest = hashlib.sha256()
    digest.update(f"{sys.version}|{_mypy_version()}|{','.join(COMPILED)}".encode())
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def build(root: Path = REPO, out: Path | None = None) -> Build:
    """Builds the compiled simulator under `out` (build/sim-mypyc by default), or reuses the
    build there when the sources have not changed since. About a minute on two cores."""
    out = out or root / "build" / "sim-mypyc"
    missing = [p for p in PACKAGES if not (root / p).is_dir()]
    if missing:
        raise BuildError(f"{root} has no {', '.join(missing)} package to compile")
    want = source_digest(root)
    stamp = out / STAMP
    if stamp.is_file() and stamp.read_text() == want:
        return Build(out, built=False, seconds=0.0)
    started = time.perf_counter()
    staging = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        copy_packages(root, staging)
        _mypyc(staging)
        (staging / STAMP).write_text(want)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Build(out, built=True, seconds=time.perf_counter() - started)


def copy_packages(root: Path, to: Path) -> None:
    """The packages' sources and data under `root`, copied to `to` (byte code left behind)."""
    for package in PACKAGES:
        shutil.copytree(root / package, to / package, ignore=shutil.ignore_patterns("__pycache__"))


def _mypyc(where: Path) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mypyc", *COMPILED],
            cwd=where,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as error:
        raise BuildError(f"could not run mypyc: {error}") from error
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()
        # mypy's errors come first; the compiler's, if it got that far, last.
        errors = [line for line in output if ": error:" in line] or output[-20:]
        raise BuildError("mypyc failed:\n" + "\n".join(errors))


def is_compiled(module: ModuleType) -> bool:
    """Whether a module was imported from a compiled extension rather than its source."""
    return Path(module.__file__ or "").suffix in (".so", ".pyd")


def _mypy_version() -> str:
    try:
        from mypy.version import __version__
    except ImportError:
        return "none"
    return __version__


def main() -> None:
    """`python -m fleet.compiled`: builds (or finds up to date) and prints the directory."""
    try:
        done = build()
    except BuildError as error:
        sys.exit(str(error))
    print(done.path if not done.built else f"{done.path} (built in {done.seconds:.0f} s)")


if __name__ == "__main__":
    main()
