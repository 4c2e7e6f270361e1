"""What one gRPC message costs in Python before any of the platform's code runs: grpc.aio on
uvloop (as every service runs it, with the services' keepalive options) against plain asyncio
TCP on the same loop, both in two processes on loopback, in one run.

    .venv/bin/python bench/grpc_floor.py [--messages 300] [--gap-ms 20]

Two shapes, each measured by the CPU (utime + stime) of the process that sends and of the one
that receives, divided by the messages:
- a stream paced at one message every --gap-ms: a token reaching a reader at chat speed, each
  message on its own (what a node writes, a gateway reads and writes, an edge reads, per chunk);
- a request and its answer, one at a time (a unary call; on TCP a line and its answer line):
  what the gateway's pick costs, the call's set-up included.

The figures are this stack's floor per message on this machine; the platform's own per-chunk
and per-call figures (bench/gateway_cost.py, bench/race.py) sit on top of them.

Prints a table and ends with one JSON line; results land in bench/results/grpc_floor.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import grpc
import uvloop
from benchkit import cpu_seconds, publish

from infra.keepalive import CLIENT_CHANNEL, SERVER_KEEPALIVE

PAYLOAD = b"x" * 60  # about a chunk of a few tokens with its index


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Servers, each in a process of its own -----------------------------------------------------------


async def grpc_server(port: int, messages: int, gap_s: float) -> None:
    async def stream(request: bytes, context: grpc.aio.ServicerContext):
        for _ in range(messages):
            await asyncio.sleep(gap_s)
            yield PAYLOAD

    async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return PAYLOAD

    handler = grpc.method_handlers_generic_handler("floor.Floor", {
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
    })  # fmt: skip
    server = grpc.aio.server(options=SERVER_KEEPALIVE)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def tcp_server(port: int, messages: int, gap_s: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            if line == b"stream\n":
                for _ in range(messages):
                    await asyncio.sleep(gap_s)
                    writer.write(PAYLOAD + b"\n")
                writer.write(b"end\n")
            else:
                writer.write(PAYLOAD + b"\n")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


# Clients, in this process ------------------------------------------------------------------------


async def grpc_client(port: int, server_pid: int, messages: int, gap_s: float) -> dict:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CLIENT_CHANNEL) as channel:
        stream = channel.unary_stream("/floor.Floor/Stream")
        unary = channel.unary_unary("/floor.Floor/Unary")
        await unary(b"")  # connected before anything is measured

        async def read_stream() -> int:
            return len([m async for m in stream(b"")])

        async def calls() -> int:
            for _ in range(messages):
                await unary(b"")
                await asyncio.sleep(gap_s)
            return messages

        return {
            "stream": await measure(read_stream, server_pid),
            "call": await measure(calls, server_pid, pause_s=gap_s),
        }


async def tcp_client(port: int, server_pid: int, messages: int, gap_s: float) -> dict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def read_stream() -> int:
        writer.write(b"stream\n")
        count = 0
        while await reader.readline() != b"end\n":
            count += 1
        return count

    async def calls() -> int:
        for _ in range(messages):
            writer.write(b"call\n")
            await reader.readline()
            await asyncio.sleep(gap_s)
        return messages

    try:
        return {
            "stream": await measure(read_stream, server_pid),
            "call": await measure(calls, server_pid, pause_s=gap_s),
        }
    finally:
        writer.close()


async def measure(work, server_pid: int, pause_s: float | None = None) -> dict[str, float]:
    """CPU per message on each side; with pause_s (the pause between calls), the wall time of
    each round trip less that pause: a call's latency."""
    mine, theirs = cpu_seconds(os.getpid()), cpu_seconds(server_pid)
    started = time.perf_counter()
    count = await work()
    wall = time.perf_counter() - started
    figures = {
        "receiver_us": (cpu_seconds(os.getpid()) - mine) / count * 1e6,
        "sender_us": (cpu_seconds(server_pid) - theirs) / count * 1e6,
    }
    if pause_s is not None:
        figures["round_trip_us"] = (wall / count - pause_s) * 1e6
    return {k: round(v) for k, v in figures.items()}


def run_side(kind: str, messages: int, gap_s: float) -> dict:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, str(port), str(messages), str(gap_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if server.stdout is None or server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {kind} server did not start")
        client = grpc_client if kind == "grpc" else tcp_client
        return uvloop.run(client(port, server.pid, messages, gap_s))
    finally:
        server.kill()
        server.wait()


def report(figures: dict[str, dict], messages: int, gap_ms: float) -> str:
    lines = [
        f"grpc_floor: {messages} messages a shape, paced {gap_ms:g} ms apart, two processes on "
        f"loopback, uvloop on both; CPU us a message (utime + stime)",
        f"{'shape':<26} {'stack':<9} {'sender':>7} {'receiver':>9} {'both':>6} {'latency':>8}",
    ]
    for shape, label in [("stream", "paced stream message"), ("call", "request and answer")]:
        for kind in ("grpc", "tcp"):
            f = figures[kind][shape]
            both = f["sender_us"] + f["receiver_us"]
            latency = f"{f['round_trip_us']}" if "round_trip_us" in f else "-"
            lines.append(f"{label:<26} {kind:<9} {f['sender_us']:>7} {f['receiver_us']:>9} "
                         f"{both:>6} {latency:>8}")  # fmt: skip
        g, t = figures["grpc"][shape], figures["tcp"][shape]
        ratio = (g["sender_us"] + g["receiver_us"]) / max(1, t["sender_us"] + t["receiver_us"])
        lines.append(f"{label}: grpc.aio costs {ratio:.1f}x plain asyncio TCP")
    lines.append(json.dumps({"bench": "grpc_floor", "messages": messages, "gap_ms": gap_ms,
                             **figures}))  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--serve":
        kind, port, messages, gap_s = (
            sys.argv[2],
            int(sys.argv[3]),
            int(sys.argv[4]),
            float(sys.argv[5]),
        )
        serve = grpc_server if kind == "grpc" else tcp_server
        uvloop.run(serve(port, messages, gap_s))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    args = parser.parse_args()
    gap_s = args.gap_ms / 1000
    figures = {kind: run_side(kind, args.messages, gap_s) for kind in ("grpc", "tcp")}
    publish("grpc_floor", report(figures, args.messages, args.gap_ms))


if __name__ == "__main__":
    main()
