"""The harness's tool loop for a completion with platform tools: call the model, run the
tools it asked for, feed their results back, call it again, at most the tier's tool steps.

The controls are code, not prompt (docs/decisions.md, "The harness runs the tools"):
- the turn's capability set is computed once, before any server is asked anything, from the
  request, the tier's grants and the operator's registry (domain/capabilities.py); every call
  the model makes is authorized against that frozen value, and one outside it ends the turn
  with nothing run;
- before every model call the materialised context is checked for the lethal trifecta
  (domain/trifecta.py): the user's conversation, a tool's result and a tool able to send data
  out, together, end the turn before the model reads them;
- a tool's result is data in the context (a tool turn), never an instruction this code reads.

Each step is an ordinary completion of the pipeline (limits, the ladder, the safety checks,
the bucket), so a step costs what a completion costs. The loop's stream renumbers the steps'
events as one answer: the first step's meta, every step's text, the tools' events between,
and one done with the steps' usage summed."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import structlog

from domain.answer_options import ToolCall, ToolChoice, ToolDefinition
from domain.capabilities import (
    CallOutsideCapabilities,
    Capability,
    CapabilitySet,
    ConversationSettings,
    SecurityEvent,
    SecurityViolation,
    ToolRequest,
    ToolSpec,
    authorize,
    capability_set,
    server_tool,
    whole_server,
)
from domain.errors import InvalidArgument
from domain.safety import Verdict
from domain.trifecta import ContextPart, Origin, check
from domain.types import Finish, Role, Tier, Usage, User
from gateway.completions import CallerTurn, CompleteRequest, closing_events
from gateway.metrics import GatewayMetrics
from gateway.runs import (
    Delta,
    Done,
    Event,
    Failed,
    MessageRun,
    Meta,
    ToolEnded,
    ToolsListed,
    ToolStarted,
)
from gateway.tool_ports import RemoteServers, ToolOutcome, ToolServer, ToolUnavailable

LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
MAX_PLATFORM_TOOLS = 16


class CompletionRunner(Protocol):
    async def complete(self, user: User, request: CompleteRequest) -> MessageRun: ...


class TextCheck(Protocol):
    """The output check over a whole text (gateway/policies.py's MessagePolicies)."""

    def check_text(self, text: str) -> Verdict | None: ...


@dataclass(frozen=True, slots=True)
class PlatformTool:
    """A tool the request asks the platform to run: an MCP server by label (with url: one
    the request names; without: the operator's), or an operator's tool by name."""

    server_label: str = ""
    server_url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    allowed_tools: tuple[str, ...] = ()
    name: str = ""


@dataclass(frozen=True, slots=True)
class OperatorServer:
    """An MCP server the operator registered: where it is and what its tools can do."""

    label: str
    url: str
    spec: ToolSpec  # named whole_server(label)


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    grants: Mapping[Tier, frozenset[str]]
    max_steps: Mapping[Tier, int]
    # The operator's own tools by name (send_email), each a server of one tool, and its MCP
    # servers by label.
    own_tools: Mapping[str, tuple[ToolSpec, ToolServer]] = field(default_factory=dict)
    servers: Mapping[str, OperatorServer] = field(default_factory=dict)

    def registry(self) -> dict[str, ToolSpec]:
        specs = {name: spec for name, (spec, _) in self.own_tools.items()}
        return specs | {whole_server(s.label): s.spec for s in self.servers.values()}


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


def _requests(tools: Sequence[PlatformTool], policy: ToolPolicy) -> list[ToolRequest]:
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


@dataclass(slots=True)
class _Offered:
    """A tool the model is offered this turn: its server, its definition as listed, and its
    name in the capability set."""

    server: ToolServer
    server_label: str
    definition: ToolDefinition
    qualified: str


@dataclass(slots=True)
class _Turn:
    """One turn's state: the servers opened, the tools offered, the context so far."""

    capabilities: CapabilitySet
    turns: list[CallerTurn]
    parts: list[ContextPart]
    servers: list[ToolServer] = field(default_factory=list)
    offered: dict[str, _Offered] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    next_id: int = 1
    meta_sent: bool = False
    listings: list[Event] = field(default_factory=list)

    def numbered(self, events: Sequence[Event]) -> list[tuple[int, Event]]:
        batch = list(enumerate(events, start=self.next_id))
        self.next_id += len(batch)
        return batch

    def add_usage(self, usage: Usage) -> None:
        self.usage = Usage(self.usage.input_tokens + usage.input_tokens,
                           self.usage.cached_tokens + usage.cached_tokens,
                           self.usage.output_tokens + usage.output_tokens)  # fmt: skip

    def add(self, turn: CallerTurn, origins: frozenset[Origin] | None = None) -> None:
        self.turns.append(turn)
        self.parts.append(ContextPart(turn.counted_text(), origins or _origin(turn)))


@dataclass(slots=True)
class _Step:
    """What one model call asked for and how it ended."""

    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    done: Done | None = None
    failed: bool = False


def _origin(turn: CallerTurn) -> frozenset[Origin]:
    if turn.role is Role.SYSTEM:
        return frozenset({Origin.OPERATOR})
    if turn.role is Role.TOOL:
        return frozenset({Origin.TOOL_RESULT})
    return frozenset({Origin.CONVERSATION})


def _arguments(call: ToolCall) -> dict[str, Any] | None:
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _result_origins(spec: ToolSpec) -> frozenset[Origin]:
    """Where a result's text comes from, by what its tool can do: a tool that brings in
    outside content gives untrusted text, one that reads the user's data gives private text;
    one that does neither (send_email's receipt) gives the platform's own words."""
    origins = set()
    if Capability.BRINGS_UNTRUSTED in spec.capabilities:
        origins.add(Origin.TOOL_RESULT)
    if Capability.READS_PRIVATE in spec.capabilities:
        origins.add(Origin.USER_FILE)
    return frozenset(origins or {Origin.OPERATOR})


def _result_text(outcome: ToolOutcome) -> str:
    """What the model reads of a call: its output, or that it failed and why."""
    if outcome.error:
        return f"The tool failed: {outcome.error}"
    return outcome.output or "(the tool gave no output)"


class PlatformTools(Protocol):
    def run(
        self, user: User, request: CompleteRequest, tools: Sequence[PlatformTool]
    ) -> AsyncIterator[list[tuple[int, Event]]]: ...


class NoTools:
    """A gateway that runs no tools (its composition gave it none)."""

    async def run(
        self, user: User, request: CompleteRequest, tools: Sequence[PlatformTool]
    ) -> AsyncIterator[list[tuple[int, Event]]]:
        raise InvalidArgument("this gateway runs no platform tools")
        yield []  # an async generator, as PlatformTools.run is


class ToolLoop:
    def __init__(
        self,
        completions: CompletionRunner,
        policy: ToolPolicy,
        remote: RemoteServers,
        metrics: GatewayMetrics,
        output_check: TextCheck,
    ) -> None:
        self._completions = completions
        self._policy = policy
        self._remote = remote
        self._output_check = output_check
        self._metrics = metrics
        self._log = structlog.get_logger(component="tool_loop")

    def capabilities(self, user: User, tools: Sequence[PlatformTool]) -> CapabilitySet:
        """The turn's set, from the request and the operator's state alone; raises (a 4xx)
        for a tool that may not run, before anything starts."""
        policy = self._policy
        return capability_set(user.tier, policy.grants, policy.registry(),
                              _requests(tools, policy), ConversationSettings())  # fmt: skip

    async def run(
        self, user: User, request: CompleteRequest, tools: Sequence[PlatformTool]
    ) -> AsyncIterator[list[tuple[int, Event]]]:
        if request.resumable:
            raise InvalidArgument("a completion with platform tools cannot be resumable")
        if request.options.tools:
            raise InvalidArgument("a completion runs either the caller's function tools or "
                                  "platform tools, not both")  # fmt: skip
        capabilities = self.capabilities(user, tools)
        parts = [ContextPart(t.counted_text(), _origin(t)) for t in request.turns]
        turn = _Turn(capabilities, list(request.turns), parts)
        try:
            # The listings go right after the first step's meta: a stream opens with its meta.
            turn.listings = await self._list(turn, tools)
            async for batch in self._steps(user, request, turn):
                yield batch
        finally:
            for server in turn.servers:
                with contextlib.suppress(Exception):
                    await server.aclose()

    # --- listing ---

    async def _list(self, turn: _Turn, tools: Sequence[PlatformTool]) -> list[Event]:
        events: list[Event] = []
        for tool in tools:
            server = self._open(tool)
            turn.servers.append(server)
            try:
                listed = await server.list_tools()
            except ToolUnavailable as error:
                events.append(ToolsListed(tool.server_label, (), str(error)))
                continue
            offered = self._offer(turn, tool, server, listed)
            events.append(ToolsListed(tool.server_label, tuple(offered)))
        return events

    def _open(self, tool: PlatformTool) -> ToolServer:
        if tool.name:
            return self._policy.own_tools[tool.name][1]
        known = self._policy.servers.get(tool.server_label)
        if known is not None:
            return self._remote.open(known.label, known.url, {})
        return self._remote.open(tool.server_label, tool.server_url, dict(tool.headers))

    def _offer(
        self, turn: _Turn, tool: PlatformTool, server: ToolServer, listed: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        """The listed tools the set covers, each offered once under its own name (a name
        two servers share goes to the first)."""
        offered = []
        for definition in listed:
            if tool.name and definition.name != tool.name:
                continue
            qualified = (server_tool(tool.server_label, definition.name)
                         if tool.server_label else definition.name)  # fmt: skip
            if not any(spec.covers(qualified) for spec in turn.capabilities.tools):
                continue
            if definition.name in turn.offered:
                self._log.warning("tool_name_taken", tool=definition.name,
                                  server=tool.server_label)  # fmt: skip
                continue
            turn.offered[definition.name] = _Offered(server, tool.server_label, definition,
                                                     qualified)  # fmt: skip
            offered.append(definition)
        return offered

    # --- the steps ---

    async def _steps(
        self, user: User, request: CompleteRequest, turn: _Turn
    ) -> AsyncIterator[list[tuple[int, Event]]]:
        max_steps = self._policy.max_steps.get(user.tier, 0)
        tools = tuple(offered.definition for offered in turn.offered.values())
        options = replace(request.options, tools=tools, tool_choice=ToolChoice.AUTO)
        for number in range(max_steps + 1):
            try:
                check(turn.parts, turn.capabilities)
            except SecurityViolation as refused:
                yield turn.numbered(self._refused(user, turn, refused.event))
                return
            step = _Step()
            asked = replace(request, turns=tuple(turn.turns), options=options)
            async for events in self._model_step(user, asked, turn, step):
                yield turn.numbered(events)
            if step.failed or step.done is None:
                return
            if not step.calls:
                yield turn.numbered([Done(step.done.finish, turn.usage)])
                return
            if number == max_steps:
                self._metrics.tool_steps_exhausted.labels(user.tier.value).inc()
                notice = (f"This answer stopped after {max_steps} tool steps, the most this "
                          "plan allows in one turn.")  # fmt: skip
                yield turn.numbered([Delta(notice), Done(Finish.LENGTH, turn.usage)])
                return
            try:
                offered = [self._authorized(turn, call) for call in step.calls]
            except CallOutsideCapabilities as refused:
                yield turn.numbered(self._refused(user, turn, refused.event))
                return
            turn.add(CallerTurn(Role.ASSISTANT, step.text, tuple(step.calls)))
            for call, (tool, spec) in zip(step.calls, offered, strict=True):
                yield turn.numbered([ToolStarted(call.call_id, tool.server_label,
                                                 call.name, call.arguments)])  # fmt: skip
                outcome = await self._call(tool, call)
                yield turn.numbered([ToolEnded(call.call_id, outcome.output, outcome.error)])
                result = CallerTurn(Role.TOOL, _result_text(outcome), tool_call_id=call.call_id)
                turn.add(result, _result_origins(spec))

    async def _model_step(
        self, user: User, request: CompleteRequest, turn: _Turn, step: _Step
    ) -> AsyncIterator[list[Event]]:
        """One model call's events for the caller: the first step's meta, every text, a
        failure; its calls and its done are kept in `step`."""
        run = await self._completions.complete(user, request)
        async with closing_events(run) as batches:
            async for batch in batches:
                events: list[Event] = []
                for _, event in batch:
                    match event:
                        case Meta():
                            if not turn.meta_sent:
                                turn.meta_sent = True
                                events.extend([event, *turn.listings])
                        case Delta() if event.tool_calls:
                            step.calls.extend(event.tool_calls)
                            step.text += event.text
                        case Delta():
                            step.text += event.text
                            events.append(event)
                        case Done():
                            turn.add_usage(event.usage)
                            step.done = event
                        case Failed():
                            step.failed = True
                            events.append(event)
                        case _:
                            events.append(event)
                if events:
                    yield events

    def _authorized(self, turn: _Turn, call: ToolCall) -> tuple[_Offered, ToolSpec]:
        """The offered tool a call runs, authorized against the frozen set: a name never
        offered is still checked (and refused) by the set, never looked up elsewhere."""
        offered = turn.offered.get(call.name)
        spec = authorize(turn.capabilities, offered.qualified if offered else call.name)
        if offered is None:
            raise CallOutsideCapabilities(SecurityEvent(
                "call_outside_capabilities", (call.name[:140],),
                f"the model asked for tool {call.name[:140]!r}, which this turn was not "
                "offered: nothing was run"))  # fmt: skip
        return offered, spec

    async def _call(self, tool: _Offered, call: ToolCall) -> ToolOutcome:
        """Runs one call. Its arguments are the model's output and pass the output check
        before anything is sent; its result passes it before the model or the caller reads
        it. Flagged text goes nowhere: the call is not run, or its result is withheld."""
        server = tool.server_label or call.name
        arguments = _arguments(call)
        if arguments is None:
            return ToolOutcome("", "the arguments are not a JSON object")
        if self._output_check.check_text(call.arguments) is not None:
            self._metrics.tool_calls.labels(server, "arguments_withheld").inc()
            return ToolOutcome("", "the call was not run: its arguments did not pass the "
                               "platform's output check")  # fmt: skip
        outcome = await tool.server.call(tool.definition.name, arguments)
        if outcome.output and self._output_check.check_text(outcome.output) is not None:
            self._metrics.tool_calls.labels(server, "result_withheld").inc()
            return ToolOutcome("", "the result was withheld: it did not pass the platform's "
                               "output check")  # fmt: skip
        self._metrics.tool_calls.labels(server, "error" if outcome.error else "ok").inc()
        return outcome

    def _refused(self, user: User, turn: _Turn, event: SecurityEvent) -> list[Event]:
        """The turn ends here, nothing more run: logged and counted as a security event, and
        the reason said to the caller as the platform's refusal."""
        self._metrics.security_events.labels(event.kind).inc()
        self._log.warning("security_event", kind=event.kind, tools=list(event.tools),
                          user_id=user.user_id, detail=event.detail)  # fmt: skip
        return [Delta(f"The platform stopped this turn: {event.detail}.", refusal=True),
                Done(Finish.REFUSED, turn.usage)]  # fmt: skip
