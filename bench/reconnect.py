"""How soon a channel reaches a peer that comes back after an absence: gRPC's own reconnect
backoff (1 s growing 1.6x to 120 s) against the platform's internal channels
(infra/keepalive.py CLIENT_CHANNEL: 0.5 s growing to 2 s). Until the channel's next try, every
call on it fails at once although the peer is up (a restarted node, scheduler or gateway).

Each round: a channel to a closed port is called every 0.25 s for `--away` seconds (its
backoff grows meanwhile), then a gRPC server starts on that port and the time to the first
answered call (wait_for_ready) is measured. Rounds alternate the two settings.

    python -m bench.reconnect [--rounds 5] [--away 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.benchkit import pct, publish
from infra.grpcserver import GrpcServer
from infra.keepalive import CLIENT_CHANNEL, CLIENT_KEEPALIVE
from infra.tls import TlsConfig
from tests.servers import free_port

SERVICE = "chat.v1.Bench"
SETTINGS = {"grpc_default": CLIENT_KEEPALIVE, "platform": CLIENT_CHANNEL}


async def reached_after(options: Sequence[tuple[str, Any]], away_s: float) -> float:
    port = free_port()
    ask = health_pb2.HealthCheckRequest(service=SERVICE)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", list(options)) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        gone_at = time.monotonic()
        while time.monotonic() - gone_at < away_s:
            try:
                await health.Check(ask, timeout=1)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.25)
        server = GrpcServer(f"127.0.0.1:{port}", [SERVICE], tls=TlsConfig(insecure=True))
        await server.start()
        await server.set_serving(True)
        try:
            back_at = time.monotonic()
            await health.Check(ask, wait_for_ready=True, timeout=300)
            return time.monotonic() - back_at
        finally:
            await server.stop(0)


async def run(rounds: int, away_s: float) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for _ in range(rounds):
        for name, options in SETTINGS.items():
            found[name].append(await reached_after(options, away_s))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--away", type=float, default=10.0, help="seconds the peer is gone")
    args = parser.parse_args()
    found = asyncio.run(run(args.rounds, args.away))
    lines = [f"A peer back after {args.away:.0f} s away: seconds until a call reaches it "
             f"({args.rounds} rounds each, alternating)", "",
             "| channel | p50 s | max s |", "|---|---|---|"]  # fmt: skip
    for name, values in found.items():
        lines.append(f"| {name} | {pct(values, 0.5):.2f} | {max(values):.2f} |")
    summary = {name: {"p50_s": round(pct(v, 0.5), 3), "max_s": round(max(v), 3)}
               for name, v in found.items()}  # fmt: skip
    lines += ["", json.dumps({"bench": "reconnect", "away_s": args.away, **summary})]
    publish("reconnect", "\n".join(lines))


if __name__ == "__main__":
    main()
