"""Runs a service's main coroutine on uvloop until SIGINT or SIGTERM, then stops it gracefully."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import uvloop

from infra.config import load_config

T = TypeVar("T")


def run_service(
    config_type: type[T],
    section: str,
    serve: Callable[[T, asyncio.Event], Coroutine[Any, Any, None]],
    description: str,
) -> None:
    """A service's main(): `--config FILE` (YAML) plus environment overrides, then serve."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", help=f"YAML file with a {section}: section")
    args = parser.parse_args()
    config = load_config(config_type, section, args.config)
    run_until_signalled(lambda stop: serve(config, stop))


def run_until_signalled(main: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
    async def supervise() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    try:
        uvloop.run(supervise())
    except BaseException:
        # A service that failed (at startup, most often) must end, and say so by its status.
        # Left to the interpreter, a non-daemon thread of a client it had opened (aiosqlite
        # runs one per connection) would keep the process alive forever, holding its ports,
        # ignoring SIGTERM (its handler belonged to the closed loop) and never ready.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def write_ready_file(path: str | None, payload: dict[str, Any]) -> None:
    """Tells a parent process (chatctl up, tests) which ports the service bound."""
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)
