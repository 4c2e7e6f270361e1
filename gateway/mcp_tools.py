"""Remote MCP servers' tools, over streamable HTTP with the official SDK (`mcp`, version 2).

A request names a server (label, URL, headers); the tool loop opens it for one turn, lists its
tools, calls some, and closes it. Nothing here raises to the loop but ToolUnavailable (from
list_tools: the model is then not offered that server's tools) and CancelledError: a failed or
timed-out call is an answer the model reads (ToolOutcome.error), and may work around.

The connection lives in a task of its own (see McpServer): the SDK's transport holds anyio task
groups, which must be entered and left in one task, and which cancel the task that holds them
when the transport fails. Held in the loop's task, a server that went away mid-turn would
cancel the whole turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

import httpx2
import structlog
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import REQUEST_TIMEOUT, CallToolResult, ContentBlock, ResourceLink, TextContent

from domain.answer_options import ToolDefinition
from gateway.tool_ports import ToolOutcome, ToolUnavailable

# A server's answer may come as an event stream the server holds open between events: reads
# get the SDK's own default bound, the caller's timeout_s bounds each list and call.
_STREAM_READ_S = 300.0
# A server's listing is paged; one that never ends its pages cannot hold a turn.
_MAX_PAGES = 100


class McpServers:
    """Opens remote MCP servers for a turn (gateway/tool_ports.py's RemoteServers)."""

    def __init__(self, timeout_s: float = 30.0, max_output_chars: int = 65_536) -> None:
        self._timeout_s = timeout_s
        self._max_output_chars = max_output_chars

    def open(self, label: str, url: str, headers: Mapping[str, str]) -> McpServer:
        return McpServer(label, url, headers, self._timeout_s, self._max_output_chars)


class McpServer:
    """One remote MCP server's tools for one turn (a ToolServer). Connects on the first list or
    call and keeps that session until aclose().

    The SDK's Client must be entered and left in one task (its anyio task groups), and its
    transport cancels that task when it fails (a server gone mid-turn). So the session is
    opened, held and closed by a task this object starts (`_own`), and list/call only send
    requests on it: they may come from any task of the loop, a transport failure ends the owner
    task only (a waiting request then fails with "connection closed"), and each list or call is
    bounded by timeout_s, connecting included. aclose() must be awaited on the same event loop.

    headers go on every HTTP request to the server (its bearer token, say): never logged, never
    in a reason or an outcome.
    """

    def __init__(
        self,
        label: str,
        url: str,
        headers: Mapping[str, str],
        timeout_s: float = 30.0,
        max_output_chars: int = 65_536,
    ) -> None:
        self._label = label
        self._url = url
        self._headers = dict(headers)
        self._timeout_s = timeout_s
        self._max_output_chars = max_output_chars
        self._owner: asyncio.Task[None] | None = None
        # The owner's answer: the entered Client, or None when it could not connect (_failure).
        self._ready: asyncio.Future[Client | None] | None = None
        self._failure = ""
        self._stop = asyncio.Event()
        self._closed = False
        self._log = structlog.get_logger(component="mcp-tools", server=label)

    @property
    def label(self) -> str:
        return self._label

    async def list_tools(self) -> list[ToolDefinition]:
        try:
            async with asyncio.timeout(self._timeout_s):
                client = await self._client()
                if client is None:
                    raise ToolUnavailable(f"MCP server {self._label}: {self._failure}")
                return await self._list(client)
        except ToolUnavailable as unavailable:
            self._log.warning("mcp server unavailable", reason=str(unavailable))
            raise
        except Exception as error:
            server = f"MCP server {self._label}"
            reason = self._reason(error, server, f"{server} answered an error",
                                  f"{server} could not list its tools")  # fmt: skip
        self._log.warning("mcp server unavailable", reason=reason)
        raise ToolUnavailable(reason)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        try:
            async with asyncio.timeout(self._timeout_s):
                client = await self._client()
                if client is None:
                    unreached = f"MCP server {self._label}: {self._failure}"
                    return ToolOutcome(output="", error=unreached)
                result = await client.call_tool(name, dict(arguments))
        except Exception as failed:
            error = self._reason(failed, name, f"{name} failed", f"{name} failed")
        else:
            text = self._cut(_text_of(result))
            if result.is_error:
                return ToolOutcome(output="", error=text or f"{name} failed")
            return ToolOutcome(output=text)
        self._log.info("mcp call failed", tool=name, error=error)
        return ToolOutcome(output="", error=error)

    def _reason(self, error: Exception, who: str, refused: str, broken: str) -> str:
        """Why a listing or a call failed: no answer in time (ours or the server's own
        time-out), an error the server answered, or anything else on the way."""
        if isinstance(error, TimeoutError) or (
            isinstance(error, MCPError) and error.code == REQUEST_TIMEOUT
        ):
            return f"{who} did not answer within {self._timeout_s:g} s"
        if isinstance(error, MCPError):
            return f"{refused}: {_mcp_error(error)}"
        return f"{broken}: {_describe(error)}"

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        owner = self._owner
        if owner is None:
            return
        self._stop.set()
        try:
            # Leaving ends the server's session (an HTTP DELETE), bounded like any call.
            await asyncio.wait({owner}, timeout=self._timeout_s)
        finally:
            if not owner.done():
                owner.cancel()

    async def _client(self) -> Client | None:
        if self._closed:
            self._failure = "closed"
            return None
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._owner = asyncio.create_task(self._own(self._ready), name=f"mcp {self._label}")
        # Shielded: a caller's timeout leaves the connection going for the next list or call.
        return await asyncio.shield(self._ready)

    async def _own(self, ready: asyncio.Future[Client | None]) -> None:
        """Opens the session, holds it until aclose(), closes it: all in this one task."""
        try:
            async with AsyncExitStack() as stack:
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=self._headers,
                        timeout=httpx2.Timeout(self._timeout_s, read=_STREAM_READ_S),
                    )
                )
                transport = streamable_http_client(self._url, http_client=http)
                client = await stack.enter_async_context(
                    Client(transport, read_timeout_seconds=self._timeout_s)
                )
                ready.set_result(client)
                await self._stop.wait()
        except asyncio.CancelledError:
            self._settle(ready, "closed while connecting")
            raise
        except Exception as error:
            if ready.done():
                # The transport failed after connecting (the server went away): requests
                # waiting on it fail by themselves, as "connection closed".
                self._log.info("mcp session ended", reason=_describe(error))
            elif isinstance(error, MCPError) and error.code == REQUEST_TIMEOUT:
                self._settle(ready, f"did not answer within {self._timeout_s:g} s")
            elif isinstance(error, MCPError):
                self._settle(ready, f"answered an error: {_mcp_error(error)}")
            else:
                self._settle(ready, f"could not connect: {_describe(error)}")

    def _settle(self, ready: asyncio.Future[Client | None], reason: str) -> None:
        if not ready.done():
            self._failure = reason
            ready.set_result(None)

    async def _list(self, client: Client) -> list[ToolDefinition]:
        tools: list[ToolDefinition] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(
                ToolDefinition(
                    name=tool.name,
                    description=tool.description or "",
                    parameters=json.dumps(tool.input_schema),
                )
                for tool in page.tools
            )
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _cut(self, text: str) -> str:
        left_out = len(text) - self._max_output_chars
        if left_out <= 0:
            return text
        return (
            f"{text[: self._max_output_chars]}\n[output cut: {left_out} more characters left out]"
        )


def _text_of(result: CallToolResult) -> str:
    """The result's text contents, joined; the others named, for the model to know of them."""
    return "\n".join(_block_text(block) for block in result.content)


def _block_text(block: ContentBlock) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ResourceLink):
        return f"[resource_link {block.uri}]"
    return f"[{block.type}]"


def _mcp_error(error: MCPError) -> str:
    return f"{error.message} (code {error.code})"


def _describe(error: BaseException) -> str:
    """What failed, one line: an exception group (the SDK's task groups) by its leaves."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in error.exceptions)
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
