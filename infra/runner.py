"""Runs a service's main coroutine on uvloop until SIGINT or SIGTERM, then stops it gracefully."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop


def run_until_signalled(main: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
    async def supervise() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    uvloop.run(supervise())


def write_ready_file(path: str | None, payload: dict[str, Any]) -> None:
    """Tells a parent process (chatctl up, tests) which ports the service bound."""
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)
