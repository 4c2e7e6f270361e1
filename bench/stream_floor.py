"""The floor under an idle stream's memory at the edge: what one open SSE response costs a
bare aiohttp server, and what one open server-streaming grpc.aio call costs its client, each
in a process of its own with nothing of the platform's. The edge holds one of each per
stream, so their sum is what an edge process built on these two libraries cannot go below.

    .venv/bin/python bench/stream_floor.py [--streams 5000]

Prints a table and ends with one JSON line; results land in bench/results/stream_floor.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import grpc
import uvloop
from aiohttp import web
from benchkit import publish
from grpc_health.v1 import health_pb2, health_pb2_grpc

SETTLE_S = 8.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) if found else 0


# The two processes measured -------------------------------------------------------------------


async def sse_server(port: int) -> None:
    """Answers every GET with an SSE response: one event, then silence."""

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"id: 1\nevent: meta\ndata: {}\n\n")
        await asyncio.sleep(3600)
        return response

    app = web.Application()
    app.router.add_get("/stream", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


async def grpc_server(port: int) -> None:
    """A health Watch that sends one message, then stays open and silent."""

    class Silent(health_pb2_grpc.HealthServicer):
        async def Watch(self, request, context):
            yield health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
            await asyncio.sleep(3600)

    server = grpc.aio.server(options=[("grpc.max_concurrent_streams", 1_000_000)])
    health_pb2_grpc.add_HealthServicer_to_server(Silent(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def grpc_client(port: int, streams: int) -> float:
    """Opens `streams` calls, each read past its first message by a task as the edge's relay
    does; this process's growth per call."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        await stub.Watch(health_pb2.HealthCheckRequest()).read()  # the connection is up
        before = rss_kb(os.getpid())

        async def one() -> None:
            call = stub.Watch(health_pb2.HealthCheckRequest())
            await call.read()
            await call.read()

        tasks = [asyncio.create_task(one()) for _ in range(streams)]
        await asyncio.sleep(SETTLE_S)
        grown = rss_kb(os.getpid()) - before
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return grown / streams


# The measurements ----------------------------------------------------------------------------


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, *args])


async def wait_listening(port: int) -> None:
    for _ in range(200):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise RuntimeError(f"nothing listens on {port}")


async def sse_kb_per_stream(streams: int) -> float:
    port = free_port()
    server = spawn("--sse-server", str(port))
    try:
        await wait_listening(port)
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            before = rss_kb(server.pid)

            async def one() -> None:
                async with http.get(f"http://127.0.0.1:{port}/stream") as response:
                    await response.content.readline()
                    await asyncio.sleep(3600)

            tasks = [asyncio.create_task(one()) for _ in range(streams)]
            await asyncio.sleep(SETTLE_S)
            grown = rss_kb(server.pid) - before
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return grown / streams
    finally:
        server.kill()
        server.wait()


async def grpc_kb_per_call(streams: int, folder: Path) -> float:
    port = free_port()
    server = spawn("--grpc-server", str(port))
    try:
        await wait_listening(port)
        out = folder / "grpc_client.txt"
        client = spawn("--grpc-client", str(port), str(streams), str(out))
        await asyncio.to_thread(client.wait)
        return float(out.read_text())
    finally:
        server.kill()
        server.wait()


async def run(streams: int) -> str:
    with tempfile.TemporaryDirectory() as folder:
        sse = await sse_kb_per_stream(streams)
        call = await grpc_kb_per_call(streams, Path(folder))
    floor = sse + call
    lines = [
        f"stream floor: {streams} idle streams each, one process per side, {SETTLE_S:.0f} s to "
        "settle; KB of RSS per stream",
        f"  {'aiohttp SSE response (server)':<40} {sse:>6.1f}",
        f"  {'grpc.aio server-streaming call (client)':<40} {call:>6.1f}",
        f"  {'sum: the edge cannot go below':<40} {floor:>6.1f}   (goal 30)",
    ]
    lines.append(json.dumps({"bench": "stream_floor", "streams": streams,
                             "sse_kb": round(sse, 1), "grpc_call_kb": round(call, 1),
                             "floor_kb": round(floor, 1)}))  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    if (
        len(sys.argv) >= 3
        and sys.argv[1].startswith("--")
        and sys.argv[1].endswith(("-server", "-client"))
    ):
        role, port = sys.argv[1], int(sys.argv[2])
        if role == "--sse-server":
            uvloop.run(sse_server(port))
        elif role == "--grpc-server":
            uvloop.run(grpc_server(port))
        else:
            kb = uvloop.run(grpc_client(port, int(sys.argv[3])))
            Path(sys.argv[4]).write_text(str(kb))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=5000)
    args = parser.parse_args()
    started = time.monotonic()
    text = asyncio.run(run(args.streams))
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    publish("stream_floor", text)


if __name__ == "__main__":
    sys.exit(main())
