"""Runs a service's main coroutine on uvloop until SIGINT or SIGTERM, then stops it gracefully."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
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

    uvloop.run(supervise())


def write_ready_file(path: str | None, payload: dict[str, Any]) -> None:
    """Tells a parent process (chatctl up, tests) which ports the service bound."""
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)
