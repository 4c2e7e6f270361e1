"""What the platform's hops cost: time to first token and tokens/s through the whole path
(edge -> gateway -> scheduler -> nodeagent -> llama-server) against calling llama-server
directly, with the same prompts in the same run, taking turns at going first.

With --tls both (the default) two platforms run side by side, one with mutual TLS between the
services (what `chatctl up` starts) and one in plaintext (`--insecure`), each with its own
llama-server: the difference between them is what TLS costs on the path. --tls on or off runs
only that one.

    .venv/bin/python bench/hops.py [--rounds 20] [--max-tokens 48] [--tls both|on|off]

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


# Each path through a platform, and whether its services talk plaintext.
PLATFORMS = {"platform": False, "plaintext": True}
CHOICES = {"both": ["platform", "plaintext"], "on": ["platform"], "off": ["plaintext"]}


def platform_settings(state: Path, max_tokens: int, insecure: bool) -> PlatformSettings:
    return PlatformSettings(
        state_dir=state,
        edge_listen="127.0.0.1:0",
        parallel=1,
        insecure=insecure,
        extra_env={
            "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": str(max_tokens),
            "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e9",
            # The output check holds text back 50 tokens behind the newest, so a short answer
            # would reach the user whole, at its end: the hops' cost is measured without it.
            "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
            "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
        },
    )


async def run(rounds: int, max_tokens: int, tls: str) -> dict:
    system = GatewayConfig().system_prompt
    platforms: dict[str, LocalPlatform] = {}
    with tempfile.TemporaryDirectory() as state:
        try:
            for name in CHOICES[tls]:
                settings = platform_settings(Path(state) / name, max_tokens, PLATFORMS[name])
                platforms[name] = LocalPlatform(settings)
                await platforms[name].start()
            first = next(iter(platforms.values()))
            engine_url = next(
                str(c.ready["engine_url"]) for c in first.children if c.name.startswith("nodeagent")
            )
            results: dict[str, list[tuple]] = {"direct": [], **{name: [] for name in platforms}}
            paths = list(results)
            connector = aiohttp.TCPConnector(force_close=True)  # as the nodeagent does
            async with aiohttp.ClientSession(connector=connector) as http:
                await direct(http, engine_url, system, prompt(10_000), max_tokens)  # warm up
                for platform in platforms.values():
                    await via_platform(
                        http, platform.edge_url, platform.tokens["free"], prompt(10_001)
                    )
                for i in range(rounds):
                    # Each path goes first, second, ... in turn.
                    order = paths[i % len(paths) :] + paths[: i % len(paths)]
                    for j, path in enumerate(order):
                        text = prompt(len(paths) * i + j)
                        if path == "direct":
                            sample = await direct(http, engine_url, system, text, max_tokens)
                        else:
                            platform = platforms[path]
                            sample = await via_platform(
                                http, platform.edge_url, platform.tokens["free"], text
                            )
                        results[path].append(sample)
        finally:
            for platform in platforms.values():
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


def compare(summary: dict, path: str, base: str) -> dict:
    row, against = summary[path], summary[base]
    return {
        "added_ttft_p50_ms": round(row["ttft_p50_ms"] - against["ttft_p50_ms"], 2),
        "added_ttft_p99_ms": round(row["ttft_p99_ms"] - against["ttft_p99_ms"], 2),
        "throughput_ratio": round(row["tokens_per_s"] / against["tokens_per_s"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument(
        "--tls",
        choices=sorted(CHOICES),
        default="both",
        help="platforms to run: with mutual TLS (on), plaintext (off), or both side by side",
    )
    args = parser.parse_args()
    summary = asyncio.run(run(args.rounds, args.max_tokens, args.tls))
    lines = [
        f"hops: {args.rounds} prompts per path, {args.max_tokens} answer tokens max, "
        "llama.cpp + SmolLM2-135M on this machine's CPU; platform: mutual TLS between the "
        "services, plaintext: --insecure",
        f"{'path':<10} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} {'tokens/s p50':>13}",
    ]
    for name, row in summary.items():
        lines.append(
            f"{name:<10} {row['ttft_p50_ms']:>12.1f} {row['ttft_p99_ms']:>12.1f} "
            f"{row['tokens_per_s']:>13.1f}"
        )
    result: dict = {"bench": "hops", "rounds": args.rounds, "tls": args.tls}
    for path in [p for p in summary if p != "direct"]:
        hops = compare(summary, path, "direct")
        result[path] = {**{k: round(v, 2) for k, v in summary[path].items()}, **hops}
        lines.append(
            f"{path}: added TTFT p50 {hops['added_ttft_p50_ms']} ms, p99 "
            f"{hops['added_ttft_p99_ms']} ms; throughput ratio {hops['throughput_ratio']}"
        )
    result["direct"] = {k: round(v, 2) for k, v in summary["direct"].items()}
    if {"platform", "plaintext"} <= summary.keys():
        result["tls_cost"] = compare(summary, "platform", "plaintext")
        cost = result["tls_cost"]
        lines.append(
            f"TLS costs TTFT p50 {cost['added_ttft_p50_ms']} ms, p99 "
            f"{cost['added_ttft_p99_ms']} ms; throughput ratio {cost['throughput_ratio']}"
        )
    lines.append(json.dumps(result))
    publish("hops", "\n".join(lines))


if __name__ == "__main__":
    main()
