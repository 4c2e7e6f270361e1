"""What a Responses API request without tools costs the edge and the gateway, side by side with
another checkout: the tool loop's changes must leave the path without tools as it was, for
stateless responses (ChatService.Complete) and stored ones (SendMessage) alike.

Two platforms, each with its services importing one checkout (this one, and --against DIR),
each a scheduler, a gateway, an edge and one simulated replica (fast, short answers; router
and safety on, as shipped). In each round every platform answers `--requests` stateless
responses (`store: false`) and as many stored ones (`store: true`), not streamed, `--at-once`
at a time, the platforms taking turns; the edge's and the gateway's CPU (utime + stime from
/proc) over a round, divided by its requests, is the figure. The median of the rounds is
reported.

    .venv/bin/python bench/responses_cost.py --against DIR [--requests 300] [--rounds 5]

Prints a table and ends with one JSON line; results land in bench/results/responses_cost.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

import aiohttp
from benchkit import checkout_env, cpu_seconds, publish

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clients.chatctl.platform import LocalPlatform, PlatformSettings

HERE = Path(__file__).resolve().parent.parent


def settings(state: Path, checkout: Path) -> PlatformSettings:
    return PlatformSettings(
        state_dir=state,
        edge_listen="127.0.0.1:0",
        extra_env={
            **checkout_env(str(checkout)),
            "CHAT_NODEAGENT_ENGINE": "sim",
            "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
            "CHAT_NODEAGENT_SIM_SPEED": "50",
            "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "16,16",
            "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e12",
            "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "1000",
            "CHAT_EDGE_MAX_REQUESTS_PER_IP": "0",
            "CHAT_GATEWAY_LOG_LEVEL": "warning",
            "CHAT_EDGE_LOG_LEVEL": "warning",
            "CHAT_NODEAGENT_LOG_LEVEL": "warning",
        },
    )


async def one(http: aiohttp.ClientSession, platform: LocalPlatform, store: bool) -> None:
    body = {"model": "auto", "store": store,
            "input": f"Name a river, please ({uuid.uuid4().hex[:6]})."}  # fmt: skip
    headers = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    async with http.post(f"{platform.edge_url}/v1/responses", json=body,
                         headers=headers) as answer:  # fmt: skip
        reply = await answer.json()
    if answer.status != 200 or reply.get("status") != "completed":
        raise RuntimeError(f"a response failed: {answer.status} {reply}")


async def round_of(platform: LocalPlatform, requests: int, at_once: int, store: bool) -> float:
    """CPU ms of the edge and the gateway per request over one round."""
    pids = [c.process.pid for c in platform.children if c.name.startswith(("edge", "gateway"))]
    before = sum(cpu_seconds(pid) for pid in pids)
    gate = asyncio.Semaphore(at_once)

    async def limited(http: aiohttp.ClientSession) -> None:
        async with gate:
            await one(http, platform, store)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        await asyncio.gather(*(limited(http) for _ in range(requests)))
    return (sum(cpu_seconds(pid) for pid in pids) - before) / requests * 1000


KINDS = {"stateless": False, "stored": True}


async def measure(args: argparse.Namespace, against: Path) -> dict[str, list[float]]:
    checkouts = {"this": HERE, "against": against}
    with tempfile.TemporaryDirectory() as folder:
        platforms = {name: LocalPlatform(settings(Path(folder) / name, path))
                     for name, path in checkouts.items()}  # fmt: skip
        for platform in platforms.values():
            await platform.start()
        try:
            for platform in platforms.values():  # warm up
                for store in KINDS.values():
                    await round_of(platform, max(20, args.requests // 10), args.at_once, store)
            rounds: dict[str, list[float]] = {
                f"{name} {kind}": [] for kind in KINDS for name in platforms
            }
            for index in range(args.rounds):
                order = list(platforms) if index % 2 == 0 else list(reversed(platforms))
                for kind, store in KINDS.items():
                    for name in order:
                        cpu = await round_of(platforms[name], args.requests, args.at_once, store)
                        rounds[f"{name} {kind}"].append(cpu)
            return rounds
        finally:
            for platform in platforms.values():
                await platform.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", required=True)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--at-once", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = asyncio.run(measure(args, Path(args.against).resolve()))
    median = {name: statistics.median(values) for name, values in rounds.items()}
    lines = [
        f"edge + gateway CPU per Responses request without tools, ms ({args.rounds} "
        f"rounds of {args.requests}, {args.at_once} at once, the checkouts taking turns)",
        f"{'checkout, kind':<18} {'by round':<36} {'median':>7}",
        *(
            f"{name:<18} {' '.join(f'{v:.2f}' for v in values):<36} {median[name]:>7.2f}"
            for name, values in rounds.items()
        ),
        *(
            f"this / against, {kind}: {median[f'this {kind}'] / median[f'against {kind}']:.3f}"
            for kind in KINDS
        ),
    ]
    lines.append(json.dumps({"bench": "responses_cost", "against": args.against,
                             "cpu_ms_per_request": {k: round(v, 3) for k, v in median.items()},
                             "by_round": rounds}))  # fmt: skip
    publish("responses_cost", "\n".join(lines))


if __name__ == "__main__":
    main()
