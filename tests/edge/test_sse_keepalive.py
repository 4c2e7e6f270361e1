"""Keep-alive comments on real HTTP streams: a silent stream gets one each interval, a stream
that writes gets none, and a client that leaves does not stop the others' keep-alives."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from edge import sse

INTERVAL_S = 0.2


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """/silent holds its stream open and writes nothing; /busy writes an event every 50 ms.
    Both last 1.5 s."""
    keepalives = sse.KeepAlives(INTERVAL_S)

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=sse.STREAM_HEADERS)
        await response.prepare(request)
        async with keepalives.watch(response) as keepalive:
            ends = asyncio.get_running_loop().time() + 1.5
            while asyncio.get_running_loop().time() < ends:
                await asyncio.sleep(0.05)
                if request.path == "/busy":
                    await response.write(b"event: delta\ndata: {}\n\n")
                    keepalive.wrote()
        return response

    app = web.Application()
    app.router.add_get("/silent", stream)
    app.router.add_get("/busy", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}"
    await runner.cleanup()


async def comment_times(http: aiohttp.ClientSession, url: str) -> list[float]:
    """When each keep-alive comment arrived, from the request's start."""
    started = time.monotonic()
    arrived = []
    async with http.get(url) as response:
        async for line in response.content:
            if line == b": keep-alive\n":
                arrived.append(time.monotonic() - started)
    return arrived


async def test_a_silent_stream_gets_a_comment_each_interval_and_a_busy_one_none(
    server: str,
) -> None:
    async with aiohttp.ClientSession() as http:
        silent, busy = await asyncio.gather(
            comment_times(http, f"{server}/silent"), comment_times(http, f"{server}/busy")
        )
    assert busy == []
    # 1.5 s of silence: one comment after 0.2-0.25 s of silence each time (the ticker looks 4
    # times an interval), so about 6 of them (4 on a starved machine), never two within an
    # interval.
    assert 4 <= len(silent) <= 7, silent
    gaps = [later - earlier for earlier, later in itertools.pairwise(silent)]
    assert all(gap >= INTERVAL_S * 0.9 for gap in gaps), gaps


async def test_a_client_that_leaves_does_not_stop_the_others_keepalives(server: str) -> None:
    async with aiohttp.ClientSession() as http:
        staying = asyncio.create_task(comment_times(http, f"{server}/silent"))
        async with http.get(f"{server}/silent") as leaving:
            assert await leaving.content.readline() == b": keep-alive\n"
        # The server's next keep-alive for the client that left finds its connection gone.
        assert len(await staying) >= 4


def test_a_keepalive_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        sse.KeepAlives(0)
