"""`chatctl regions restart NAME`: one region of a running `chatctl up --regions` restarted.

The `up --regions` process owns every region's processes, so it is the one that restarts
them: it listens on a Unix socket in its state dir (`regions.sock`, 0600, so only its owner
may ask), one JSON line asked and one answered. A socket rather than a signal: the request
names the region, and the answer comes when the region is back (or says why not).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from clients.chatctl.addresses import state_dir
from clients.chatctl.output import CtlError, emit
from clients.chatctl.platform import LocalPlatform, PlatformError

CONTROL_SOCKET = "regions.sock"
# A region's restart: its services stopped, started again and its nodes ready (a cold
# llama.cpp start included).
RESTART_TIMEOUT_S = 300.0
# The longest path a Unix socket may have (sun_path, with its terminating NUL).
MAX_SOCKET_PATH = 107
MAX_REQUEST_BYTES = 4096


def control_path(state: Path) -> Path:
    return state / CONTROL_SOCKET


@contextlib.asynccontextmanager
async def control_server(
    state: Path, platforms: dict[str, LocalPlatform], restarted: Callable[[], object]
) -> AsyncIterator[str]:
    """Serves restarts while open; yields '' or why restarts cannot be asked for."""
    path = control_path(state)
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        yield f"`chatctl regions restart` is off: {path} is too long for a socket"
        return
    path.unlink(missing_ok=True)
    one_at_a_time = asyncio.Lock()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
        except (ValueError, ConnectionError):
            line = b""  # past MAX_REQUEST_BYTES, or gone
        async with one_at_a_time:
            reply = await _restart(line, platforms, restarted)
        writer.write(json.dumps(reply).encode() + b"\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(answer, path, limit=MAX_REQUEST_BYTES)
    os.chmod(path, 0o600)
    try:
        yield ""
    finally:
        server.close()
        path.unlink(missing_ok=True)


async def _restart(
    line: bytes, platforms: dict[str, LocalPlatform], restarted: Callable[[], object]
) -> dict[str, Any]:
    try:
        name = json.loads(line)["restart"]
    except (ValueError, KeyError, TypeError):
        return {"error": 'ask {"restart": "<region>"}'}
    platform = platforms.get(name) if isinstance(name, str) else None
    if platform is None:
        return {"error": f"no region {name!r}; the regions are {', '.join(platforms)}"}
    start = time.monotonic()
    try:
        await platform.restart_all()
    except PlatformError as error:
        return {"error": f"region {name!r} did not come back: {error}"}
    restarted()
    return {"region": name, "edge": platform.edge_url, "gateway": platform.gateway_address,
            "seconds": round(time.monotonic() - start, 1)}  # fmt: skip


async def restart_region(args: argparse.Namespace) -> int:
    """`chatctl regions restart NAME`: asks the running `up --regions` and waits for it."""
    path = control_path(state_dir(args).resolve())
    try:
        reader, writer = await asyncio.open_unix_connection(path)
    except OSError as error:
        raise CtlError(
            f"no `chatctl up --regions` answers at {path}; start one (`--background` keeps "
            "it running)"
        ) from error
    try:
        writer.write(json.dumps({"restart": args.name}).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), args.timeout)
    except TimeoutError:
        raise CtlError(f"region {args.name!r} was not back in {args.timeout:.0f} s") from None
    finally:
        writer.close()
    reply = json.loads(line) if line else {"error": "`chatctl up --regions` stopped meanwhile"}
    if "error" in reply:
        raise CtlError(reply["error"])
    emit(args.json, reply,
         f"restarted region {reply['region']} in {reply['seconds']} s: edge {reply['edge']}  "
         f"gateway {reply['gateway']}")  # fmt: skip
    return 0


def add_region_actions(regions: argparse.ArgumentParser) -> None:
    """`chatctl regions restart NAME` (plain `chatctl regions` lists them). Its flags go after
    the action, as `users`' do."""
    actions = regions.add_subparsers(dest="action", metavar="ACTION")
    restart = actions.add_parser(
        "restart", help="restart one region of the running `chatctl up --regions`"
    )
    restart.add_argument("name", metavar="NAME", help="the region")
    restart.add_argument("--json", action="store_true", help="print machine-readable JSON")
    restart.add_argument(
        "--state-dir",
        default=os.environ.get("CHAT_STATE_DIR", ".chat"),
        help="the state dir `chatctl up --regions` runs from (default .chat, or CHAT_STATE_DIR)",
    )
    restart.add_argument(
        "--timeout", type=float, default=RESTART_TIMEOUT_S, help="seconds to wait for it"
    )
    restart.set_defaults(handler=restart_region)
