"""What the platform's hops cost: time to first token and tokens/s through the whole path
(edge -> gateway -> scheduler -> nodeagent -> llama-server) against calling llama-server
directly, with the same prompts in the same run, alternating which goes first.

    .venv/bin/python bench/hops.py [--rounds 20] [--max-tokens 48]

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
from pathlib import Path

import aiohttp
from benchkit import publish

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from gateway.main import GatewayConfig

TOPICS = ["rivers", "bridges", "owls", "volcanoes", "bread", "comets", "glass", "tides"]


def prompt(i: int) -> str:
    return f"Question {i}: write three sentences about {TOPICS[i % len(TOPICS)]}."


async def via_platform(http: aiohttp.ClientSession, url: str, token: str, text: str) -> tuple:
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
    return first - start, output, time.perf_counter() - first


async def direct(
    http: aiohttp.ClientSession, engine_url: str, system: str, text: str, max_tokens: int
) -> tuple:
    body = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": text}],
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
    return first - start, output, time.perf_counter() - first


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(rounds: int, max_tokens: int) -> dict:
    system = GatewayConfig().system_prompt
    with tempfile.TemporaryDirectory() as state:
        platform = LocalPlatform(
            PlatformSettings(
                state_dir=Path(state),
                edge_listen="127.0.0.1:0",
                parallel=1,
                extra_env={
                    "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": str(max_tokens),
                    "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e9",
                },
            )
        )
        await platform.start()
        try:
            engine_url = next(
                str(c.ready["engine_url"])
                for c in platform.children
                if c.name.startswith("nodeagent")
            )
            results: dict[str, list[tuple]] = {"direct": [], "platform": []}
            connector = aiohttp.TCPConnector(force_close=True)  # as the nodeagent does
            async with aiohttp.ClientSession(connector=connector) as http:
                await direct(http, engine_url, system, prompt(10_000), max_tokens)  # warm up
                for i in range(rounds):
                    order = ["direct", "platform"] if i % 2 == 0 else ["platform", "direct"]
                    for j, path in enumerate(order):
                        text = prompt(2 * i + j)
                        if path == "direct":
                            sample = await direct(http, engine_url, system, text, max_tokens)
                        else:
                            sample = await via_platform(
                                http, platform.edge_url, platform.tokens["free"], text
                            )
                        results[path].append(sample)
        finally:
            await platform.stop()
    summary = {}
    for path, samples in results.items():
        ttft = [s[0] * 1000 for s in samples]
        rates = [(s[1] - 1) / s[2] for s in samples if s[1] > 1 and s[2] > 0]
        summary[path] = {
            "ttft_p50_ms": statistics.median(ttft),
            "ttft_p99_ms": pct(ttft, 0.99),
            "tokens_per_s": statistics.median(rates),
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    summary = asyncio.run(run(args.rounds, args.max_tokens))
    d, p = summary["direct"], summary["platform"]
    lines = [
        f"hops: {args.rounds} prompts per path, {args.max_tokens} answer tokens max, "
        "llama.cpp + SmolLM2-135M on this machine's CPU",
        f"{'path':<10} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} {'tokens/s p50':>13}",
    ]
    for name, row in summary.items():
        lines.append(
            f"{name:<10} {row['ttft_p50_ms']:>12.1f} {row['ttft_p99_ms']:>12.1f} "
            f"{row['tokens_per_s']:>13.1f}"
        )
    result = {
        "bench": "hops",
        "rounds": args.rounds,
        "added_ttft_p50_ms": round(p["ttft_p50_ms"] - d["ttft_p50_ms"], 2),
        "added_ttft_p99_ms": round(p["ttft_p99_ms"] - d["ttft_p99_ms"], 2),
        "throughput_ratio": round(p["tokens_per_s"] / d["tokens_per_s"], 3),
        "direct": {k: round(v, 2) for k, v in d.items()},
        "platform": {k: round(v, 2) for k, v in p.items()},
    }
    lines.append(
        f"added TTFT p50 {result['added_ttft_p50_ms']} ms, "
        f"p99 {result['added_ttft_p99_ms']} ms; throughput ratio "
        f"{result['throughput_ratio']}"
    )
    lines.append(json.dumps(result))
    text = "\n".join(lines)
    publish("hops", text)


if __name__ == "__main__":
    main()
