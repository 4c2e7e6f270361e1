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
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

import structlog

from domain.answer_options import ToolCall, ToolChoice, ToolDefinition
from domain.capabilities import (
    CallOutsideCapabilities,
    CapabilitySet,
    ConversationSettings,
    SecurityEvent,
    SecurityViolation,
    ToolSpec,
    authorize,
    capability_set,
    server_tool,
)
from domain.errors import InvalidArgument
from domain.retrieval import Retrieval
from domain.trifecta import ContextPart, check
from domain.types import Finish, Role, User
from gateway.completions import CallerTurn, CompleteRequest, closing_events
from gateway.metrics import GatewayMetrics
from gateway.runs import (
    ApprovalRequested,
    Delta,
    Done,
    Event,
    Failed,
    MessageRun,
    Meta,
    Retract,
    ToolEnded,
    ToolsListed,
    ToolStarted,
)
from gateway.tool_calls import CallRunner, TextCheck
from gateway.tool_ports import RemoteServers, ToolServer, ToolUnavailable
from gateway.tool_requests import (
    DECLINED,
    NO_APPROVALS,
    PlatformTool,
    ToolPolicy,
    capability_requests,
    pending_calls,
)
from gateway.tool_turn import (
    Offered,
    Step,
    TurnState,
    origin,
    result_origins,
    result_text,
)
from gateway.turn_citations import RESPONSES, CitationTally, NoTally, TurnCitations


class CompletionRunner(Protocol):
    async def complete(self, user: User, request: CompleteRequest) -> MessageRun: ...


class PlatformTools(Protocol):
    def run(
        self,
        user: User,
        request: CompleteRequest,
        tools: Sequence[PlatformTool],
        approvals: Mapping[str, bool],
    ) -> AsyncGenerator[list[tuple[int, Event]]]: ...


