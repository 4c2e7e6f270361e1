"""The gateway's memory desk on a real SQLite store, with a clock the test moves: which entries
a turn reads (the tier's k most relevant, none aged unless pinned, in the order written),
what may be written (the input check on the user's text, the size and count caps), and the
`remember` tool's calls."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

import domain
from domain.errors import FailedPrecondition, InvalidArgument
from domain.memory import MEMORY_HEADER
from domain.safety import BlocklistClassifier, InputGuard
from domain.types import Role, Tier, Turn, User
from gateway.memories import MemoryConfig, MemoryDesk
from gateway.metrics import GatewayMetrics
from gateway.policies import MessagePolicies
from store.sqlite import SqliteStore

BLOCKLIST = Path(domain.__file__).parent / "safety" / "blocklist.json"
CHECKS = MessagePolicies(
    input_guard=InputGuard(BlocklistClassifier.from_data(json.loads(BLOCKLIST.read_text())))
)
CANARY = "forbidden canary phrase"
DAY = 86_400.0
PLUS, FREE = User("ann", Tier.PLUS), User("fred", Tier.FREE)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(str(tmp_path / "chat.db"))
    await opened.open()
    yield opened
    await opened.close()


def desk_of(store: SqliteStore, clock: Clock, **settings: float) -> MemoryDesk:
    config = MemoryConfig(**settings)  # type: ignore[arg-type]
    return MemoryDesk(store, config.policy(), clock, CHECKS, GatewayMetrics(CollectorRegistry()))


def lines(turn: Turn | None) -> list[str]:
    assert turn is not None and turn.role is Role.SYSTEM
    header, *entries = turn.text.split("\n")
    assert header == MEMORY_HEADER
    return entries


async def test_a_turn_reads_the_tiers_k_most_relevant_in_the_order_written(store) -> None:
    clock = Clock()
    desk = desk_of(store, clock, free_top_k=1, plus_top_k=2)
    for text in ("My garden has tomatoes", "I grow tomatoes and basil in the garden",
                 "Basil pesto is my favourite", "I commute by train"):  # fmt: skip
        await desk.create(PLUS, text)
        await desk.create(FREE, text)
        clock.now += 1
    asked = "How do I water garden tomatoes?"
    assert lines(await desk.block(PLUS, asked)) == [
        "- My garden has tomatoes", "- I grow tomatoes and basil in the garden"]  # fmt: skip
    assert len(lines(await desk.block(FREE, asked))) == 1
    assert await desk.block(PLUS, "What time is it?") is None
    assert await desk.block(PLUS, "") is None
    # The block's count is an upper bound of any tokenizer's: a byte a token.
    block = await desk.block(PLUS, asked)
    assert block is not None and block.tokens >= len(block.text.encode())
    assert await desk_of(store, clock, plus_top_k=0).block(PLUS, asked) is None


async def test_an_aged_entry_is_listed_as_aged_and_read_only_when_pinned(store) -> None:
    clock = Clock()
    desk = desk_of(store, clock, max_age_days=30)
    old = await desk.create(PLUS, "My bike is red")
    clock.now += 1
    kept = await desk.create(PLUS, "My bike is a tandem", pinned=True)
    clock.now += 31 * DAY
    assert {m.record.memory_id: m.aged for m in await desk.list(PLUS)} == {
        old.memory_id: True, kept.memory_id: False}  # fmt: skip
    assert lines(await desk.block(PLUS, "fix my bike")) == ["- My bike is a tandem"]
    # Written again, it is fresh again.
    await desk.update(PLUS, old.memory_id, None, None)
    assert not (await desk.get(PLUS, old.memory_id)).aged
    assert lines(await desk.block(PLUS, "fix my bike")) == ["- My bike is red",
                                                           "- My bike is a tandem"]  # fmt: skip
    never = desk_of(store, clock, max_age_days=0)
    clock.now += 10_000 * DAY
    assert len(lines(await never.block(PLUS, "bike"))) == 2


async def test_what_cannot_be_kept_is_refused_and_nothing_is_written(store) -> None:
    clock = Clock()
    desk = desk_of(store, clock, max_chars=30, max_entries=2)
    for text, reason in (("   ", "needs some text"), ("x" * 31, "at most 30 characters"),
                         (f"a {CANARY}", "input check")):  # fmt: skip
        with pytest.raises(InvalidArgument, match=reason):
            await desk.create(PLUS, text)
    assert await desk.list(PLUS) == []
    first = await desk.create(PLUS, "one")
    await desk.create(PLUS, "two")
    with pytest.raises(FailedPrecondition, match="at most 2 entries"):
        await desk.create(PLUS, "three")
    with pytest.raises(InvalidArgument, match="input check"):
        await desk.update(PLUS, first.memory_id, CANARY, None)
    assert sorted(m.record.text for m in await desk.list(PLUS)) == ["one", "two"]


async def test_the_remember_tool_writes_the_models_fact_and_refuses_bad_calls(store) -> None:
    clock = Clock()
    desk = desk_of(store, clock, max_chars=40)
    tool = desk.remember_tool(PLUS)
    (definition,) = await tool.list_tools()
    assert definition.name == "remember"
    assert json.loads(definition.parameters)["properties"]["text"]["maxLength"] == 40
    outcome = await tool.call("remember", {"text": "Ann is allergic to nuts"})
    (entry,) = await desk.list(PLUS)
    assert outcome.output == f"remembered ({entry.record.memory_id}): Ann is allergic to nuts"
    assert (entry.record.source, entry.record.created_at) == ("model", clock.now)
    for arguments, error in (({}, "must be"), ({"text": 3}, "must be"),
                             ({"text": "a", "tag": "b"}, "must be"),
                             ({"text": "y" * 41}, "at most 40")):  # fmt: skip
        refused = await tool.call("remember", arguments)
        assert refused.output == "" and error in refused.error
    assert (await tool.call("forget", {"text": "a"})).error.startswith("no tool named")
    assert len(await desk.list(PLUS)) == 1
    assert await desk.list(FREE) == []  # written for the turn's own user only
