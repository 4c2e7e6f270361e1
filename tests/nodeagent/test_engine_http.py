"""The engine adapters' HTTP side against a real aiohttp server on 127.0.0.1: event streams
split and joined at any byte, and connections kept between calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from nodeagent.engine_http import ENGINE_KEEPALIVE_S, engine_session, sse_events

EVENTS = [{"n": i, "text": f"piece {i} with ünïcode and a \\n inside"} for i in range(5)]


def body(events: list[dict[str, object]]) -> bytes:
    lines = [b": a comment", b"event: message"]
    lines += [b"data: " + json.dumps(e).encode() + b"\n" for e in events]
    return b"\n".join([*lines, b"data: [DONE]", b"", b""])


async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def engine_like() -> AsyncIterator[tuple[str, list[int]]]:
    """A server that streams EVENTS in writes of the size asked for, and answers /health;
    each request's client port is noted, so a kept connection shows as one port."""
    ports: list[int] = []

    async def stream(request: web.Request) -> web.StreamResponse:
        ports.append(request.transport.get_extra_info("peername")[1])
        size = int(request.query["size"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        data = body(EVENTS) + b'data: {"after": "done"}\n\n'
        for start in range(0, len(data), size):
            await response.write(data[start : start + size])
            await asyncio.sleep(0)  # each write its own segment, as an engine sends them
        await response.write_eof()
        return response

    async def health(request: web.Request) -> web.Response:
        ports.append(request.transport.get_extra_info("peername")[1])
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get("/stream", stream)
    app.router.add_get("/health", health)
    async for url in serve(app):
        yield url, ports


@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
async def test_every_event_comes_whole_whatever_the_writes_sizes(
    engine_like: tuple[str, list[int]], size: int
) -> None:
    url, _ = engine_like
    async with (
        engine_session(aiohttp.ClientTimeout(total=10)) as http,
        http.get(f"{url}/stream", params={"size": str(size)}) as response,
    ):
        got = [event async for event in sse_events(response.content)]
    # Comments and event names are skipped; nothing after [DONE] is an event.
    assert got == EVENTS


async def test_calls_in_a_row_share_one_connection(engine_like: tuple[str, list[int]]) -> None:
    url, ports = engine_like
    async with engine_session(aiohttp.ClientTimeout(total=10)) as http:
        for _ in range(3):
            async with http.get(f"{url}/health") as response:
                assert await response.json() == {"status": "ok"}
        # A stream read to its end leaves its connection reusable too.
        async with http.get(f"{url}/stream", params={"size": "64"}) as response:
            assert [e async for e in sse_events(response.content)] == EVENTS
        async with http.get(f"{url}/health") as response:
            assert response.status == 200
    assert len(ports) == 5 and len(set(ports)) == 1, ports


async def test_an_idle_connection_is_let_go_before_an_engine_would_close_it(
    engine_like: tuple[str, list[int]],
) -> None:
    """Engines close idle connections after 5 s: this side must not write into one then."""
    url, ports = engine_like
    assert ENGINE_KEEPALIVE_S < 5.0
    async with engine_session(aiohttp.ClientTimeout(total=10)) as http:
        async with http.get(f"{url}/health") as response:
            assert response.status == 200
        connector = http.connector
        assert connector is not None
        deadline = asyncio.get_running_loop().time() + 5.0
        # aiohttp sweeps idle connections every keep-alive period: gone within two of them.
        while any(connector._conns.values()):  # the pool has no public view
            assert asyncio.get_running_loop().time() < deadline, "the idle connection stayed"
            await asyncio.sleep(0.05)
        async with http.get(f"{url}/health") as response:
            assert response.status == 200
    assert len(set(ports)) == 2
