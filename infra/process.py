"""Child processes that do not outlive their parent."""

from __future__ import annotations

import ctypes
import ctypes.util
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Runs in a child between fork and exec (preexec_fn): when the parent dies, even by
    SIGKILL, the kernel sends the child SIGTERM. An engine without its sidecar, or a service
    without the chatctl that started it, would otherwise hold its port and memory forever."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
