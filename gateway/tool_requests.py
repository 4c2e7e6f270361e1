"""What a completion asks of the platform's tools, checked before anything runs: the tools it
names (an MCP server, the operator's own), the operator's policy they are read against, the
names they take in the capability set, and the calls that wait for a person's decision."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from domain.answer_options import ToolCall
from domain.capabilities import (
    EVERY_CAPABILITY,
    Capability,
    ToolRequest,
    ToolSpec,
    server_tool,
    whole_server,
)
from domain.errors import InvalidArgument
from domain.retrieval import AlwaysRetrieve, RetrievalDecider
from domain.types import Role, Tier, User
from gateway.completions import CallerTurn
from gateway.tool_ports import ToolServer

LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
MAX_PLATFORM_TOOLS = 16


@dataclass(frozen=True, slots=True)
class PlatformTool:
    """A tool the request asks the platform to run: an MCP server by label (with url: one
    the request names; without: the operator's), or an operator's tool by name."""

    server_label: str = ""
    server_url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    allowed_tools: tuple[str, ...] = ()
    name: str = ""
    # Whether each call of its tools waits for a person's approval, and the tools that go
    # the other way (OpenAI's require_approval with tool names).
    require_approval: bool = False
    approval_exceptions: tuple[str, ...] = ()

    def needs_approval(self, tool: str) -> bool:
        return self.require_approval != (tool in self.approval_exceptions)

    def confirmed(self) -> list[str]:
        """The capability set's names of this request's tools whose every call a person
        approves."""
        if self.name:
            return [self.name] if self.needs_approval(self.name) else []
        if not self.allowed_tools:
            whole = self.require_approval and not self.approval_exceptions
            return [whole_server(self.server_label)] if whole else []
        return [server_tool(self.server_label, t) for t in self.allowed_tools
                if self.needs_approval(t)]  # fmt: skip


@dataclass(frozen=True, slots=True)
class OperatorServer:
    """An MCP server the operator registered: where it is and what its tools can do."""

    label: str
    url: str
    spec: ToolSpec  # named whole_server(label)


# Opens one of the operator's own tools for a user's turn (remember writes that user's memory).
OwnTool = Callable[[User], ToolServer]


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    grants: Mapping[Tier, frozenset[str]]
    max_steps: Mapping[Tier, int]
    # The operator's own tools by name (send_email, remember), each a server of one tool
    # opened for the user's turn, and its MCP servers by label.
    own_tools: Mapping[str, tuple[ToolSpec, OwnTool]] = field(default_factory=dict)
    servers: Mapping[str, OperatorServer] = field(default_factory=dict)
    # Whether this turn's message needs outside content; when not, the tools that bring it in
    # are neither listed nor offered (domain/retrieval.py).
    retrieval: RetrievalDecider = field(default_factory=AlwaysRetrieve)
    # The operator's tools whose writes outlive the turn (remember: later turns read them as
    # the user's own data). A call of one is not run once the turn has read untrusted
    # content: an injected page must not plant instructions in every later conversation.
    lasting: frozenset[str] = frozenset()
    # The operator's tools that search the user's own documents (file_search): a retrieval,
    # so the retrieval gate decides whether a turn offers them, as it does for tools that
    # bring outside content in.
    searches: frozenset[str] = frozenset()
    # The citation-shaped forms with no id (domain/citations.py's Form, C03) each surface
    # keeps; every other one is removed from an answer that read passages.
    citation_forms: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Whether an answer step that read passages is decoded under the grammar of their ids.
    citation_grammar: bool = True

    def registry(self) -> dict[str, ToolSpec]:
        specs = {name: spec for name, (spec, _) in self.own_tools.items()}
        return specs | {whole_server(s.label): s.spec for s in self.servers.values()}

    def retrieves(self, tool: PlatformTool) -> bool:
        """Whether the tool retrieves: it brings outside content in (a server the request
        names is taken to), or searches the user's documents."""
        if tool.name in self.searches:
            return True
        if tool.name:
            capabilities = self.own_tools[tool.name][0].capabilities
        elif tool.server_label in self.servers:
            capabilities = self.servers[tool.server_label].spec.capabilities
        else:
            capabilities = EVERY_CAPABILITY
        return Capability.BRINGS_UNTRUSTED in capabilities


def _check_tool(tool: PlatformTool, policy: ToolPolicy) -> None:
    if bool(tool.name) == bool(tool.server_label):
        raise InvalidArgument("a platform tool names either a server_label or a tool name")
    label = tool.server_label
    if label and (len(label) > 64 or not set(label) <= LABEL_CHARS):
        raise InvalidArgument(f"server_label {label[:70]!r}: 1-64 letters, digits, _ or -")
    known = policy.servers.get(label)
    if label and not tool.server_url and known is None:
        raise InvalidArgument(f"server_label {label!r} is no server of the operator's: give "
                              "its server_url")  # fmt: skip
    if known is not None and tool.server_url and tool.server_url != known.url:
        raise InvalidArgument(f"server_label {label!r} names the operator's server, which is "
                              "at another address: choose another label")  # fmt: skip
    if tool.server_url and not tool.server_url.startswith(("http://", "https://")):
        raise InvalidArgument(f"server_url of {label!r} must be an http or https address")


def capability_requests(tools: Sequence[PlatformTool], policy: ToolPolicy) -> list[ToolRequest]:
    """What the request names, as the capability set reads it. A server the operator
    registered is the operator's (its tags), whatever address the request repeats."""
    if len(tools) > MAX_PLATFORM_TOOLS:
        raise InvalidArgument(f"at most {MAX_PLATFORM_TOOLS} platform tools are accepted")
    labels = [tool.server_label for tool in tools if tool.server_label]
    if len(labels) != len(set(labels)):
        raise InvalidArgument("each server_label may be named once")
    requests = []
    for tool in tools:
        _check_tool(tool, policy)
        if tool.name:
            requests.append(ToolRequest(tool.name))
            continue
        url = "" if tool.server_label in policy.servers else tool.server_url
        names = [server_tool(tool.server_label, name) for name in tool.allowed_tools]
        names = names or [whole_server(tool.server_label)]
        requests.extend(ToolRequest(name, server_url=url) for name in names)
    return requests


NO_APPROVALS: Mapping[str, bool] = {}
DECLINED = "the user declined this call"


def pending_calls(turns: Sequence[CallerTurn], approvals: Mapping[str, bool]) -> list[ToolCall]:
    """The calls the turns end with that no tool turn answers: each waits for the decision
    a person was asked for, which this request must bring."""
    answered = {turn.tool_call_id for turn in turns if turn.role is Role.TOOL}
    pending: list[ToolCall] = []
    for turn in reversed(turns):
        if turn.role is not Role.ASSISTANT or not turn.tool_calls:
            break
        pending[:0] = [call for call in turn.tool_calls if call.call_id not in answered]
    for call in pending:
        if call.call_id not in approvals:
            raise InvalidArgument(f"call {call.call_id[:80]!r} waits for a person's approval: "
                                  "send the decision with it")  # fmt: skip
    unknown = set(approvals) - {call.call_id for call in pending}
    if unknown:
        raise InvalidArgument(f"no call waits for the decision on {sorted(unknown)[0][:80]!r}")
    return pending