class NoTools:
    """A gateway that runs no tools (its composition gave it none)."""

    async def run(
        self,
        user: User,
        request: CompleteRequest,
        tools: Sequence[PlatformTool],
        approvals: Mapping[str, bool],
    ) -> AsyncGenerator[list[tuple[int, Event]]]:
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
        tally: CitationTally | None = None,
    ) -> None:
        self._completions = completions
        self._policy = policy
        self._remote = remote
        self._calls = CallRunner(policy.lasting, output_check, metrics)
        self._metrics = metrics
        self._tally = tally or NoTally()
        self._log = structlog.get_logger(component="tool_loop")

    def capabilities(self, user: User, tools: Sequence[PlatformTool]) -> CapabilitySet:
        """The turn's set, from the request and the operator's state alone; raises (a 4xx)
        for a tool that may not run, before anything starts."""
        policy = self._policy
        requests = capability_requests(tools, policy)
        return capability_set(user.tier, policy.grants, policy.registry(), requests,
                              ConversationSettings())  # fmt: skip

    async def run(
        self,
        user: User,
        request: CompleteRequest,
        tools: Sequence[PlatformTool],
        approvals: Mapping[str, bool] = NO_APPROVALS,
        surface: str = RESPONSES,
    ) -> AsyncGenerator[list[tuple[int, Event]]]:
        if request.resumable:
            raise InvalidArgument("a completion with platform tools cannot be resumable")
        if request.options.tools:
            raise InvalidArgument("a completion runs either the caller's function tools or "
                                  "platform tools, not both")  # fmt: skip
        capabilities = self.capabilities(user, tools)
        pending = pending_calls(request.turns, approvals)
        confirmed = frozenset(name for tool in tools for name in tool.confirmed())
        parts = [ContextPart(t.counted_text(), origin(t, leading=index == 0))
                 for index, t in enumerate(request.turns)]  # fmt: skip
        citations = TurnCitations(self._policy.citation_forms.get(surface, frozenset()),
                                  self._policy.citation_grammar)  # fmt: skip
        turn = TurnState(capabilities, confirmed, list(request.turns), parts, citations)
        try:
            # The listings go right after the first step's meta: a stream opens with its meta.
            turn.listings = await self._list(user, turn, self._retrieving(request, tools, pending))
            try:
                decided = [event async for event in self._decided(user, turn, pending, approvals)]
            except CallOutsideCapabilities as refused:
                # A call carried back that this request's own set does not hold: nothing has
                # started, so the request is refused (403) rather than answered.
                self._count(user, refused.event)
                raise
            turn.listings.extend(decided)
            async for batch in self._steps(user, request, turn):
                yield batch
        finally:
            for server in turn.servers:
                with contextlib.suppress(Exception):
                    await server.aclose()

    # --- listing ---

    def _retrieving(
        self, request: CompleteRequest, tools: Sequence[PlatformTool], pending: list[ToolCall]
    ) -> list[PlatformTool]:
        """The tools this turn lists and offers: all of them, or, when the newest message
        needs no outside content (decided before anything is fetched), those that bring none
        in. A turn carrying decided calls keeps its tools: the calls name them."""
        policy = self._policy
        retrieving = [tool for tool in tools if policy.retrieves(tool)]
        if not retrieving or pending:
            return list(tools)
        newest = next((t.text for t in reversed(request.turns) if t.role is Role.USER), "")
        decision = policy.retrieval.decide(newest)
        self._metrics.retrieval_decisions.labels(decision.value).inc()
        if decision is Retrieval.NEEDED:
            return list(tools)
        return [tool for tool in tools if tool not in retrieving]

    async def _list(
        self, user: User, turn: TurnState, tools: Sequence[PlatformTool]
    ) -> list[Event]:
        events: list[Event] = []
        for tool in tools:
            server = self._open(user, tool)
            turn.servers.append(server)
            turn.citations.listed(server)
            try:
                listed = await server.list_tools()
            except ToolUnavailable as error:
                events.append(ToolsListed(tool.server_label, (), str(error)))
                continue
            offered = self._offer(turn, tool, server, listed)
            events.append(ToolsListed(tool.server_label, tuple(offered)))
        return events

    def _open(self, user: User, tool: PlatformTool) -> ToolServer:
        if tool.name:
            return self._policy.own_tools[tool.name][1](user)
        known = self._policy.servers.get(tool.server_label)
        if known is not None:
            return self._remote.open(known.label, known.url, {})
        return self._remote.open(tool.server_label, tool.server_url, dict(tool.headers))

    def _offer(
        self, turn: TurnState, tool: PlatformTool, server: ToolServer, listed: list[ToolDefinition]
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
            asks = tool.needs_approval(definition.name)
            turn.offered[definition.name] = Offered(server, tool.server_label, definition,
                                                     qualified, asks)  # fmt: skip
            offered.append(definition)
        return offered

    # --- the steps ---

    async def _steps(
        self, user: User, request: CompleteRequest, turn: TurnState
    ) -> AsyncIterator[list[tuple[int, Event]]]:
        max_steps = self._policy.max_steps.get(user.tier, 0)
        tools = tuple(offered.definition for offered in turn.offered.values())
        options = replace(request.options, tools=tools, tool_choice=ToolChoice.AUTO)
        for number in range(max_steps + 1):
            try:
                check(turn.parts, turn.capabilities, turn.confirmed)
            except SecurityViolation as refused:
                yield turn.numbered(self._refused(user, turn, refused.event))
                return
            step = Step()
            asked = replace(request, turns=tuple(turn.turns),
                            options=turn.citations.step_options(options))  # fmt: skip
            async for events in self._model_step(user, asked, turn, step):
                yield turn.numbered(events)
            if step.failed or step.done is None:
                return
            if not step.calls:
                await turn.citations.ended(user, turn.version, self._metrics, self._tally)
                yield turn.numbered([Done(step.done.finish, turn.usage)])
                return
            if number == max_steps:
                self._metrics.tool_steps_exhausted.labels(user.tier.value).inc()
                notice = (f"This answer stopped after {max_steps} tool steps, the most this "
                          "plan allows in one turn.")  # fmt: skip
                await turn.citations.ended(user, turn.version, self._metrics, self._tally)
                yield turn.numbered([Delta(notice), Done(Finish.LENGTH, turn.usage)])
                return
            try:
                offered = [self._authorized(turn, call) for call in step.calls]
            except CallOutsideCapabilities as refused:
                yield turn.numbered(self._refused(user, turn, refused.event))
                return
            turn.add(CallerTurn(Role.ASSISTANT, step.text, tuple(step.calls)))
            waiting: list[Event] = []
            for call, (tool, spec) in zip(step.calls, offered, strict=True):
                if tool.needs_approval:
                    waiting.append(ApprovalRequested(call.call_id, tool.server_label,
                                                     call.name, call.arguments))  # fmt: skip
                    continue
                async for events in self._run_call(turn, call, tool, spec):
                    yield turn.numbered(events)
            if waiting:
                # The turn ends here; a later request brings each decision (and the calls).
                yield turn.numbered([*waiting, Done(Finish.STOP, turn.usage)])
                return

    async def _run_call(
        self, turn: TurnState, call: ToolCall, tool: Offered, spec: ToolSpec
    ) -> AsyncIterator[list[Event]]:
        yield [ToolStarted(call.call_id, tool.server_label, call.name, call.arguments)]
        outcome = await self._calls.run(turn, tool, call)
        yield [ToolEnded(call.call_id, outcome.output, outcome.error)]
        turn.citations.read(outcome.passage_ids)
        result = CallerTurn(Role.TOOL, result_text(outcome), tool_call_id=call.call_id)
        turn.add(result, result_origins(spec))

    async def _decided(
        self,
        user: User,
        turn: TurnState,
        pending: list[ToolCall],
        approvals: Mapping[str, bool],
    ) -> AsyncIterator[Event]:
        """The calls a person was asked about, as they decided: an approved call runs (still
        only inside this request's set), a declined one is answered as declined."""
        for call in pending:
            tool, spec = self._authorized(turn, call)
            if approvals[call.call_id]:
                async for events in self._run_call(turn, call, tool, spec):
                    for event in events:
                        yield event
                continue
            # Shown as the call it was, ended unrun, so the caller's record has both.
            yield ToolStarted(call.call_id, tool.server_label, call.name, call.arguments)
            yield ToolEnded(call.call_id, "", DECLINED)
            turn.add(CallerTurn(Role.TOOL, f"The tool was not run: {DECLINED}.",
                                tool_call_id=call.call_id))  # fmt: skip

    async def _model_step(
        self, user: User, request: CompleteRequest, turn: TurnState, step: Step
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
                                turn.version = event.version
                                events.extend([replace(event, tools=True), *turn.listings])
                        case Delta() if event.tool_calls:
                            step.calls.extend(event.tool_calls)
                            step.text += event.text
                        case Delta() if not event.refusal:
                            step.text += event.text
                            shown = turn.citations.shown(event.text)
                            if shown:
                                events.append(replace(event, text=shown))
                        case Retract():
                            turn.citations.withdrawn()
                            events.append(event)
                        case Done():
                            held = turn.citations.step_ended()
                            if held:
                                events.append(Delta(held))
                            turn.add_usage(event.usage)
                            step.done = event
                        case Failed():
                            step.failed = True
                            events.append(event)
                        case _:
                            events.append(event)
                if events:
                    yield events

    def _authorized(self, turn: TurnState, call: ToolCall) -> tuple[Offered, ToolSpec]:
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

    def _refused(self, user: User, turn: TurnState, event: SecurityEvent) -> list[Event]:
        """The turn ends here, nothing more run: logged and counted as a security event, and
        the reason said to the caller as the platform's refusal."""
        self._count(user, event)
        return [Delta(f"The platform stopped this turn: {event.detail}.", refusal=True),
                Done(Finish.REFUSED, turn.usage)]  # fmt: skip

    def _count(self, user: User, event: SecurityEvent) -> None:
        self._metrics.security_events.labels(event.kind).inc()
        self._log.warning("security_event", kind=event.kind, tools=list(event.tools),
                          user_id=user.user_id, detail=event.detail)  # fmt: skip
