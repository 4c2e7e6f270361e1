"""A child started through dies_with_parent ends when its parent is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from infra.process import dies_with_parent

_PARENT = """
import subprocess, sys, time
from infra.process import dies_with_parent
child = subprocess.Popen(dies_with_parent(["sleep", "60"]))
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by init) counts as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def _command(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as comm:
        return comm.read().strip()


def test_the_child_is_killed_when_its_parent_is_sigkilled() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    ) as parent:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        assert _alive(child_pid)
        # setpriv sets the death signal and then execs the command: a parent killed before
        # that (a few ms after the spawn) leaves no signal behind, which is not what this
        # test is about. Once the child runs `sleep`, the signal is set.
        deadline = time.monotonic() + 5
        while _command(child_pid) != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _command(child_pid) == "sleep"
        parent.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 5
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child_pid)


def test_the_command_keeps_its_arguments_and_its_pid() -> None:
    argv = dies_with_parent([sys.executable, "-c", "import os; print(os.getpid())"])
    assert argv[-3:] == [sys.executable, "-c", "import os; print(os.getpid())"]
    assert dies_with_parent(["true"], "KILL")[:3][-2:] == ["--pdeathsig", "KILL"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as run:
        out, _ = run.communicate(timeout=10)
    assert int(out) == run.pid
