"""Where one message's time to first token goes, hop by hop, and what an idle platform burns.

1. One platform (simulated engine at 100x, router and safety off: the control plane alone,
   mutual TLS on) and, one after another for each round, the calls a message makes: the
   scheduler's pick, the node's token count, the node's Generate to its first chunk (what the
   gateway waits on), a SendMessage straight to the gateway over gRPC to its first text, and
   the same message through the edge over HTTP/SSE to its first text. The differences say
   what the gateway adds around its own calls and what the edge adds. The token count is a
   reference: a short message is planned on its bound and counted beside its answer, so the
   gateway waits on the pick and the first chunk only.
2. An idle platform as the race starts it (three llama.cpp nodes, scheduler, gateway, edge):
   each process's CPU per second of wall time over 30 s of nothing.

    .venv/bin/python bench/path_split.py [--rounds 100] [--idle-seconds 30] [--against DIR]
                                         [--profile DIR]

--rounds 0 skips the first part, --idle-seconds 0 the second.

--against DIR adds a second platform whose services import another checkout (say a worktree
of the previous commit: `git worktree add ../before HEAD~1`), measured in the same rounds,
taking turns: a change's effect side by side.

Prints a table and ends with one JSON line; results land in bench/results/path_split.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import grpc
from benchkit import checkout_env, cpu_seconds, pct, profiled, publish, top_frames
from hops import platform_settings, prompt, to_node, via_edge

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import chat_service_pb2_grpc as pb_grpc
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.types import Tier
from gateway.node_client import NodeClient
from gateway.scheduler_client import SchedulerClient

STEPS = ("pick", "tokenize", "node_first_chunk", "gateway_grpc", "edge_http")


async def gateway_first_text(chat: pb_grpc.ChatServiceStub, token: str, text: str) -> float:
    start = time.perf_counter()
    call = chat.SendMessage(
        pb.SendMessageRequest(conversation_id=f"s_{uuid.uuid4().hex[:10]}",
                              message_id=f"m_{uuid.uuid4().hex[:10]}", content=text),
        metadata=(("authorization", f"Bearer {token}"),),
    )  # fmt: skip
    try:
        async for response in call:
            if any(e.WhichOneof("kind") == "delta" for e in (response.event, *response.more)):
                return time.perf_counter() - start
    finally:
        call.cancel()
    raise RuntimeError("the gateway sent no text")


@dataclass
class Subject:
    """One platform under measurement, and the clients that take its hops one by one."""

    label: str
    platform: LocalPlatform
    scheduler: SchedulerClient
    nodes: NodeClient
    channel: grpc.aio.Channel
    samples: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STEPS})


async def open_subject(label: str, state: Path, checkout: str) -> Subject:
    settings = platform_settings(state / label, "sim", "control", 48, False)
    if checkout:
        settings.extra_env.update(checkout_env(checkout))
    platform = LocalPlatform(settings)
    await platform.start()
    tls = platform.tls("gateway")
    scheduler = SchedulerClient([platform.scheduler_address], tls=tls)
    channel = platform.channel(platform.gateway_address, "client")
    # The token count measured is the node's call, as a reference.
    return Subject(label, platform, scheduler, NodeClient(tls=tls, local_counts=False), channel)


async def one_round(subject: Subject, http: aiohttp.ClientSession, i: int, keep: bool) -> None:
    platform = subject.platform
    node, token = platform.node_addresses()[0], platform.tokens["free"]
    started = time.perf_counter()
    await subject.scheduler.pick(f"c{i}", "small", Tier.FREE, 100)
    pick = time.perf_counter() - started
    started = time.perf_counter()
    await subject.nodes.tokenize(node, [prompt(i, "A")])
    tokenize = time.perf_counter() - started
    first_chunk = (await to_node(subject.nodes, node, prompt(i, "B"), 48)).ttft_s
    chat = pb_grpc.ChatServiceStub(subject.channel)
    grpc_text = await gateway_first_text(chat, token, prompt(i, "C"))
    edge_text = (await via_edge(http, platform.edge_url, token, prompt(i, "D"))).ttft_s
    if keep:
        for step, seconds in zip(STEPS, (pick, tokenize, first_chunk, grpc_text, edge_text),
                                 strict=True):  # fmt: skip
            subject.samples[step].append(seconds * 1000)


async def hops(rounds: int, against: str) -> dict[str, dict[str, dict[str, float]]]:
    subjects: list[Subject] = []
    with tempfile.TemporaryDirectory() as state:
        try:
            subjects.append(await open_subject("this", Path(state), ""))
            if against:
                subjects.append(await open_subject("against", Path(state), against))
            async with aiohttp.ClientSession() as http:
                for i in range(rounds + 5):  # the first five warm channels and caches
                    order = subjects if i % 2 == 0 else subjects[::-1]
                    for subject in order:
                        await one_round(subject, http, i, keep=i >= 5)
        finally:
            for subject in subjects:
                await subject.channel.close()
                await subject.scheduler.close()
                await subject.nodes.close()
                await subject.platform.stop()
    return {subject.label: percentiles(subject.samples) for subject in subjects}


def percentiles(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        step: {"p50_ms": round(statistics.median(v), 2),
               "p90_ms": round(pct(v, 0.9), 2)}
        for step, v in samples.items()
    }  # fmt: skip


async def idle(
    seconds: float, against: str, profile: Path | None = None
) -> dict[str, dict[str, float]]:
    """Each process's CPU per second of wall time (all its threads, ended ones too, in 10 ms
    ticks: a long window resolves it); with `against`, both platforms idle over the same
    window, so the machine's noise falls on both alike. `profile`: py-spy's stacks of each of
    this checkout's processes land there as <name>.txt (Python frames: with native ones, py-spy
    counts threads waiting in gRPC's poller and aiosqlite's queue as busy)."""
    checkouts = {"this": ""} | ({"against": against} if against else {})
    with tempfile.TemporaryDirectory() as state:
        platforms = {}
        try:
            for label, checkout in checkouts.items():
                settings = PlatformSettings(state_dir=Path(state) / label,
                                            edge_listen="127.0.0.1:0", nodes=3, parallel=1,
                                            slot_context_tokens=2048)  # fmt: skip
                if checkout:
                    settings.extra_env.update(checkout_env(checkout))
                platforms[label] = LocalPlatform(settings)
                await platforms[label].start()
            await asyncio.sleep(5.0)  # start-up work settles
            pids = {
                (label, child.name): child.process.pid
                for label, platform in platforms.items()
                for child in platform.children
            }
            before = {key: cpu_seconds(pid) for key, pid in pids.items()}
            started = time.monotonic()
            with contextlib.ExitStack() as spies:
                for (label, name), pid in pids.items():
                    if profile is not None and label == "this":
                        spies.enter_context(profiled(pid, profile / f"{name}.txt", 1000))
                await asyncio.sleep(seconds)
            wall = time.monotonic() - started
            burn: dict[str, dict[str, float]] = {label: {} for label in platforms}
            for (label, name), pid in pids.items():
                spent = cpu_seconds(pid) - before[(label, name)]
                burn[label][name] = round(spent / wall * 1000, 2)
            return burn
        finally:
            for platform in platforms.values():
                await platform.stop()


def split_lines(label: str, split: dict[str, dict[str, float]]) -> list[str]:
    lines = [f"{label}:", f"  {'step':<18} {'p50 ms':>8} {'p90 ms':>8}"]
    for step, row in split.items():
        lines.append(f"  {step:<18} {row['p50_ms']:>8.2f} {row['p90_ms']:>8.2f}")
    own = gateway_own(split)
    edge = split["edge_http"]["p50_ms"] - split["gateway_grpc"]["p50_ms"]
    lines.append(f"  gateway's own time around its calls (p50s): {own:.2f} ms; the edge adds "
                 f"{edge:.2f} ms")  # fmt: skip
    return lines


def gateway_own(split: dict[str, dict[str, float]]) -> float:
    # No Tokenize before a short message's first token (docs/decisions.md, "Counting a
    # message"): the gateway waits on these two calls.
    calls = sum(split[s]["p50_ms"] for s in ("pick", "node_first_chunk"))
    return round(split["gateway_grpc"]["p50_ms"] - calls, 2)


async def run(args: argparse.Namespace) -> str:
    splits = await hops(args.rounds, args.against) if args.rounds > 0 else {}
    burns = (
        await idle(args.idle_seconds, args.against, args.profile) if args.idle_seconds > 0 else {}
    )
    lines = [
        f"path split: {args.rounds} rounds on the simulated engine (100x), control plane alone "
        "(router and safety off), mutual TLS; one call at a time"
        + (f"; 'against' imports {args.against}, rounds alternating" if args.against else ""),
    ]
    for label, split in splits.items():
        lines.extend(split_lines(label, split))
    result: dict = {"bench": "path_split", "rounds": args.rounds, "split": splits}
    if "this" in splits and "against" in splits:
        ratio = (
            splits["this"]["gateway_grpc"]["p50_ms"] / splits["against"]["gateway_grpc"]["p50_ms"]
        )
        result["gateway_grpc_p50_ratio"] = round(ratio, 3)
        lines.append(f"gateway TTFT p50, this / against: {ratio:.3f}")
    for label, burn in burns.items():
        lines.append(f"idle platform ({label}), ms of CPU per s over {args.idle_seconds:.0f} s "
                     "(llama.cpp processes not counted):")  # fmt: skip
        for name, ms in burn.items():
            lines.append(f"  {name:<14} {ms:>6.2f}")
        total = round(sum(burn.values()), 2)
        lines.append(f"  {'total':<14} {total:>6.2f}   (goal 2)")
        suffix = "" if label == "this" else f"_{label}"
        result |= {f"idle_cpu_ms_per_s{suffix}": burn, f"idle_total_ms_per_s{suffix}": total}
    if args.profile is not None:
        for stacks in sorted(args.profile.glob("*.txt")):
            lines.extend([f"idle profile of {stacks.stem} (py-spy):", top_frames(stacks, 15)])
    lines.append(json.dumps(result))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="0 skips the idle part")
    parser.add_argument("--against", default="", help="another checkout, measured side by side")
    parser.add_argument("--profile", type=Path, help="py-spy stacks of each idle process here")
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    publish("path_split", asyncio.run(run(args)))


if __name__ == "__main__":
    sys.exit(main())
