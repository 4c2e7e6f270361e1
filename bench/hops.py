"""What the platform's hops cost: time to first token and tokens/s through the whole path
(edge -> gateway -> scheduler -> nodeagent -> engine) against calling the same engine
directly, in pairs: each round sends two prompts of the same length and shape (they differ in
one leading letter, so neither reads the other's cached prefix), one straight to the engine
and one through the platform, the two taking turns at going first. The figure is the paired
difference, so the engine's own noise (llama.cpp's TTFT varies by tens of ms) mostly cancels.

Engines: `llama` (llama.cpp + SmolLM2-135M on this machine's CPU; direct = llama-server's own
HTTP API) and `sim` (the simulated engine at 100x real time, near-instant, where the platform's
own cost is not hidden; direct = the nodeagent's Generate over gRPC, so the sim rows leave the
edge -> nodeagent hop out of the baseline and measure edge, gateway and scheduler).

Gateway settings, each a platform of its own, side by side in one run:
- control: router and safety checks off, the control plane alone;
- check: the output check on without hold-back (it still releases text every 16 tokens);
- production: the shipped defaults (router, input check, output check holding 50 tokens).
Every platform runs with mutual TLS between the services, as `chatctl up` does; --tls both adds
`control-plaintext` (the control settings, `--insecure`): the difference is TLS's cost.

Tokens/s is each answer's output tokens over its whole time from request to `done`, so text
held back and released in one chunk cannot inflate it.

    .venv/bin/python bench/hops.py [--rounds 200] [--engines sim,llama] [--tls on|both]

Prints a table and ends with one JSON line. Results land in bench/results/hops.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from benchkit import pct, publish

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.types import Role, Tier, Turn
from gateway.main import GatewayConfig
from gateway.node_client import Chunk, GenerateSpec, NodeClient

TOPICS = ["rivers", "bridges", "owls", "volcanoes", "bread", "comets", "glass", "tides"]
SYSTEM_PROMPT = GatewayConfig().system_prompt
SIM_SPEED = "100"

# Gateway settings per platform; every one runs as the Free tier with its bucket unbounded.
SETTINGS: dict[str, dict[str, str]] = {
    "control": {"CHAT_GATEWAY_ROUTER": "false", "CHAT_GATEWAY_SAFETY": "false"},
    "check": {"CHAT_GATEWAY_ROUTER": "false", "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0"},
    "production": {},
}
# Same length and shape; the leading letter keeps either prompt out of the other's cache.
PAIR_LETTERS = "AB"


def prompt(round_: int, letter: str) -> str:
    return f"{letter}{round_:05d}: write three sentences about {TOPICS[round_ % len(TOPICS)]}."


@dataclass(frozen=True, slots=True)
class Sample:
    ttft_s: float
    total_s: float
    output_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.total_s if self.total_s > 0 else 0.0


async def via_edge(http: aiohttp.ClientSession, url: str, token: str, text: str) -> Sample:
    start = time.perf_counter()
    first = None
    output = 0
    async with http.post(
        f"{url}/v1/conversations/b_{uuid.uuid4().hex[:10]}/messages",
        json={"content": text},
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    ) as response:
        if response.status != 200:
            raise RuntimeError(f"edge answered {response.status}: {await response.text()}")
        async for raw in response.content:
            if raw.startswith(b"event: delta") and first is None:
                first = time.perf_counter()
            if raw.startswith(b"data: ") and b'"usage"' in raw:
                output = json.loads(raw[6:])["usage"]["output"]
    if first is None:
        raise RuntimeError("the answer had no text")
    return Sample(first - start, time.perf_counter() - start, output)


async def to_llama(
    http: aiohttp.ClientSession, engine_url: str, text: str, max_tokens: int
) -> Sample:
    body = {
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": text},
        ],
        "max_tokens": max_tokens,
        "temperature": 0.7,
        "stream": True,
        "stream_options": {"include_usage": True},
        "cache_prompt": True,
    }
    start = time.perf_counter()
    first = None
    output = 0
    async with http.post(f"{engine_url}/v1/chat/completions", json=body) as response:
        async for raw in response.content:
            if not raw.startswith(b"data: {"):
                continue
            event = json.loads(raw[6:])
            choices = event.get("choices") or [{}]
            if (choices[0].get("delta") or {}).get("content") and first is None:
                first = time.perf_counter()
            if event.get("usage"):
                output = event["usage"]["completion_tokens"]
    if first is None:
        raise RuntimeError("llama-server wrote no text")
    return Sample(first - start, time.perf_counter() - start, output)


async def to_node(nodes: NodeClient, address: str, text: str, max_tokens: int) -> Sample:
    spec = GenerateSpec(
        request_id=uuid.uuid4().hex,
        turns=[Turn(Role.SYSTEM, SYSTEM_PROMPT, 0), Turn(Role.USER, text, 0)],
        max_tokens=max_tokens,
        tier=Tier.FREE,
        temperature=0.7,
        prompt_tokens=0,
    )
    start = time.perf_counter()
    first = None
    generation = await nodes.generate(address, spec)
    try:
        while True:
            item = await generation.read()
            if type(item) is not Chunk:
                break
            if first is None:
                first = time.perf_counter()
    finally:
        generation.close()
    if first is None:
        raise RuntimeError("the node wrote no text")
    return Sample(first - start, time.perf_counter() - start, item.usage.output_tokens)


def platform_settings(
    state: Path, engine: str, setting: str, max_tokens: int, insecure: bool
) -> PlatformSettings:
    env = {
        "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": str(max_tokens),
        "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e12",
        "CHAT_GATEWAY_LOG_LEVEL": "warning",
        **SETTINGS[setting],
    }
    if engine == "sim":
        env |= {"CHAT_NODEAGENT_ENGINE": "sim", "CHAT_NODEAGENT_SIM_SPEED": SIM_SPEED}
    return PlatformSettings(state_dir=state, edge_listen="127.0.0.1:0", parallel=1,
                            insecure=insecure, extra_env=env)  # fmt: skip


@dataclass
class Route:
    """One platform and how to reach its engine without it."""

    name: str
    platform: LocalPlatform
    direct: Callable[[str], Awaitable[Sample]]
    pairs: list[tuple[Sample, Sample]]  # (direct, platform), same-shaped prompts


async def run_engine(
    engine: str, names: list[str], rounds: int, max_tokens: int, state: Path
) -> dict[str, dict[str, float]]:
    started: list[LocalPlatform] = []
    clients: list[NodeClient] = []
    routes: list[Route] = []
    connector = aiohttp.TCPConnector(force_close=True)  # as the nodeagent does
    async with aiohttp.ClientSession(connector=connector) as http:
        try:
            for name in names:
                setting, _, plain = name.partition("-")
                settings = platform_settings(state / f"{engine}-{name}", engine, setting,
                                             max_tokens, insecure=bool(plain))  # fmt: skip
                platform = LocalPlatform(settings)
                started.append(platform)
                await platform.start()
                direct = direct_to(engine, platform, http, max_tokens, clients)
                routes.append(Route(name, platform, direct, []))
            for route in routes:  # warm up: channels, caches, the first prompt's template
                await route.direct(prompt(99_999, "A"))
                await via_edge(http, route.platform.edge_url, route.platform.tokens["free"],
                               prompt(99_999, "B"))  # fmt: skip
            for i in range(rounds):
                for route in routes:
                    route.pairs.append(await one_pair(http, route, i))
        finally:
            for client in clients:
                await client.close()
            for platform in started:
                await platform.stop()
    return {route.name: summarize(route.pairs) for route in routes}


def direct_to(
    engine: str,
    platform: LocalPlatform,
    http: aiohttp.ClientSession,
    max_tokens: int,
    clients: list[NodeClient],
) -> Callable[[str], Awaitable[Sample]]:
    node = next(c for c in platform.children if c.name.startswith("nodeagent"))
    if engine == "llama":
        url = str(node.ready["engine_url"])
        return lambda text: to_llama(http, url, text, max_tokens)
    # Nodes take Generate from gateways only; the count is the node's call, measured as such.
    nodes = NodeClient(tls=platform.tls("gateway"), local_counts=False)
    clients.append(nodes)
    return lambda text: to_node(nodes, str(node.ready["grpc"]), text, max_tokens)


async def one_pair(http: aiohttp.ClientSession, route: Route, round_: int) -> tuple[Sample, Sample]:
    """The same-shaped prompt straight to the engine and through the platform; which goes
    first alternates by round."""
    platform = route.platform
    direct_first = round_ % 2 == 0
    letters = PAIR_LETTERS if direct_first else PAIR_LETTERS[::-1]
    direct_text, platform_text = prompt(round_, letters[0]), prompt(round_, letters[1])

    async def through() -> Sample:
        return await via_edge(http, platform.edge_url, platform.tokens["free"], platform_text)

    if direct_first:
        straight = await route.direct(direct_text)
        return straight, await through()
    routed = await through()
    return await route.direct(direct_text), routed


def summarize(pairs: list[tuple[Sample, Sample]]) -> dict[str, float]:
    added = [(p.ttft_s - d.ttft_s) * 1000 for d, p in pairs]
    direct_rate = statistics.median(d.tokens_per_s for d, _ in pairs)
    platform_rate = statistics.median(p.tokens_per_s for _, p in pairs)
    return {
        "pairs": len(pairs),
        "direct_ttft_p50_ms": round(statistics.median(d.ttft_s * 1000 for d, _ in pairs), 2),
        "ttft_p50_ms": round(statistics.median(p.ttft_s * 1000 for _, p in pairs), 2),
        "added_ttft_p50_ms": round(statistics.median(added), 2),
        "added_ttft_p95_ms": round(pct(added, 0.95), 2),
        "added_ttft_p99_ms": round(pct(added, 0.99), 2),
        "direct_tokens_per_s": round(direct_rate, 1),
        "tokens_per_s": round(platform_rate, 1),
        "throughput_ratio": round(platform_rate / direct_rate, 3) if direct_rate else 0.0,
    }


def report(results: dict[str, dict[str, dict[str, float]]], args: argparse.Namespace) -> str:
    lines = [
        f"hops: {args.rounds} pairs per platform, {args.max_tokens} answer tokens max, paired "
        "same-shaped prompts (direct to the engine vs through edge+gateway+scheduler+node), "
        "order alternating; every platform with mutual TLS between the services unless named "
        "'-plaintext'. llama: llama.cpp + SmolLM2-135M on this CPU; sim: the simulated engine "
        f"at {SIM_SPEED}x, direct = the nodeagent's Generate",
        f"{'engine':<6} {'platform':<18} {'direct p50':>10} {'TTFT p50':>9} {'added p50':>9} "
        f"{'p95':>7} {'p99':>7} {'tok/s direct':>12} {'tok/s':>7} {'ratio':>6}",
    ]
    for engine, rows in results.items():
        for name, row in rows.items():
            lines.append(
                f"{engine:<6} {name:<18} {row['direct_ttft_p50_ms']:>10.1f} "
                f"{row['ttft_p50_ms']:>9.1f} {row['added_ttft_p50_ms']:>9.2f} "
                f"{row['added_ttft_p95_ms']:>7.2f} {row['added_ttft_p99_ms']:>7.2f} "
                f"{row['direct_tokens_per_s']:>12.1f} {row['tokens_per_s']:>7.1f} "
                f"{row['throughput_ratio']:>6.3f}"
            )
    result: dict = {"bench": "hops", "rounds": args.rounds, "max_tokens": args.max_tokens,
                    "tls": args.tls, "results": results,
                    "goal": {"added_ttft_p50_ms": 2.0, "added_ttft_p99_ms": 5.0}}  # fmt: skip
    for engine, rows in results.items():
        if "control" in rows and "control-plaintext" in rows:
            cost = (
                rows["control"]["added_ttft_p50_ms"]
                - rows["control-plaintext"]["added_ttft_p50_ms"]
            )
            result.setdefault("tls_cost_added_ttft_p50_ms", {})[engine] = round(cost, 2)
            lines.append(f"{engine}: TLS costs {cost:.2f} ms of TTFT p50 (control vs plaintext)")
    lines.append(json.dumps(result))
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> str:
    names = list(SETTINGS) + (["control-plaintext"] if args.tls == "both" else [])
    results = {}
    with tempfile.TemporaryDirectory() as state:
        for engine in args.engines.split(","):
            results[engine] = await run_engine(engine, names, args.rounds, args.max_tokens,
                                               Path(state))  # fmt: skip
    return report(results, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--engines", default="sim,llama")
    parser.add_argument(
        "--tls",
        choices=["on", "both"],
        default="both",
        help="every platform with TLS (on), or also a plaintext control (both)",
    )
    args = parser.parse_args()
    publish("hops", asyncio.run(run(args)))


if __name__ == "__main__":
    main()
