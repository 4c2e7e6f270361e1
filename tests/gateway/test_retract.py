"""The answer writer with the output check in each mode, against a scripted engine: what the
run's events are and what would be stored when the check flags an answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from domain.breaker import BreakerPolicy, Breakers
from domain.context import Prompt
from domain.safety import ALLOWED, OutputGuard, OutputMode, Refusals, StreamCheckConfig, Verdict
from domain.types import Finish, Role, Tier, Turn, Usage
from gateway.answers import Answer, AnswerPlan, AnswerWriter, StreamTimeouts
from gateway.main import GatewayConfig, build_policies
from gateway.metrics import GatewayMetrics
from gateway.node_client import Chunk, Finished
from gateway.runs import Delta, Event, MessageRun, Retract, shown_pieces
from gateway.scheduler_client import ReplicaPick
from infra.config import ConfigError

REFUSAL = Refusals().output
PICK = ReplicaPick(node_id="node-a", address="127.0.0.1:1", model="m")
# Small windows, so a short scripted answer goes through several checks.
CHECKS = StreamCheckConfig(
    window_tokens=20, lookback_tokens=5, holdback_tokens=10, check_every_tokens=4
)
CLEAN_WORDS = [f" w{i}" for i in range(30)]


class FlagsBad:
    def classify(self, text: str) -> Verdict:
        return Verdict(False, "test", "bad word") if "BAD" in text else ALLOWED


class ScriptedGeneration:
    def __init__(self, texts: list[str]) -> None:
        self._items: list[Chunk | Finished] = [
            Chunk(index, text) for index, text in enumerate(texts, start=1)
        ]
        self._items.append(Finished(Finish.STOP, Usage(3, 0, len(texts))))
        self.cancelled = False

    async def read(self) -> Chunk | Finished:
        return self._items.pop(0)

    async def cancel(self) -> None:
        self.cancelled = True

    def close(self) -> None:
        pass


class ScriptedNodes:
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    async def generate(self, address: str, spec: object) -> ScriptedGeneration:
        return ScriptedGeneration(self.texts)

    async def tokenize(self, address: str, texts: list[str], model: str = "") -> list[int]:
        # A takeover has the text so far counted; one token a word here.
        return [len(text.split()) for text in texts]


def writer(texts: list[str]) -> AnswerWriter:
    guard: Callable[[OutputMode], OutputGuard] = lambda mode: OutputGuard(  # noqa: E731
        FlagsBad(), CHECKS, mode=mode
    )
    return AnswerWriter(None, ScriptedNodes(texts), StreamTimeouts(),  # type: ignore[arg-type]
                        GatewayMetrics(CollectorRegistry()),
                        Breakers(BreakerPolicy(), lambda: 0.0), guard)  # fmt: skip


def plan(mode: OutputMode) -> AnswerPlan:
    prompt = Prompt((Turn(Role.USER, "Hi", 1),), 0)
    return AnswerPlan(prompt, PICK, 100, 0.0, "small", Tier.PLUS, output_mode=mode)


async def write(texts: list[str], mode: OutputMode) -> tuple[list[Event], Answer]:
    run = MessageRun("u1", "c1", "m1", "")
    answer = Answer(served_by=PICK)
    await writer(texts).write(run, plan(mode), answer)
    return run.events, answer


def deltas(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, Delta))


async def test_retract_shows_each_chunk_then_withdraws_them_for_the_refusal() -> None:
    texts = [*CLEAN_WORDS[:12], " BAD", *CLEAN_WORDS[12:]]
    events, answer = await write(texts, OutputMode.RETRACT)
    retract = next(e for e in events if isinstance(e, Retract))
    before = events[: events.index(retract)]
    assert [e.text for e in before if isinstance(e, Delta)] == texts[: len(before)]
    assert "".join(texts[:13]) in deltas(before)  # the flagged word itself was shown
    assert retract.chars == len(deltas(before))
    assert events[events.index(retract) + 1 :] == [Delta(REFUSAL)]
    assert answer.finish is Finish.REFUSED and answer.withdrawn
    assert "".join(answer.shown) == REFUSAL  # what is stored
    assert shown_pieces(events) == ([REFUSAL], True)


async def test_holdback_never_shows_the_flagged_word_and_keeps_what_it_released() -> None:
    texts = [*CLEAN_WORDS[:20], " BAD", *CLEAN_WORDS[20:]]
    events, answer = await write(texts, OutputMode.HOLDBACK)
    assert not any(isinstance(e, Retract) for e in events)
    shown = deltas(events)
    # Released up to where the 11th word starts, so with the space before it.
    assert shown == "".join(CLEAN_WORDS[:10]) + "\n\n" + REFUSAL
    assert "".join(answer.shown) == shown and answer.finish is Finish.REFUSED


async def test_a_clean_answer_is_the_same_in_both_modes() -> None:
    for mode in OutputMode:
        events, answer = await write(CLEAN_WORDS, mode)
        assert deltas(events) == "".join(CLEAN_WORDS) == "".join(answer.shown), mode
        assert answer.finish is Finish.STOP


async def test_a_takeover_after_a_withdrawal_ends_refused_with_the_refusal_once() -> None:
    """The dead gateway's log ended in a retract, with or without the refusal after it."""
    for logged in ([Retract(12)], [Retract(12), Delta(REFUSAL)]):
        run = MessageRun("u1", "c1", "m1", "", events=[Delta("w0 w1 w2 BAD"), *logged])
        pieces, withdrawn = shown_pieces(run.events)
        answer = Answer(served_by=PICK, pieces=pieces, shown=list(pieces), withdrawn=withdrawn)
        await writer(CLEAN_WORDS).write(run, plan(OutputMode.RETRACT), answer)
        assert run.events[1:] == [Retract(12), Delta(REFUSAL)]
        assert answer.finish is Finish.REFUSED and answer.shown == [REFUSAL]


def test_a_retract_drops_every_delta_before_it() -> None:
    events: list[Event] = [Delta("a"), Delta("b"), Retract(2), Delta("c")]
    assert shown_pieces(events) == (["c"], True)
    assert shown_pieces([Delta("a")]) == (["a"], False)


def test_plus_retracts_and_free_holds_back_as_shipped_and_each_can_be_set() -> None:
    shipped = build_policies(GatewayConfig(router=False))
    assert shipped.output_mode(Tier.PLUS) is OutputMode.RETRACT
    assert shipped.output_mode(Tier.FREE) is OutputMode.HOLDBACK
    assert shipped.new_output_guard is not None
    assert shipped.new_output_guard(OutputMode.RETRACT).mode is OutputMode.RETRACT
    held = build_policies(GatewayConfig(router=False, plus_output_mode="holdback"))
    assert [held.output_mode(tier) for tier in Tier] == [OutputMode.HOLDBACK] * 2
    with pytest.raises(ConfigError, match="holdback, retract"):
        build_policies(GatewayConfig(router=False, free_output_mode="later"))
