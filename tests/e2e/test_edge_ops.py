"""What operators configure at the edge, on a real edge process: CORS, body and header size
limits, the per-address request limit, and the metrics that show them."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from edge.app import EdgeSettings, build_app

pytestmark = pytest.mark.slow

APP_ORIGIN = "https://app.example"
PER_IP = 3


@pytest.fixture(scope="module")
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("edge-ops"),
            edge_listen="127.0.0.1:0",
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                # Slower than real time: a stream stays open while a test looks at it.
                "CHAT_NODEAGENT_SIM_SPEED": "0.2",
                "CHAT_EDGE_CORS_ORIGINS": APP_ORIGIN,
                "CHAT_EDGE_MAX_REQUESTS_PER_IP": str(PER_IP),
            },
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


def bearer(platform: LocalPlatform, tier: str = "plus") -> dict[str, str]:
    return {"Authorization": f"Bearer {platform.tokens[tier]}"}


# CORS ---------------------------------------------------------------------------------------------


async def preflight(http: aiohttp.ClientSession, url: str, origin: str) -> aiohttp.ClientResponse:
    async with http.options(
        f"{url}/v1/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    ) as response:
        await response.read()
        return response


async def test_a_listed_origin_may_call_and_read_errors_and_streams(edge: LocalPlatform) -> None:
    async with aiohttp.ClientSession() as http:
        allowed = await preflight(http, edge.edge_url, APP_ORIGIN)
        assert allowed.status == 204
        assert allowed.headers["Access-Control-Allow-Origin"] == APP_ORIGIN
        assert "Authorization" in allowed.headers["Access-Control-Allow-Headers"]
        assert "POST" in allowed.headers["Access-Control-Allow-Methods"]
        # An error must be readable too: the page has to show why (a 401 here).
        async with http.get(f"{edge.edge_url}/v1/models", headers={"Origin": APP_ORIGIN}) as r:
            assert r.status == 401
            assert r.headers["Access-Control-Allow-Origin"] == APP_ORIGIN
            assert "Retry-After" in r.headers["Access-Control-Expose-Headers"]
        async with http.post(
            f"{edge.edge_url}/v1/chat/completions",
            json={
                "model": "auto",
                "messages": [{"role": "user", "content": "Hi"}],
                "stream": True,
                "max_tokens": 3,
            },
            headers={**bearer(edge), "Origin": APP_ORIGIN},
        ) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == APP_ORIGIN
            await r.read()


async def test_an_unlisted_origin_is_refused(edge: LocalPlatform) -> None:
    async with aiohttp.ClientSession() as http:
        refused = await preflight(http, edge.edge_url, "https://evil.example")
        assert refused.status == 403
        assert "Access-Control-Allow-Origin" not in refused.headers
        async with http.get(
            f"{edge.edge_url}/v1/limits", headers={**bearer(edge), "Origin": "https://evil.example"}
        ) as r:
            assert r.status == 200  # the browser, not the edge, withholds it from the page
            assert "Access-Control-Allow-Origin" not in r.headers


async def test_by_default_no_origin_may_call_cross_origin() -> None:
    async with grpc.aio.insecure_channel("127.0.0.1:1") as channel:
        server = TestServer(build_app(channel, EdgeSettings(), CollectorRegistry()))
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as http:
                refused = await preflight(http, str(server.make_url("")), APP_ORIGIN)
            assert refused.status == 403
        finally:
            await server.close()


# Size limits --------------------------------------------------------------------------------------


async def raw_request(platform: LocalPlatform, head: str) -> int:
    """Sends a request head exactly as written (clients would refuse to send some of these)."""
    host, port = platform.edge_url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head.encode())
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1])


async def test_oversized_headers_and_bodies_are_refused(edge: LocalPlatform) -> None:
    long_header = f"GET /v1/limits HTTP/1.1\r\nHost: x\r\nX-Big: {'a' * 9000}\r\n\r\n"
    assert await raw_request(edge, long_header) in (400, 431)
    many = "".join(f"X-H{i}: v\r\n" for i in range(80))
    assert await raw_request(edge, f"GET /v1/limits HTTP/1.1\r\nHost: x\r\n{many}\r\n") in (
        400,
        431,
    )
    big = json.dumps({"content": "x" * 70_000})
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{edge.edge_url}/v1/conversations/c_big/messages",
            data=big,
            headers={**bearer(edge), "Content-Type": "application/json"},
        ) as r:
            assert r.status == 413
            assert "over 65536 bytes" in (await r.json())["error"]["message"]


async def test_text_that_is_not_unicode_is_a_400(edge: LocalPlatform) -> None:
    # A lone surrogate is valid JSON and valid Python text, but no protobuf string.
    async with aiohttp.ClientSession() as http:
        for path, body in [
            ("/v1/conversations/c_sur/messages", '{"content": "\\ud800"}'),
            (
                "/v1/chat/completions",
                '{"model": "auto", "messages": [{"role": "user", "content": "\\ud800"}]}',
            ),
        ]:
            async with http.post(
                edge.edge_url + path,
                data=body,
                headers={**bearer(edge), "Content-Type": "application/json"},
            ) as r:
                assert r.status == 400, await r.text()
                assert "Unicode" in (await r.json())["error"]["message"]


# Per-address limit and metrics ---------------------------------------------------------------


async def metric(http: aiohttp.ClientSession, url: str, name: str) -> float:
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found, name
    return float(found.group(1))


async def read_chunks(response: aiohttp.ClientResponse, count: int) -> None:
    seen = 0
    while seen < count:
        line = await response.content.readline()
        assert line, "the stream ended early"
        seen += line.startswith(b"data: ")


async def test_one_address_may_hold_only_so_many_requests_open(edge: LocalPlatform) -> None:
    url = edge.edge_url
    async with aiohttp.ClientSession() as http:
        events_before = await metric(http, url, "edge_sse_events_total")
        streams = []
        for i in range(PER_IP):
            response = await http.post(
                f"{url}/v1/chat/completions",
                json={
                    "model": "auto",
                    "messages": [{"role": "user", "content": f"Essay {i}"}],
                    "stream": True,
                },
                headers=bearer(edge),
            )
            assert response.status == 200
            await read_chunks(response, 1)  # the answer is running and being relayed
            streams.append(response)
        assert await metric(http, url, "edge_open_streams") == PER_IP
        assert await metric(http, url, "edge_open_requests") == PER_IP
        async with http.get(f"{url}/v1/limits", headers=bearer(edge)) as refused:
            assert refused.status == 429 and refused.headers["Retry-After"] == "1"
            assert (
                f"already has {PER_IP} requests open" in (await refused.json())["error"]["message"]
            )
        async with http.get(f"{url}/healthz") as probe:
            assert probe.status == 200  # probes are never refused
        for response in streams:
            response.close()
        for _ in range(50):
            if await metric(http, url, "edge_open_requests") == 0:
                break
            await asyncio.sleep(0.1)
        async with http.get(f"{url}/v1/limits", headers=bearer(edge)) as again:
            assert again.status == 200
        assert await metric(http, url, "edge_refused_per_ip_limit_total") >= 1
        assert await metric(http, url, 'edge_responses_total{status="429"}') >= 1
        assert await metric(http, url, 'edge_responses_total{status="200"}') >= PER_IP
        assert await metric(http, url, "edge_sse_events_total") >= events_before + PER_IP
        assert await metric(http, url, "edge_open_streams") == 0


async def test_a_client_walking_away_mid_stream_is_no_error(edge: LocalPlatform) -> None:
    """Apps drop streams all the time (a closed tab, a lost network): the edge ends the request
    and cancels its call upstream, and logs no traceback for it."""
    url, log = edge.edge_url, edge.settings.state_dir / "edge.log"
    logged_before = log.stat().st_size
    async with aiohttp.ClientSession() as http:
        for path, body in [
            ("/v1/conversations/c_walk_away/messages", {"content": "Write a long essay."}),
            ("/v1/chat/completions", {"model": "auto", "stream": True,
                                      "messages": [{"role": "user", "content": "An essay."}]}),
        ]:  # fmt: skip
            response = await http.post(url + path, json=body, headers=bearer(edge))
            assert response.status == 200
            await read_chunks(response, 2)  # the answer is running and being relayed
            response.close()
            # The edge notices at its next write, which the running answer makes soon.
            for _ in range(100):
                if await metric(http, url, "edge_open_streams") == 0:
                    break
                await asyncio.sleep(0.1)
            assert await metric(http, url, "edge_open_streams") == 0
    with log.open() as lines:
        lines.seek(logged_before)
        written = lines.read()
    assert "Error handling request" not in written and "Traceback" not in written, written
