"""The edge's link to its gateway against a call per answer, at chat pace: CPU a turn of the
edge and the gateway, and time to first token, with answers on the link (`gateway_links: 1`)
and with a gRPC call each (`gateway_links: 0`), side by side.

One platform (scheduler, one simulated node at about 40 tokens/s an answer, one gateway) and
two edges in front of the same gateway, one of each kind. In each round, each edge in turn
serves N x --turns streamed completions (`/v1/chat/completions`, as the race sends them)
with N at once; the order alternates between rounds. The gateway's CPU is counted
during each edge's phase only, so both kinds are measured on the same gateway process.

    .venv/bin/python bench/edge_link.py [--at-once 1,16] [--turns 60] [--rounds 2]
        [--tokens 32] [--name edge_link]

Prints a table and ends with one JSON line; the result lands in bench/results/<name>.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from benchkit import cpu_seconds, pct, publish

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from clients.chatctl.platform import LocalPlatform, PlatformSettings  # noqa: E402

KINDS = ("link", "calls")


async def start(args: argparse.Namespace) -> LocalPlatform:
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=Path(tempfile.mkdtemp(prefix="edge-link-")),
            edge_listen="127.0.0.1:0",
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": f"{args.tokens},{args.tokens}",
                "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e12",
                "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "1000000",
                "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
                "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
                "CHAT_GATEWAY_ROUTER": "false",
                "CHAT_EDGE_MAX_REQUESTS_PER_IP": "0",
                "CHAT_GATEWAY_LOG_LEVEL": "warning",
                "CHAT_EDGE_LOG_LEVEL": "warning",
            },
        )
    )
    await platform.start()
    await platform._spawn(
        "edge-calls", "edge.main",
        {**platform._edge_env("edge-calls"), "CHAT_EDGE_LISTEN": "127.0.0.1:0",
         "CHAT_EDGE_GATEWAY_LINKS": "0"},
    )  # fmt: skip
    return platform


async def turn(http: aiohttp.ClientSession, url: str, token: str, i: int) -> float:
    """One streamed completion; its time to first text, in ms."""
    question = [{"role": "user", "content": f"Tell me about tide number {i}."}]
    body = {"model": "auto", "max_tokens": 64, "stream": True, "messages": question}
    started = time.monotonic()
    first = 0.0
    async with http.post(f"{url}/v1/chat/completions", json=body,
                         headers={"Authorization": f"Bearer {token}"}) as response:  # fmt: skip
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {await response.text()}")
        async for line in response.content:
            if not first and line.startswith(b"data: ") and b'"content":"' in line:
                if b'"content":""' not in line:
                    first = time.monotonic() - started
    return first * 1000


async def phase(platform: LocalPlatform, kind: str, at_once: int, turns: int,
                offset: int) -> dict[str, float]:  # fmt: skip
    edge = platform._child("edge" if kind == "link" else "edge-calls")
    gateway = platform._child("gateway")
    url = str(edge.ready["http"])
    token = platform.tokens["plus"]
    pids = {"edge": edge.process.pid, "gateway": gateway.process.pid}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    ttfts: list[float] = []
    queue = iter(range(offset, offset + turns))
    async with aiohttp.ClientSession() as http:

        async def worker() -> None:
            for i in queue:
                ttfts.append(await turn(http, url, token, i))

        await asyncio.gather(*(worker() for _ in range(at_once)))
    seconds = time.monotonic() - started
    used = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    return {
        "turns": turns,
        "seconds": round(seconds, 2),
        "edge_cpu_ms_per_turn": round(used["edge"] * 1000 / turns, 2),
        "gateway_cpu_ms_per_turn": round(used["gateway"] * 1000 / turns, 2),
        "ttft_p50_ms": round(pct(ttfts, 0.5), 1),
        "ttft_p99_ms": round(pct(ttfts, 0.99), 1),
    }


def merged(runs: list[dict[str, float]]) -> dict[str, float]:
    turns = sum(r["turns"] for r in runs)
    return {
        "turns": turns,
        "edge_cpu_ms_per_turn": round(
            sum(r["edge_cpu_ms_per_turn"] * r["turns"] for r in runs) / turns, 2
        ),
        "gateway_cpu_ms_per_turn": round(
            sum(r["gateway_cpu_ms_per_turn"] * r["turns"] for r in runs) / turns, 2
        ),
        "ttft_p50_ms": round(sorted(r["ttft_p50_ms"] for r in runs)[len(runs) // 2], 1),
        "ttft_p99_ms": max(r["ttft_p99_ms"] for r in runs),
    }


async def run(args: argparse.Namespace) -> None:
    levels = [int(n) for n in args.at_once.split(",") if n.strip()]
    platform = await start(args)
    results: dict[str, dict[str, dict[str, float]]] = {}
    try:
        async with aiohttp.ClientSession() as http:  # one untimed turn each: warm paths
            for kind in KINDS:
                edge = platform._child("edge" if kind == "link" else "edge-calls")
                await turn(http, str(edge.ready["http"]), platform.tokens["plus"], -1)
        offset = 0
        for at_once in levels:
            runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
            for round_ in range(args.rounds):
                order = KINDS if round_ % 2 == 0 else tuple(reversed(KINDS))
                for kind in order:
                    turns = args.turns * at_once
                    result = await phase(platform, kind, at_once, turns, offset)
                    offset += turns
                    print(f"{at_once} at once, round {round_}, {kind}: {result}", flush=True)
                    runs[kind].append(result)
            results[str(at_once)] = {kind: merged(runs[kind]) for kind in KINDS}
    finally:
        await platform.stop()
    lines = [
        f"edge link: streamed completions of {args.tokens} tokens (simulated node, ~40 tokens/s "
        f"an answer) through one gateway, {args.turns} turns a phase, {args.rounds} rounds, "
        "each edge in turn; CPU of the edge and of the gateway during its phases",
        "| answers at once | kind | edge CPU ms/turn | gateway CPU ms/turn | TTFT p50 ms "
        "| TTFT p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for level, by_kind in results.items():
        for kind, r in by_kind.items():
            lines.append(f"| {level} | {kind} | {r['edge_cpu_ms_per_turn']} | "
                         f"{r['gateway_cpu_ms_per_turn']} | {r['ttft_p50_ms']} | "
                         f"{r['ttft_p99_ms']} |")  # fmt: skip
    summary = {"bench": "edge_link", "tokens": args.tokens, "turns": args.turns,
               "rounds": args.rounds, "results": results}  # fmt: skip
    publish(args.name, "\n".join(lines) + "\n" + json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--at-once", default="1,16", help="answers at once, comma-separated")
    parser.add_argument("--turns", type=int, default=60, help="turns a phase per answer at once")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32, help="tokens an answer")
    parser.add_argument("--name", default="edge_link")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
