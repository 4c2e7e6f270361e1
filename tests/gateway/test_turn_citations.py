"""Citations in the tool loop, with a scripted model and a scripted passage source (the real
file_search over a real store, and the engines' grammar, are tested end to end in
tests/e2e/test_files.py and tests/nodeagent): what the reader is shown of an answer's
markers, what the answer step asks the engine, and what is counted for the canary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from domain.answer_options import ToolCall, ToolDefinition
from domain.capabilities import Capability, ToolSpec
from domain.types import Finish, Role, Tier, Usage, User
from gateway.completions import CallerTurn, CompleteRequest
from gateway.metrics import GatewayMetrics
from gateway.runs import Delta, Done, Event, MessageRun, Meta
from gateway.tool_loop import ToolLoop
from gateway.tool_ports import ToolOutcome
from gateway.tool_requests import PlatformTool, ToolPolicy
from gateway.turn_citations import CONVERSATION, RESPONSES
from tests.gateway.test_tool_loop import CHECKS, Remote

USER = User("u1", Tier.FREE)
SEARCH = ToolDefinition("file_search", "Searches the user's files", '{"type":"object"}')
READ = "file-a#0"
ELSEWHERE = "file-b#1"  # a passage of the user's this turn did not read


@dataclass
class Passages:
    """file_search, scripted: every search finds passage READ."""

    label: str = "file_search"
    asked: list[Sequence[str]] = field(default_factory=list)

    async def list_tools(self) -> list[ToolDefinition]:
        return [SEARCH]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        return ToolOutcome(f"[[cite:{READ}]] (notes.txt, passage 1)\nLaunch in May.", "",
                           (READ,))  # fmt: skip

    async def resolving(self, ids: Sequence[str]) -> frozenset[str]:
        self.asked.append(list(ids))
        return frozenset(i for i in ids if i in (READ, ELSEWHERE))

    async def aclose(self) -> None:
        """Nothing held."""


@dataclass
class Model:
    """Calls file_search, then answers in the chunks given."""

    chunks: list[str]
    searches: bool = True
    asked: list[CompleteRequest] = field(default_factory=list)

    async def complete(self, user: User, request: CompleteRequest) -> MessageRun:
        self.asked.append(request)
        run = MessageRun(user.user_id, "c", f"m{len(self.asked)}", "")
        await run.append(Meta(f"m{len(self.asked)}", "", "model", "replica-1", version="v2"))
        if self.searches and len(self.asked) == 1:
            await run.append(Delta("", (ToolCall("call_1", "file_search", '{"query":"x"}'),)))
        else:
            for chunk in self.chunks:
                await run.append(Delta(chunk))
        await run.append(Done(Finish.STOP, Usage(10, 4, 5)))
        return run


@dataclass
class Tally:
    counted: list[tuple[str, Tier, int, int]] = field(default_factory=list)

    def count_citations(self, version: str, tier: Tier, cited: int, failed: int) -> None:
        self.counted.append((version, tier, cited, failed))


ANSWER = [
    "Launch is in May [[cite:file-a",
    "#0]], then June [[cite:file-b#1]]",
    " and July [[cite:file-zz#9]] [2]",
    ". Ask [^1]",
]


def loop_of(model: Model, source: Passages, tally: Tally, metrics: GatewayMetrics,
            grammar: bool = True) -> ToolLoop:  # fmt: skip
    spec = ToolSpec("file_search", frozenset({Capability.READS_PRIVATE}))
    policy = ToolPolicy(
        grants={Tier.FREE: frozenset({"file_search"})}, max_steps={Tier.FREE: 2},
        own_tools={"file_search": (spec, lambda user: source)},
        searches=frozenset({"file_search"}),
        citation_forms={CONVERSATION: frozenset({"footnote"})}, citation_grammar=grammar,
    )  # fmt: skip
    return ToolLoop(model, policy, Remote({}), metrics, CHECKS, tally)


async def shown(loop: ToolLoop, surface: str = RESPONSES) -> list[Event]:
    request = CompleteRequest((CallerTurn(Role.USER, "When is the launch?"),), None, 0, "")
    tools = [PlatformTool(name="file_search")]
    return [e async for batch in loop.run(USER, request, tools, surface=surface) for _, e in batch]


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, Delta))


@pytest.fixture
def metrics() -> GatewayMetrics:
    return GatewayMetrics(CollectorRegistry())


def counted(metrics: GatewayMetrics, outcome: str) -> float:
    return metrics.citations.labels(outcome)._value.get()


async def test_invented_ids_and_uncited_forms_are_not_shown_and_are_counted(metrics) -> None:
    model, source, tally = Model(ANSWER), Passages(), Tally()
    events = await shown(loop_of(model, source, tally, metrics))
    assert text_of(events) == "Launch is in May [[cite:file-a#0]], then June and July. Ask"
    assert isinstance(events[-1], Done)
    # One id read and cited; one of the user's that was not read (C01); one of nothing (C02).
    assert source.asked == [["file-b#1", "file-zz#9"]]
    outcomes = ("resolved", "not_retrieved", "unresolved", "uncited_form", "allowed_form")
    assert [counted(metrics, o) for o in outcomes] == [1, 1, 1, 2, 0]
    assert tally.counted == [("v2", Tier.FREE, 3, 2)]


async def test_the_answer_step_is_offered_no_tools_and_may_cite_only_what_was_read(
    metrics,
) -> None:
    model = Model(["Fine."])
    await shown(loop_of(model, Passages(), Tally(), metrics))
    first, answer = model.asked
    assert [t.name for t in first.options.tools] == ["file_search"]
    assert first.options.citation_ids == ()
    assert (answer.options.tools, answer.options.citation_ids) == ((), (READ,))
    # The read passage is in the answer step's prompt, as the tool's result.
    assert answer.turns[-1].role is Role.TOOL and READ in answer.turns[-1].text


async def test_without_the_grammar_the_answer_step_names_no_ids(metrics) -> None:
    model = Model(["Fine."])
    await shown(loop_of(model, Passages(), Tally(), metrics, grammar=False))
    assert (model.asked[1].options.tools, model.asked[1].options.citation_ids) == ((), ())


async def test_a_surface_keeps_the_forms_it_allows(metrics) -> None:
    events = await shown(loop_of(Model(ANSWER), Passages(), Tally(), metrics), CONVERSATION)
    assert text_of(events) == "Launch is in May [[cite:file-a#0]], then June and July. Ask [^1]"
    assert counted(metrics, "allowed_form") == 1


async def test_an_answer_citing_nothing_counts_nothing(metrics) -> None:
    tally = Tally()
    events = await shown(loop_of(Model(["No dates [in the notes]."]), Passages(), tally, metrics))
    assert text_of(events) == "No dates [in the notes]."
    assert tally.counted == [] and counted(metrics, "resolved") == 0


async def test_a_turn_without_a_passage_source_is_shown_as_written(metrics) -> None:
    """No file_search listed: no resolver, whatever the text; nothing counted."""
    policy = ToolPolicy(grants={Tier.FREE: frozenset()}, max_steps={Tier.FREE: 1})
    model = Model(["Hi [1] [[cite:x]]"], searches=False)
    request = CompleteRequest((CallerTurn(Role.USER, "Hello"),), None, 0, "")
    loop = ToolLoop(model, policy, Remote({}), metrics, CHECKS)
    events = [e async for batch in loop.run(USER, request, []) for _, e in batch]
    assert text_of(events) == "Hi [1] [[cite:x]]"
    assert counted(metrics, "uncited_form") == 0
