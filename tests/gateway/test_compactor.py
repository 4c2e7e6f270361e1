"""Compaction for real: a long conversation in the platform's own store, folded by the small
model (llama.cpp) reached through the platform's scheduler, with a pinned constraint kept."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import cast

import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.compaction import (
    FIRST_MESSAGE_HEADER,
    PINNED_HEADER,
    TASK_HEADER,
    CompactionPolicy,
    render_anchor,
)
from domain.context import ContextBuilder
from domain.errors import NoReplica
from domain.types import Finish, Role, Turn
from gateway.compactor import Compactor
from gateway.node_client import NodeClient
from gateway.scheduler_client import SchedulerClient
from gateway.stored_context import branch, context_parts
from store.base import Store
from store.factory import open_store
from store.records import ConversationRecord, NewMessage

USER = "alice"
WINDOW, RESERVE, SYSTEM_TOKENS = 1400, 300, 30
FIRST = "Help me plan a vegetable garden for my small backyard in Lyon, about 20 square metres."
CONSTRAINT = "Quick note: I am allergic to tomatoes, so never suggest them."
VEGETABLES = ["carrots", "leeks", "beans", "peas", "lettuce", "courgettes", "beetroot",
              "chard", "radishes", "spinach", "onions", "kale", "garlic"]  # fmt: skip


def script() -> list[tuple[Role, str, str]]:
    """(role, text, finish) of a 30-turn conversation plus one refused exchange."""
    turns = [
        (Role.USER, FIRST, ""),
        (Role.ASSISTANT, "Gladly. Start with a sunny bed of 4 by 5 metres and good compost.", ""),
        (Role.USER, f"{CONSTRAINT} Which vegetables should come first?", ""),
        (Role.ASSISTANT, "Noted. Start with carrots, leeks and beans, which are easy.", ""),
    ]
    for i, vegetable in enumerate(VEGETABLES):
        other = VEGETABLES[(i + 1) % len(VEGETABLES)]
        question = f"Can I grow {vegetable} next to {other}, and how often should I water them?"
        answer = (
            f"Yes, {vegetable} and {other} get on well. In July water them about {i + 2} "
            "litres per square metre twice a week, early in the morning, and mulch the soil "
            "so it keeps its moisture."
        )
        turns += [(Role.USER, question, ""), (Role.ASSISTANT, answer, "")]
        if i == 5:
            # Refused by the input check: no prompt, and no summary, may include it.
            turns.append((Role.USER, "REFUSED-SECRET blocked text", Finish.REFUSED.value))
            turns.append((Role.ASSISTANT, "I can't help with that.", Finish.REFUSED.value))
    return turns


@pytest.fixture(scope="module")
async def compact_platform(tmp_path_factory) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("compaction"),
            edge_listen="127.0.0.1:0",
            slot_context_tokens=2048,
            parallel=1,
        )
    )
    try:
        await local.start()
        yield local
    finally:
        await local.stop()


@pytest.fixture
async def store(compact_platform: LocalPlatform) -> AsyncIterator[Store]:
    opened = await open_store(f"sqlite:///{compact_platform.settings.state_dir / 'chat.db'}")
    yield opened
    await opened.close()


@pytest.fixture
async def scheduler(compact_platform: LocalPlatform) -> AsyncIterator[SchedulerClient]:
    opened = SchedulerClient(
        [compact_platform.scheduler_address], tls=compact_platform.tls("gateway")
    )
    yield opened
    await opened.close()


@pytest.fixture
async def nodes(compact_platform: LocalPlatform) -> AsyncIterator[NodeClient]:
    opened = NodeClient(tls=compact_platform.tls("gateway"))
    yield opened
    await opened.close()


async def write_conversation(
    store: Store, nodes: NodeClient, node_address: str, conversation_id: str
) -> None:
    """The script, each turn counted by the node's own tokenizer, as the gateway saves it."""
    turns = script()
    counted = await nodes.tokenize(node_address, [text for _, text, _ in turns])
    parent: int | None = None
    for i, ((role, text, finish), tokens) in enumerate(zip(turns, counted, strict=True)):
        saved = await store.add_message(
            USER,
            conversation_id,
            NewMessage(f"{conversation_id}-{i}", role, text, tokens, parent, finish=finish),
        )
        parent = saved.seq


