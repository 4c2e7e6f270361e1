"""A turn's capability set: the tools the platform may run for it, fixed before the turn
fetches anything.

It is computed once, from trusted state only: the tier's grants, the operator's registry of
tools (what each can do), the tools the request names and the conversation's settings. Nothing
a tool returns, and nothing the model writes, is an input, so content fetched during the turn
cannot widen it: the set is a frozenset inside a frozen value, and every tool call is checked
against that value (`authorize`), which is never computed again within the turn.

Each tool is tagged with what it can do, the legs of the lethal trifecta (domain/trifecta.py):
read the user's private data, bring untrusted content into the context, communicate
externally. A tool the request brings that the operator does not describe (a remote MCP server
the caller names) is taken to do all three: what the platform cannot vouch for, it assumes the
worst of."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from domain.errors import InvalidArgument, PermissionDenied
from domain.types import Tier

NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# A server's tools are named "label.tool"; "label.*" stands for every tool of that server,
# named before the server is asked what it has (the set is fixed before anything is fetched).
EVERY_TOOL_OF = ".*"
SERVER_WIDE = re.compile(r"^[A-Za-z0-9_:-]{1,64}\.\*$")


class Capability(enum.StrEnum):
    READS_PRIVATE = "reads_private"
    BRINGS_UNTRUSTED = "brings_untrusted"
    COMMUNICATES_EXTERNALLY = "communicates_externally"


EVERY_CAPABILITY = frozenset(Capability)
# The grant that lets a tier use tools from remote servers the request names itself.
REQUEST_SERVERS = "request_servers"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the platform can run, as the operator registered it."""

    name: str
    capabilities: frozenset[Capability]

    def covers(self, name: str) -> bool:
        """Whether a call of `name` is this tool: the same name, or a tool of the server this
        spec names whole ("label.*" covers "label.fetch_page")."""
        if self.name.endswith(EVERY_TOOL_OF):
            return name.startswith(self.name[:-1]) and len(name) > len(self.name) - 1
        return name == self.name


def server_tool(label: str, tool: str) -> str:
    """The capability set's name of a server's tool."""
    return f"{label}.{tool}"


def whole_server(label: str) -> str:
    return label + EVERY_TOOL_OF


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """A tool the request names: one of the operator's (by name), or one on a remote server
    the request gives (server_url set)."""

    name: str
    server_url: str = ""


@dataclass(frozen=True, slots=True)
class ConversationSettings:
    """What the user turned off for this conversation."""

    disabled_tools: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class SecurityEvent:
    """What the harness refused and why, for the log and the counter."""

    kind: str
    tools: tuple[str, ...]
    detail: str


class SecurityViolation(PermissionDenied):
    """The harness refused to go on with the turn; event says what was refused."""

    def __init__(self, event: SecurityEvent) -> None:
        super().__init__(event.detail)
        self.event = event


class CallOutsideCapabilities(SecurityViolation):
    """The model asked for a tool the turn's capability set does not hold."""


@dataclass(frozen=True, slots=True)
class CapabilitySet:
    tools: frozenset[ToolSpec]

    def __post_init__(self) -> None:
        # A mutable set passed in could be added to later; only a frozenset is a fixed set.
        if not isinstance(self.tools, frozenset):
            raise TypeError("a capability set holds a frozenset of tools")

    @property
    def names(self) -> frozenset[str]:
        return frozenset(tool.name for tool in self.tools)

    def able_to(self, capability: Capability) -> frozenset[str]:
        """The names of the tools that can do it."""
        return frozenset(tool.name for tool in self.tools if capability in tool.capabilities)


NO_TOOLS = CapabilitySet(frozenset())


def _checked(request: object) -> ToolRequest:
    # Only the request's own parsed tools may be named: a value from anywhere else (a tool's
    # result, the model's text) is refused by type, not trusted by shape.
    if not isinstance(request, ToolRequest):
        raise TypeError(f"a capability set is computed from ToolRequests, not {type(request)}")
    if not (NAME.match(request.name) or SERVER_WIDE.match(request.name)):
        raise InvalidArgument(f"tool name {request.name[:140]!r} is not a valid name")
    return request


def _spec(
    request: ToolRequest, granted: frozenset[str], registry: Mapping[str, ToolSpec]
) -> ToolSpec:
    if request.server_url:
        if REQUEST_SERVERS not in granted:
            raise PermissionDenied(
                f"tool {request.name!r}: this plan may not use tools from servers the request names"
            )
        return ToolSpec(request.name, EVERY_CAPABILITY)
    key, spec = _registered(request.name, registry)
    if spec is None:
        raise InvalidArgument(f"tool {request.name!r} is not one the platform runs")
    if key not in granted:
        raise PermissionDenied(f"tool {request.name!r} is not part of this plan")
    return spec if key == request.name else ToolSpec(request.name, spec.capabilities)


def _registered(name: str, registry: Mapping[str, ToolSpec]) -> tuple[str, ToolSpec | None]:
    """The operator's entry for a tool: its own, or its server's ("label.*"), which is also
    what a tier is granted."""
    if name in registry:
        return name, registry[name]
    label, dot, _ = name.partition(".")
    if dot:
        key = whole_server(label)
        return key, registry.get(key)
    return name, None


def capability_set(
    tier: Tier,
    grants: Mapping[Tier, frozenset[str]],
    registry: Mapping[str, ToolSpec],
    requested: Iterable[ToolRequest],
    settings: ConversationSettings,
) -> CapabilitySet:
    """The tools this turn may run: those the request names that the tier is granted and the
    conversation has not turned off. A tool named that may not run is refused with the reason,
    never dropped quietly: the caller asked for it."""
    granted = grants.get(tier, frozenset())
    tools = set()
    for request in map(_checked, requested):
        if request.name in settings.disabled_tools:
            raise PermissionDenied(f"tool {request.name!r} is turned off in this conversation")
        tools.add(_spec(request, granted, registry))
    return CapabilitySet(frozenset(tools))


def authorize(capabilities: CapabilitySet, name: str) -> ToolSpec:
    """The tool a call may run; CallOutsideCapabilities when the turn's set does not hold it."""
    if not isinstance(capabilities, CapabilitySet) or not isinstance(capabilities.tools, frozenset):
        raise TypeError("calls are authorized against the turn's frozen CapabilitySet only")
    for tool in capabilities.tools:
        if tool.covers(name):
            return tool
    event = SecurityEvent(
        "call_outside_capabilities",
        (name,),
        f"the model asked for tool {name[:140]!r}, which this turn may not run: nothing was run",
    )
    raise CallOutsideCapabilities(event)
