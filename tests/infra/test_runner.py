"""A service whose main fails ends with a failing status, whatever threads it left behind."""

from __future__ import annotations

import subprocess
import sys

_FAILING_SERVICE = """
import threading
from infra.runner import run_until_signalled

async def main(stop):
    # What a half-opened client leaves: a non-daemon thread that never ends.
    threading.Thread(target=threading.Event().wait).start()
    raise RuntimeError("the store would not open")

run_until_signalled(main)
"""


def test_a_service_that_fails_to_start_exits_at_once_with_status_1() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_SERVICE], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 1
    assert "RuntimeError: the store would not open" in done.stderr


def test_a_service_stopped_by_sigterm_exits_cleanly() -> None:
    script = """
import os, signal
from infra.runner import run_until_signalled

async def main(stop):
    os.kill(os.getpid(), signal.SIGTERM)
    await stop.wait()
    print("stopped gracefully", flush=True)

run_until_signalled(main)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped gracefully"
