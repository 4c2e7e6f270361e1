"""The race's warm-up: before its timed turns in every round, each system serves a few untimed
conversations of its own, so the system that runs first in a round does not pay for cold
processes (connection pools, first requests through a router, an engine's idle slots) that
the systems after it find warm.

The warm-up's conversations are salted like the timed ones but with a salt of their own, so
they share no cached prefix with anything timed (the shared system prompt aside, which every
system sends alike), and their ids name them as warm-up, so a router's hash puts them wherever
it puts any new conversation.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable

from race_workloads import SYSTEM_PROMPT, salted

# Two turns a conversation: the second is a conversation's follow-up, the kind most timed
# turns are, so a router's path for a returning conversation is warm too.
TURNS_PER_CONVERSATION = 2
QUESTIONS = (
    "What is one thing to check before a short hike?",
    "And what should I bring if it rains?",
)

# (conversation id, turn, messages) -> the answer's text; the race's own turn runner.
Turn = Callable[[str, int, list[dict]], Awaitable[str]]


def conversation_count(turns: int) -> int:
    return -(-turns // TURNS_PER_CONVERSATION) if turns > 0 else 0


async def warm_up_system(
    system: str, workload: str, round_index: int, turns: int, run: Turn
) -> int:
    """Serves `turns` untimed turns through `run`, conversations side by side; returns how many
    turns were served (a failed one counts: warming is all it is for)."""
    salt = hashlib.sha256(f"warmup/{system}/{workload}/{round_index}".encode()).hexdigest()[:8]

    async def conversation(index: int, count: int) -> None:
        conversation_id = f"warmup-{workload}-r{round_index}-{system}-c{index}"
        messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        for turn in range(count):
            text = QUESTIONS[turn % len(QUESTIONS)]
            messages.append({"role": "user", "content": salted(text, salt) if turn == 0 else text})
            answer = await run(conversation_id, turn, messages)
            messages.append({"role": "assistant", "content": answer})

    conversations = conversation_count(turns)
    counts = [
        min(TURNS_PER_CONVERSATION, turns - i * TURNS_PER_CONVERSATION)
        for i in range(conversations)
    ]
    await asyncio.gather(*(conversation(i, n) for i, n in enumerate(counts)))
    return sum(counts)
