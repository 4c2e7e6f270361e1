"""The fleet as operators see it: `nodes` (with --watch), `drain`, `undrain` and `ladder`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from clients.admin_client import AdminClient, Ladder, Node
from clients.chatctl.addresses import admin_client
from clients.chatctl.output import (
    duration,
    emit,
    percent,
    plain,
    print_json,
    table,
    table_or,
    when,
    yes_no,
)

NODE_HEADERS = (
    "NODE",
    "MODEL",
    "POOL",
    "STATE",
    "KV%",
    "FREE KV",
    "QUEUED PREFILL",
    "RUNNING",
    "WAITING",
    "PREFIX HIT",
    "AGE",
)
HISTORY_SHOWN = 10


# nodes ------------------------------------------------------------------------------------------


def report_age_s(node: Node, now: datetime) -> float | None:
    # A scheduler that stamps reports with its monotonic clock instead of wall time sends a
    # 1970 date; an age computed from it would be nonsense, so there is none.
    if node.last_report_at.year < 2000:
        return None
    return (now - node.last_report_at).total_seconds()


def node_rows(nodes: Sequence[Node], now: datetime) -> list[list[object]]:
    return [
        [
            n.node_id,
            n.model,
            n.pool,
            n.state,
            percent(n.kv_usage),
            n.free_kv_tokens,
            n.queued_prefill_tokens,
            n.running_requests,
            n.waiting_requests,
            percent(n.prefix_hit_rate),
            "?" if (age := report_age_s(n, now)) is None else duration(age),
        ]
        for n in nodes
    ]


async def show_nodes(admin: AdminClient, args: argparse.Namespace) -> None:
    nodes = await admin.nodes(args.pool)
    now = datetime.now(UTC)
    emit(
        args.json,
        [{**plain(n), "last_report_age_s": report_age_s(n, now)} for n in nodes],
        table_or(NODE_HEADERS, node_rows(nodes, now), "no nodes"),
    )


async def nodes(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        if args.watch is None:
            await show_nodes(admin, args)
            return 0
        await watch(lambda: show_nodes(admin, args), args.watch, args.json)
    return 0


async def watch(render: Callable[[], Any], every_s: float, as_json: bool) -> None:
    """Renders until Ctrl-C; a terminal is redrawn in place, a pipe gets one block per tick."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    while not stop.is_set():
        if not as_json and sys.stdout.isatty():
            print("\x1b[H\x1b[2J", end="")
            print(f"every {every_s:g}s, Ctrl-C stops    {datetime.now().strftime('%H:%M:%S')}\n")
        await render()
        if not as_json and not sys.stdout.isatty():
            print(flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


# drain, undrain ---------------------------------------------------------------------------------


async def set_draining(args: argparse.Namespace, draining: bool) -> int:
    async with admin_client(args) as admin:
        await (admin.drain if draining else admin.undrain)(args.node)
    text = (
        f"node {args.node} is draining: no new answers go to it, running ones finish"
        if draining
        else f"node {args.node} takes new answers again"
    )
    emit(args.json, {"node_id": args.node, "draining": draining}, text)
    return 0


async def drain(args: argparse.Namespace) -> int:
    return await set_draining(args, True)


async def undrain(args: argparse.Namespace) -> int:
    return await set_draining(args, False)


# ladder -----------------------------------------------------------------------------------------


def print_ladder(state: Ladder) -> None:
    print(f"rung        {state.rung}{' (pinned)' if state.pinned else ''}")
    print(f"busy share  {percent(state.busy_share)}  (the large pool's, at the last tick)")
    print(f"pinned      {yes_no(state.pinned)}")
    print(f"leading     {yes_no(state.leading)}  (whether this scheduler moves it)")
    if not state.history:
        print("history     none")
        return
    print(f"history     (newest last; {len(state.history)} kept)")
    rows = [
        [when(c.at), c.from_rung, c.to_rung, percent(c.busy_share), c.reason]
        for c in state.history[-HISTORY_SHOWN:]
    ]
    print(table(("AT", "FROM", "TO", "BUSY", "REASON"), rows), flush=True)


async def ladder(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        if args.pin is not None:
            state = await admin.pin(args.pin)
        elif args.unpin:
            state = await admin.pin(None)
        else:
            state = await admin.ladder()
    if args.json:
        print_json(state)
    else:
        print_ladder(state)
    return 0
