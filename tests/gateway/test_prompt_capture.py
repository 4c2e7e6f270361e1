"""Which answers' prompts are kept, and for how long, on a real SQLite store: a tier with
capture off keeps none, nor does an answer that failed, nor a retention of 0; a capture past
its retention is deleted by the sweep and a newer one stays."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from domain.context import Prompt
from domain.errors import NotFound
from domain.types import Finish, Role, Tier, Turn, User
from gateway.answers import Answer, AnswerPlan
from gateway.ports import ReplicaPick
from gateway.prompt_capture import CapturePolicy, ExpiredPrompts, StoredPrompts
from store.factory import open_store
from store.records import NewMessage
from store.sqlite import SqliteStore

PICK = ReplicaPick(node_id="node-a", address="127.0.0.1:1", model="m")
TURNS = (Turn(Role.SYSTEM, "Be brief.", 3), Turn(Role.USER, "hi", 1))
DAY_S = 86_400.0


@pytest.fixture
async def store(tmp_path) -> AsyncIterator[SqliteStore]:
    s = await open_store(f"sqlite:///{tmp_path / 'chat.db'}")
    assert isinstance(s, SqliteStore)
    yield s
    await s.close()


async def ask(store: SqliteStore, user: User, message_id: str) -> None:
    await store.add_message(user.user_id, "c1", NewMessage(message_id, Role.USER, "hi", 1, None))


def plan(tier: Tier) -> AnswerPlan:
    return AnswerPlan(Prompt(TURNS, 0), PICK, 64, 0.0, "small", tier, version="v1",
                      temperature=0.5)  # fmt: skip


def answered(finish: Finish = Finish.STOP) -> Answer:
    return Answer(served_by=PICK, finish=finish)


async def kept(store: SqliteStore, user: User, message_id: str) -> bool:
    try:
        await store.captured_prompt(user.user_id, message_id)
    except NotFound:
        return False
    return True


async def test_only_the_tiers_with_capture_on_keep_answered_prompts(store) -> None:
    capture = StoredPrompts(store, CapturePolicy(30 * DAY_S, frozenset({Tier.FREE})))
    free, plus = User("f", Tier.FREE), User("p", Tier.PLUS)
    for user, message_id, finish in ((free, "m1", Finish.STOP), (plus, "m2", Finish.STOP),
                                     (free, "m3", Finish.ERROR),
                                     (free, "m4", Finish.CANCELLED)):  # fmt: skip
        await ask(store, user, message_id)
        await capture.keep(user, "c1", message_id, plan(user.tier), answered(finish))
    asked = ((free, "m1"), (plus, "m2"), (free, "m3"), (free, "m4"))
    assert [await kept(store, u, m) for u, m in asked] == [True, False, False, True]
    prompt = await store.captured_prompt("f", "m1")
    assert (prompt.turns, prompt.version, prompt.node_id, prompt.temperature,
            prompt.max_tokens) == (TURNS, "v1", "node-a", 0.5, 64)  # fmt: skip


async def test_a_retention_of_zero_keeps_nothing_and_rejects_a_negative_one(store) -> None:
    capture = StoredPrompts(store, CapturePolicy(0.0, frozenset(Tier)))
    user = User("f", Tier.FREE)
    await ask(store, user, "m1")
    await capture.keep(user, "c1", "m1", plan(Tier.FREE), answered())
    assert not await kept(store, user, "m1")
    with pytest.raises(ValueError):
        CapturePolicy(-1.0, frozenset(Tier))


async def test_a_capture_of_a_deleted_conversation_is_dropped_quietly(store) -> None:
    capture = StoredPrompts(store, CapturePolicy(DAY_S, frozenset(Tier)))
    user = User("f", Tier.FREE)
    await ask(store, user, "m1")
    await store.delete_conversation("f", "c1")  # while the answer ran
    await capture.keep(user, "c1", "m1", plan(Tier.FREE), answered())
    assert not await kept(store, user, "m1")


async def test_the_sweep_deletes_captures_past_their_retention(store) -> None:
    user = User("f", Tier.FREE)
    writing = StoredPrompts(store, CapturePolicy(DAY_S, frozenset(Tier)))
    for message_id in ("old", "new"):
        await ask(store, user, message_id)
        await writing.keep(user, "c1", message_id, plan(Tier.FREE), answered())
    old = (await store.captured_prompt("f", "old")).created_at
    new = (await store.captured_prompt("f", "new")).created_at
    assert old < new
    # A day later, as seen by the sweep's clock, the old one is past its day; the new not yet.
    sweep = ExpiredPrompts(store, DAY_S, lambda: new + DAY_S)
    assert await sweep.forget_expired() == 1
    assert [await kept(store, user, m) for m in ("old", "new")] == [False, True]
