"""What reading a user's history from another region costs: the list of conversations, a
conversation's messages and a rating, each at the user's home edge and at another region's
edge (which reads home's store over HomeService: one more hop and one HomeService call).

Two regions on this machine (loopback, mutual TLS), the global directory in an etcd of its
own; one user homed at a with 20 conversations of two turns. Sequential requests.

    python -m bench.regions_reads [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import aiohttp

from bench.benchkit import pct, publish
from bench.regions_hop import admin_call, ttft, two_regions
from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as pb
from clients.chatctl.platform import LocalPlatform

CONVERSATIONS = 20


async def measure(requests: int) -> dict[str, list[float]]:
    async with two_regions() as regions:
        created = await admin_call(
            regions["a"], "CreateUser",
            pb.CreateUserRequest(user_id="reader", tier=common_pb2.TIER_PLUS),
        )  # fmt: skip
        return await _reads(regions, created.token, requests)  # type: ignore[attr-defined]


async def _reads(regions: dict[str, LocalPlatform], token: str, n: int) -> dict[str, list[float]]:
    headers = {"Authorization": f"Bearer {token}"}
    results: dict[str, list[float]] = {}
    async with aiohttp.ClientSession() as http:
        answers = []
        for index in range(CONVERSATIONS):
            _, _, first = await ttft(http, regions["a"].edge_url, token, f"c{index}")
            answers.append(f"{first}.answer")

        async def get(url: str) -> None:
            async with http.get(url, headers=headers) as response:
                assert response.status == 200, await response.text()
                await response.read()

        async def rate(url: str) -> None:
            async with http.post(url, json={"rating": "up"}, headers=headers) as response:
                assert response.status == 200, await response.text()

        for where, name in (("home edge", "a"), ("other edge", "b")):
            edge = regions[name].edge_url
            calls: dict[str, tuple[Callable[[str], Awaitable[None]], str]] = {
                "list conversations": (get, f"{edge}/v1/conversations"),
                "list messages": (get, f"{edge}/v1/conversations/c0/messages"),
                "rate an answer": (rate, f"{edge}/v1/messages/{answers[0]}/feedback"),
            }
            for what, (call, url) in calls.items():
                for _ in range(3):  # warm: channels
                    await call(url)
                timings = results[f"{what}, {where}"] = []
                for _ in range(n):
                    start = time.perf_counter()
                    await call(url)
                    timings.append(time.perf_counter() - start)
    return results


def report(results: dict[str, list[float]], requests: int) -> str:
    lines = [
        f"regions: reading history, {requests} requests each, 2 regions on one machine "
        "(loopback, mutual TLS); the user's home is a",
        f"{'request':<34}{'p50 ms':>9}{'p90 ms':>9}{'extra p50 ms':>14}",
    ]
    summary = {}
    for name, values in results.items():
        home = pct(results[f"{name.rsplit(', ', 1)[0]}, home edge"], 0.5)
        p50, p90 = pct(values, 0.5), pct(values, 0.9)
        lines.append(f"{name:<34}{p50 * 1e3:>9.1f}{p90 * 1e3:>9.1f}{(p50 - home) * 1e3:>14.1f}")
        summary[name.replace(", ", "_").replace(" ", "_")] = {
            "p50_ms": round(p50 * 1e3, 1), "p90_ms": round(p90 * 1e3, 1)}  # fmt: skip
    lines.append(json.dumps({"bench": "regions_reads", "requests": requests, **summary}))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    publish("regions_reads", report(asyncio.run(measure(args.requests)), args.requests))


if __name__ == "__main__":
    main()
