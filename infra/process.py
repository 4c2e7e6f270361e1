"""Child processes that do not outlive their parent."""

from __future__ import annotations

import shutil


def dies_with_parent(argv: list[str], signal_name: str = "TERM") -> list[str]:
    """The command line that runs `argv` so that the kernel sends it `signal_name` (SIGTERM
    by default) when the process that started it dies, even by SIGKILL. An engine without its
    sidecar, or a service without the chatctl that started it, would otherwise hold its port
    and memory forever.

    util-linux's `setpriv` sets the death signal and then execs `argv` in the same process, so
    the child's pid is unchanged. Doing the same with a Python `preexec_fn` ran Python (and a
    dlopen) between fork and exec in a parent full of gRPC threads, which aborted the child
    now and then; without a preexec_fn, subprocess uses vfork and runs nothing in between.
    Without `setpriv` (not Linux), the command runs as is. Left open: a parent killed in the
    few milliseconds between the spawn and setpriv's prctl leaves the child without the
    signal (setpriv does not check whether its parent already died)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return list(argv)
    return [setpriv, "--pdeathsig", signal_name, "--", *argv]
