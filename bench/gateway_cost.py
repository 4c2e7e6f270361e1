"""What the gateway itself costs per message, and how fast the shared token bucket is.

1. Gateway CPU per message: a real scheduler, gateway and nodeagent with the simulated
   engine (so no model competes for the CPU), messages sent straight to the gateway over
   gRPC; the gateway process's own CPU time (utime + stime from /proc) over the messages.
   Router, input check and streaming output check are on, as in production.
2. Added time to first token: the same prompts sent through the gateway and straight to the
   nodeagent's Generate stream, alternating, one at a time.
3. The limiter: reserve + settle pairs per second on one real Redis (one Lua script each).

    .venv/bin/python bench/gateway_cost.py [--messages 300] [--rounds 60] [--limiter-seconds 5]

Prints a table and ends with one JSON line; results land in bench/results/gateway.txt.
Goals (docs/decisions.md, "Performance goals"): under 1 ms of gateway CPU per message; at
least 10,000 pairs/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from benchkit import cpu_seconds, pct, profiled, publish, top_frames

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chat.v1 import common_pb2, node_service_pb2, node_service_pb2_grpc
from clients.chat_client import ChatClient, Delta
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain import limiter
from domain.types import Tier
from gateway.main import GatewayConfig
from gateway.redis_buckets import RESERVE_LUA, SETTLE_LUA, RedisBuckets, connect
from tests.servers import run_redis

ANSWER_TOKENS = 32
TOPICS = ["rivers", "owls", "bread", "comets", "glass", "tides", "maps", "bees"]


def prompt(i: int) -> str:
    return f"Message {i}: tell me one thing about {TOPICS[i % len(TOPICS)]}."


async def through_gateway(chat: ChatClient, text: str) -> float:
    start = time.perf_counter()
    first = None
    async for event in chat.send(f"b_{uuid.uuid4().hex[:10]}", text):
        if first is None and isinstance(event, Delta):
            first = time.perf_counter()
    assert first is not None, "the answer had no text"
    return first - start


async def straight_to_node(node: node_service_pb2_grpc.NodeServiceStub, text: str) -> float:
    system = GatewayConfig().system_prompt
    start_request = node_service_pb2.GenerateStart(
        request_id=uuid.uuid4().hex,
        turns=[
            common_pb2.Turn(role=common_pb2.ROLE_SYSTEM, content=system),
            common_pb2.Turn(role=common_pb2.ROLE_USER, content=text),
        ],
        max_tokens=ANSWER_TOKENS,
        tier=common_pb2.TIER_FREE,
        temperature=0.7,
    )
    start = time.perf_counter()
    first = None
    call = node.Generate(iter([node_service_pb2.GenerateRequest(start=start_request)]))
    async for response in call:
        if first is None and response.HasField("chunk"):
            first = time.perf_counter()
    assert first is not None
    return first - start


# Gateway settings measured one after another: production defaults, and the same gateway with
# its per-message policies off, to show what the router and the safety checks cost. In
# "production" the output check holds 50 tokens back, so a 32-token answer shows no text until
# it ends: its TTFT is the hold-back by design, and the added TTFT is read from "bare".
CONFIGS = {
    "production": {},
    "bare": {"CHAT_GATEWAY_SAFETY": "false", "CHAT_GATEWAY_ROUTER": "false"},
}


async def gateway_cost(
    messages: int,
    rounds: int,
    concurrency: int,
    env: dict[str, str],
    insecure: bool,
    profile: Path | None = None,
    prepare: Callable[[LocalPlatform], Awaitable[None]] | None = None,
) -> dict:
    """prepare: what the platform is given before the messages (bench/memory.py's entries)."""
    with tempfile.TemporaryDirectory() as state:
        platform = LocalPlatform(
            PlatformSettings(
                state_dir=Path(state),
                edge_listen="127.0.0.1:0",
                insecure=insecure,
                extra_env={
                    "CHAT_NODEAGENT_ENGINE": "sim",
                    "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                    "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": str(ANSWER_TOKENS),
                    "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e12",
                    "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": str(concurrency + 1),
                    "CHAT_GATEWAY_LOG_LEVEL": "warning",
                    **env,
                },
            )
        )
        await platform.start()
        try:
            if prepare is not None:
                await prepare(platform)
            gateway_pid = next(c.process.pid for c in platform.children if c.name == "gateway")
            async with ChatClient(
                platform.gateway_address, platform.tokens["free"], tls=platform.tls("client")
            ) as chat:
                for i in range(20):  # warm up channels, caches, the scheduler's table
                    await through_gateway(chat, prompt(i))
                cpu_before, wall_before = cpu_seconds(gateway_pid), time.perf_counter()
                queue = list(range(messages))

                async def worker() -> None:
                    while queue:
                        await through_gateway(chat, prompt(queue.pop()))

                with profiled(gateway_pid, profile, native=True):
                    await asyncio.gather(*(worker() for _ in range(concurrency)))
                cpu = cpu_seconds(gateway_pid) - cpu_before
                wall = time.perf_counter() - wall_before
                ttft: dict[str, list[float]] = {"gateway": [], "node": []}
                async with platform.channel(platform.node_addresses()[0], "gateway") as channel:
                    node = node_service_pb2_grpc.NodeServiceStub(channel)
                    for i in range(rounds):
                        order = ["gateway", "node"] if i % 2 == 0 else ["node", "gateway"]
                        for path in order:
                            text = prompt(10_000 + i)
                            if path == "gateway":
                                ttft[path].append(await through_gateway(chat, text))
                            else:
                                ttft[path].append(await straight_to_node(node, text))
        finally:
            await platform.stop()
    gateway_ms = [t * 1000 for t in ttft["gateway"]]
    node_ms = [t * 1000 for t in ttft["node"]]
    return {
        "messages": messages,
        "concurrency": concurrency,
        "gateway_cpu_ms_per_message": cpu * 1000 / messages,
        "messages_per_s": messages / wall,
        "ttft_gateway_p50_ms": statistics.median(gateway_ms),
        "ttft_gateway_p99_ms": pct(gateway_ms, 0.99),
        "ttft_node_p50_ms": statistics.median(node_ms),
        "ttft_node_p99_ms": pct(node_ms, 0.99),
    }


async def limiter_pairs(seconds: float, concurrency: int) -> dict:
    with run_redis() as server:
        client = connect(server.url)
        limits = {Tier.FREE: limiter.Limit.refilling_in(1e12, 3 * 3600)}
        limits[Tier.PLUS] = limits[Tier.FREE]
        buckets = RedisBuckets(client, limits)
        users = [f"u{i}" for i in range(1000)]
        done = 0
        deadline = time.perf_counter() + seconds

        async def worker(seed: int) -> None:
            nonlocal done
            rng = random.Random(seed)
            while time.perf_counter() < deadline:
                user = rng.choice(users)
                decision = await buckets.reserve(user, Tier.FREE, 4000.0)
                assert decision.admitted
                await buckets.settle(user, Tier.FREE, 4000.0, 1200.0)
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - start
        await client.aclose()
        server_side = redis_capacity(server.port)
    return {
        "pairs_per_s": done / elapsed,
        "concurrency": concurrency,
        "seconds": elapsed,
        **server_side,
    }


def redis_capacity(port: int, requests: int = 100_000, clients: int = 50) -> dict:
    """What one Redis sustains for the limiter's two scripts when many gateways call it:
    redis-benchmark's clients play the gateways, each with one call in flight."""
    rates = {}
    scripts = {"reserve": (RESERVE_LUA, ["4000"]), "settle": (SETTLE_LUA, ["4000", "1200"])}
    for name, (script, extra) in scripts.items():
        sha = subprocess.run(["redis-cli", "-p", str(port), "SCRIPT", "LOAD", script],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        command = ["EVALSHA", sha, "1", "chat:bucket:__rand_int__", "1e12", "1e6", *extra]
        out = subprocess.run(
            ["redis-benchmark", "-p", str(port), "-n", str(requests), "-c", str(clients),
             "-r", "1000", "--csv", *command],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        rates[name] = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
    pairs = 1 / (1 / rates["reserve"] + 1 / rates["settle"])
    return {"redis_reserve_per_s": rates["reserve"], "redis_settle_per_s": rates["settle"],
            "redis_pairs_per_s": pairs}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--limiter-seconds", type=float, default=5.0)
    parser.add_argument("--limiter-concurrency", type=int, default=64)
    parser.add_argument(
        "--insecure", action="store_true", help="services in plaintext (default: mutual TLS)"
    )
    parser.add_argument(
        "--profile", type=Path, help="folder for py-spy's stacks of the gateway, one per config"
    )
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    costs = {}
    for name, env in CONFIGS.items():
        stacks = args.profile / f"gateway-{name}.txt" if args.profile else None
        costs[name] = asyncio.run(
            gateway_cost(args.messages, args.rounds, args.concurrency, env, args.insecure, stacks)
        )
        if stacks:
            print(f"== {name}\n{top_frames(stacks)}")
    pairs = asyncio.run(limiter_pairs(args.limiter_seconds, args.limiter_concurrency))
    lines = [
        f"gateway: {args.messages} messages ({args.concurrency} at once) to one gateway, "
        f"simulated 8B engine, {ANSWER_TOKENS}-token answers; 'production' = defaults (router, "
        "input check, output check holding 50 tokens back), 'bare' = router and safety off; "
        + ("services in plaintext" if args.insecure else "mutual TLS between the services"),
        f"{'config':<11} {'CPU ms/msg':>10} {'msg/s':>7} {'TTFT p50':>9} {'p99':>7} "
        f"{'node p50':>9} {'p99':>7} {'added p50':>10} {'p99':>7}",
    ]
    for name, cost in costs.items():
        cost["added_p50"] = cost["ttft_gateway_p50_ms"] - cost["ttft_node_p50_ms"]
        cost["added_p99"] = cost["ttft_gateway_p99_ms"] - cost["ttft_node_p99_ms"]
        lines.append(
            f"{name:<11} {cost['gateway_cpu_ms_per_message']:>10.2f} "
            f"{cost['messages_per_s']:>7.1f} {cost['ttft_gateway_p50_ms']:>9.1f} "
            f"{cost['ttft_gateway_p99_ms']:>7.1f} {cost['ttft_node_p50_ms']:>9.1f} "
            f"{cost['ttft_node_p99_ms']:>7.1f} {cost['added_p50']:>10.1f} {cost['added_p99']:>7.1f}"
        )
    lines += [
        f"limiter reserve+settle pairs/s: one Python client process {pairs['pairs_per_s']:.0f}; "
        f"one Redis serving 50 clients {pairs['redis_pairs_per_s']:.0f}",
    ]
    bare, production = costs["bare"], costs["production"]
    result = {
        "bench": "gateway",
        "gateway_cpu_ms_per_message": round(production["gateway_cpu_ms_per_message"], 3),
        "gateway_cpu_ms_per_message_bare": round(bare["gateway_cpu_ms_per_message"], 3),
        "messages_per_s": round(production["messages_per_s"], 1),
        "added_ttft_p50_ms": round(bare["added_p50"], 2),
        "added_ttft_p99_ms": round(bare["added_p99"], 2),
        "limiter_pairs_per_s_one_client": round(pairs["pairs_per_s"]),
        "limiter_pairs_per_s_one_redis": round(pairs["redis_pairs_per_s"]),
        "goals": {"gateway_cpu_ms_per_message": 1.0, "limiter_pairs_per_s_one_redis": 10_000},
    }
    lines.append(json.dumps(result))
    publish("gateway", "\n".join(lines))


if __name__ == "__main__":
    main()
