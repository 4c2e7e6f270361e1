"""Model versions behind the real local platform (scheduler, llama.cpp SmolLM2 node, gateway,
edge): two versions that differ only in the system prompt share the node; a split by user
puts the same users on the candidate every time; a conversation keeps its version when the
split changes."""

from __future__ import annotations

import uuid

import pytest

from clients.chatctl.platform import LocalPlatform
from domain.rollout import Slice, Version
from domain.types import Tier
from tests.e2e.rollout_support import (
    gateway_caught_up,
    new_id,
    rollout_admin,
    send,
    users_in_slices,
)

pytestmark = pytest.mark.slow

# Long enough that its token count tells it apart from the configured prompt in `usage`.
CANDIDATE_PROMPT = (
    "You are a careful assistant for a travel company. Answer in one short sentence, "
    "politely, and never use lists, headings or emoji in any answer you give."
)


async def test_a_split_keeps_users_on_their_slice_and_conversations_on_their_version(
    platform: LocalPlatform,
) -> None:
    name = f"terse-{uuid.uuid4().hex[:6]}"
    async with rollout_admin(platform) as admin:
        await admin.create(Version(name, system_prompt=CANDIDATE_PROMPT, temperature=0.7))
        state = await admin.split(name, "free", 10.0)
        current = state.current
        # The change reaches the gateway (through the scheduler) within a second.
        assert await gateway_caught_up(platform, admin) < 1.0
        try:
            users = await users_in_slices(platform, state, Tier.FREE,
                                          {Slice.CANDIDATE: 2, Slice.CURRENT: 1})  # fmt: skip
            on_candidate = [token for _, token in users[Slice.CANDIDATE]]
            on_current = [token for _, token in users[Slice.CURRENT]]
            firsts = {}
            for token in on_candidate + on_current:
                conversation = new_id("c")
                first = await send(platform, token, conversation, "Say hi.")
                again = await send(platform, token, new_id("c"), "Say hi.")
                firsts[token] = (conversation, first)
                expected = name if token in on_candidate else current
                # The same users on the candidate every time, in every new conversation.
                assert (first.status, first.version, again.version) == (200, expected, expected)
            # The candidate's own system prompt reached the model: the same message costs
            # more prompt tokens on it.
            base_input = firsts[on_current[0]][1].input_tokens
            assert firsts[on_candidate[0]][1].input_tokens > base_input + 20

            await admin.rollback("the test moves the split")
            await gateway_caught_up(platform, admin)
            conversation, _ = firsts[on_candidate[0]]
            kept = await send(platform, on_candidate[0], conversation, "Thanks. Say bye.")
            fresh = await send(platform, on_candidate[0], new_id("c"), "Say hi.")
            assert (kept.version, fresh.version) == (name, current)
        finally:
            latest = await admin.rollout()
            if latest.candidate == name and any(p for _, p in latest.percent):
                await admin.rollback("test cleanup")
