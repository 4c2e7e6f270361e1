"""What the tool loop (gateway/tool_loop.py) sees of the tools the platform runs: servers of
tools, each listed and called, behind one protocol. gateway/main.py hands in the adapters (a
remote MCP server over streamable HTTP, the operator's SMTP relay), so the loop loads no HTTP
or mail library and its tests can give it scripted servers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from domain.answer_options import ToolDefinition


class ToolUnavailable(Exception):
    """A server could not be reached or did not answer in time: its tools cannot be listed."""


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one call gave: the text the model reads next, or why the call failed (error set,
    output empty). A failed call is still an answer to the model, never an exception: the
    model may try something else."""

    output: str
    error: str = ""


class ToolServer(Protocol):
    """One server's tools for one turn. Closed by the loop when the turn ends."""

    @property
    def label(self) -> str: ...

    async def list_tools(self) -> list[ToolDefinition]:
        """Raises ToolUnavailable."""
        ...

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome: ...

    async def aclose(self) -> None: ...


class RemoteServers(Protocol):
    """Opens a remote server the request names, for one turn."""

    def open(self, label: str, url: str, headers: Mapping[str, str]) -> ToolServer: ...