async def kept_load(store: Store, conversation_id: str) -> int:
    """The next prompt's size without a new message, after compaction."""
    conversation = await store.get_conversation(USER, conversation_id)
    messages = await store.list_messages(USER, conversation_id)
    parts = context_parts(conversation, branch(messages, messages[-1]))
    return (
        SYSTEM_TOKENS
        + conversation.summary_tokens
        + conversation.pinned_tokens
        + sum(t.tokens for t in parts.history)
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_a_long_conversation_is_folded_and_its_constraint_pinned(
    compact_platform: LocalPlatform, store: Store, scheduler: SchedulerClient, nodes: NodeClient
) -> None:
    await write_conversation(store, nodes, compact_platform.node_addresses()[0], "long")
    messages = await store.list_messages(USER, "long")
    chain = branch(messages, messages[-1])
    assert len(chain) == 30
    assert SYSTEM_TOKENS + sum(m.tokens for m in chain) >= 0.7 * (WINDOW - RESERVE)
    # A short summary and a long timeout: two shared CPU cores decode a few tokens a second.
    policy = CompactionPolicy(summary_max_tokens=150)
    compactor = Compactor(
        store, scheduler, nodes, policy, summary_pool="small", generate_timeout_s=240
    )
    try:
        assert await compactor.consider(USER, "long", WINDOW, RESERVE, SYSTEM_TOKENS)
        # One at a time per conversation.
        assert not await compactor.consider(USER, "long", WINDOW, RESERVE, SYSTEM_TOKENS)
        await compactor.wait_idle()

        conversation = await store.get_conversation(USER, "long")
        assert conversation.summary.startswith(f"{FIRST_MESSAGE_HEADER}\n{FIRST}\n")
        body = conversation.summary.split(FIRST, 1)[1]
        assert len(body.strip().splitlines()) >= 2  # a header line and the model's summary
        assert "REFUSED-SECRET" not in conversation.summary + conversation.pinned
        assert conversation.summary_tokens > 0
        # Everything but the first message and the last 6 turns was folded.
        assert conversation.summary_upto_seq == chain[-7].seq
        # The task re-anchored at the end, then the constraint.
        assert conversation.pinned == render_anchor(FIRST, (CONSTRAINT,), policy.task_anchor_chars)
        assert conversation.pinned.endswith(f"{PINNED_HEADER}\n- {CONSTRAINT}")
        assert conversation.pinned_tokens > 0
        assert conversation.total_tokens == sum(m.tokens for m in messages)

        # The next prompt: the summary, the 6 kept turns, the constraint re-anchored at the end.
        parts = context_parts(conversation, branch(messages, messages[-1]))
        assert parts.history == [Turn(m.role, m.content, m.tokens) for m in chain[-6:]]
        builder = ContextBuilder(Turn(Role.SYSTEM, "Be brief.", SYSTEM_TOKENS), WINDOW, RESERVE)
        new = Turn(Role.USER, "What can I plant in September?", 10)
        prompt = builder.build(parts.summary, parts.history, new, parts.pinned)
        assert prompt.turns[-2].text.startswith(f"{TASK_HEADER}\n{FIRST}\n")
        assert prompt.turns[-2].text.endswith(CONSTRAINT)
        assert prompt.tokens <= WINDOW - RESERVE

        # At once again, with the kept load past 70 % of a window: the summary just changed,
        # so min_tokens_between holds it back (only 0 tokens were added since).
        load = await kept_load(store, "long")
        window = RESERVE + math.ceil(load / 0.8)
        assert not await compactor.consider(USER, "long", window, RESERVE, SYSTEM_TOKENS)
        assert await store.get_conversation(USER, "long") == conversation
    finally:
        await compactor.close()


@pytest.mark.slow
async def test_a_pool_with_no_replica_leaves_the_store_unchanged(
    compact_platform: LocalPlatform, store: Store, scheduler: SchedulerClient, nodes: NodeClient
) -> None:
    await write_conversation(store, nodes, compact_platform.node_addresses()[0], "nopool")
    before = await store.get_conversation(USER, "nopool")
    now = [1000.0]
    compactor = Compactor(store, scheduler, nodes, summary_pool="large", clock=lambda: now[0],
                          retry_after_s=30.0)  # fmt: skip
    try:
        assert await compactor.consider(USER, "nopool", WINDOW, RESERVE, SYSTEM_TOKENS)
        await compactor.wait_idle()
        assert await store.get_conversation(USER, "nopool") == before
        # The pool is left alone for a while, then a later message tries again.
        assert not await compactor.consider(USER, "nopool", WINDOW, RESERVE, SYSTEM_TOKENS)
        now[0] += 31.0
        assert await compactor.consider(USER, "nopool", WINDOW, RESERVE, SYSTEM_TOKENS)
        await compactor.wait_idle()
        assert await store.get_conversation(USER, "nopool") == before
    finally:
        await compactor.close()


class StuckPool:
    """A scheduler whose pick never answers until released: a compaction stays in flight."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.picks = 0

    async def pick(self, *request: object) -> object:
        self.picks += 1
        await self.release.wait()
        raise NoReplica("released")


class BrokenStore:
    async def get_conversation(self, user_id: str, conversation_id: str) -> ConversationRecord:
        raise RuntimeError("disk on fire")


async def test_workers_are_bounded_and_close_cancels_them(tmp_path) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'chat.db'}")
    pool = StuckPool()
    compactor = Compactor(store, cast(SchedulerClient, pool), NodeClient(), max_concurrent=1)
    try:
        for conversation_id in ("a", "b"):
            parent: int | None = None
            for i in range(10):
                role = Role.USER if i % 2 == 0 else Role.ASSISTANT
                message = NewMessage(f"{conversation_id}{i}", role, "words", 100, parent)
                parent = (await store.add_message(USER, conversation_id, message)).seq
        assert await compactor.consider(USER, "a", 1000, 100, 10)
        await asyncio.sleep(0)
        assert pool.picks == 1
        assert not await compactor.consider(USER, "b", 1000, 100, 10)  # the one worker is busy
        await compactor.close()
        assert not await compactor.consider(USER, "b", 1000, 100, 10)  # closed
        assert (await store.get_conversation(USER, "a")).summary == ""
    finally:
        await store.close()


async def test_consider_never_raises_into_the_pipeline() -> None:
    compactor = Compactor(
        cast(Store, BrokenStore()), cast(SchedulerClient, StuckPool()), NodeClient()
    )
    assert not await compactor.consider(USER, "a", 1000, 100, 10)
    await compactor.close()
