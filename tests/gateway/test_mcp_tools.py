"""gateway/mcp_tools.py against a real MCP server (the SDK's own, in a process of its own,
tests/mcp_pages_server.py), over streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from gateway.mcp_tools import McpServers
from gateway.tool_ports import RemoteServers, ToolOutcome, ToolServer, ToolUnavailable
from tests.servers import free_port
from tests.tool_servers import McpTestServer, run_mcp_server

PAGE_URL = "https://example.test/sky"
PAGE = "The sky is blue because air scatters short wavelengths more.\nSecond line."
BIG_URL = "https://example.test/big"
BIG = "".join(f"{n:09d}\n" for n in range(1_000))  # 10,000 characters


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with run_mcp_server({PAGE_URL: PAGE, BIG_URL: BIG}) as server:
        yield server


async def test_lists_the_servers_tools_with_their_schemas(mcp_server: McpTestServer) -> None:
    servers: RemoteServers = McpServers()
    server: ToolServer = servers.open("pages", mcp_server.url, {"Authorization": "Bearer t"})
    try:
        tools = {tool.name: tool for tool in await server.list_tools()}
    finally:
        await server.aclose()
    assert sorted(tools) == ["add", "fetch_page", "slow"]
    add = json.loads(tools["add"].parameters)
    assert add["type"] == "object"
    assert sorted(add["required"]) == ["a", "b"]
    assert add["properties"]["a"]["type"] == "integer"
    assert add["properties"]["b"]["type"] == "integer"
    assert json.loads(tools["fetch_page"].parameters)["properties"]["url"]["type"] == "string"
    assert tools["slow"].description
    assert server.label == "pages"


async def test_a_call_answers_its_text(mcp_server: McpTestServer) -> None:
    server = McpServers().open("pages", mcp_server.url, {})
    try:
        # No listing first: the first call connects.
        assert await server.call("add", {"a": 2, "b": 3}) == ToolOutcome(output="5")
        assert await server.call("fetch_page", {"url": PAGE_URL}) == ToolOutcome(output=PAGE)
    finally:
        await server.aclose()


async def test_a_tools_error_is_an_error_outcome(mcp_server: McpTestServer) -> None:
    server = McpServers().open("pages", mcp_server.url, {})
    try:
        missing = await server.call("fetch_page", {"url": "https://example.test/none"})
        unknown = await server.call("no_such_tool", {})
        bad = await server.call("add", {"a": "two", "b": 3})
    finally:
        await server.aclose()
    assert missing.output == ""
    assert "no page at https://example.test/none" in missing.error
    assert unknown.output == "" and "no_such_tool" in unknown.error
    assert bad.output == "" and bad.error


async def test_output_past_the_limit_is_cut_with_a_notice(mcp_server: McpTestServer) -> None:
    server = McpServers(max_output_chars=100).open("pages", mcp_server.url, {})
    try:
        cut = await server.call("fetch_page", {"url": BIG_URL})
        small = await server.call("fetch_page", {"url": PAGE_URL})
    finally:
        await server.aclose()
    assert cut.output == BIG[:100] + "\n[output cut: 9900 more characters left out]"
    assert small.output == PAGE


async def test_a_call_past_the_timeout_is_an_error_and_the_session_goes_on(
    mcp_server: McpTestServer,
) -> None:
    server = McpServers(timeout_s=0.5).open("pages", mcp_server.url, {})
    try:
        await server.list_tools()
        started = time.monotonic()
        slow = await server.call("slow", {"seconds": 5})
        took = time.monotonic() - started
        after = await server.call("add", {"a": 1, "b": 1})
    finally:
        await server.aclose()
    assert slow.output == ""
    assert "0.5 s" in slow.error
    assert took < 2
    assert after == ToolOutcome(output="2")


async def test_a_server_not_listening_is_unavailable_within_the_timeout() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    server = McpServers(timeout_s=2).open("gone", url, {})
    try:
        started = time.monotonic()
        with pytest.raises(ToolUnavailable, match="gone"):
            await server.list_tools()
        assert time.monotonic() - started < 2.5
        outcome = await server.call("add", {"a": 1, "b": 2})
    finally:
        await server.aclose()
    assert outcome.output == "" and "gone" in outcome.error


async def test_a_server_gone_mid_turn_fails_the_call_not_the_turn() -> None:
    """The SDK's transport cancels the task holding it when it fails: held in the caller's
    task, this call would have raised CancelledError into the tool loop."""
    with run_mcp_server({}) as doomed:
        server = McpServers(timeout_s=5).open("doomed", doomed.url, {})
        assert len(await server.list_tools()) == 3
    try:
        outcome = await server.call("add", {"a": 1, "b": 2})
        # The calling task is not being cancelled: it goes on.
        await asyncio.sleep(0)
    finally:
        await server.aclose()
    assert outcome.output == "" and outcome.error


async def test_aclose_is_idempotent(mcp_server: McpTestServer) -> None:
    never_opened = McpServers().open("pages", mcp_server.url, {})
    await never_opened.aclose()
    await never_opened.aclose()
    server = McpServers().open("pages", mcp_server.url, {})
    await server.list_tools()
    await server.aclose()
    await server.aclose()
    closed = await server.call("add", {"a": 1, "b": 2})
    assert closed.output == "" and "closed" in closed.error
