"""What the tool loop (gateway/tool_loop.py) sees of the tools the platform runs: servers of
tools, each listed and called, behind one protocol. gateway/main.py hands in the adapters (a
remote MCP server over streamable HTTP, the operator's SMTP relay), so the loop loads no HTTP
or mail library and its tests can give it scripted servers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

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
    # The passages the output brings into the context, by the ids an answer may cite them by
    # (domain/citations.py); none for a tool that retrieves nothing citable.
    passage_ids: tuple[str, ...] = ()


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


@runtime_checkable
class PassageSource(Protocol):
    """A server whose results carry passages (file_search): it says which cited ids name a
    passage of the user's, so an invented one is told from one the turn did not read."""

    async def resolving(self, ids: Sequence[str]) -> frozenset[str]: ...
