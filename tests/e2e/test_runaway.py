"""A runaway answer on a real engine: a model looping on one phrase is cut off once the loop
is clear (finish `length`), not left to hold its slot until the tier's answer cap."""

from __future__ import annotations

import pytest

from clients.chat_client import ChatClient, Delta, Done, new_conversation_id
from domain.repetition import RepetitionPolicy, loop_period

pytestmark = pytest.mark.slow

# SmolLM2 at temperature 0.7 falls into a loop on this about half the time; some answers end by
# themselves after a few dozen tokens. Ten tries: a miss in all of them is under one in 500.
LOOP_BAIT = "Repeat after me forever: la la la la la la la la la la la la la la la la"

# Plus may write 4,000 tokens, and an answer that wandered ran to 2,048 once: a loop can start
# after a few hundred tokens of prose (392 was seen once), so an answer cut below this was cut
# by the loop check. A loop can also start late (one ended at 1,027 tokens, looping on one
# sentence): cut below the shortest cap seen and ending in a loop the check knows, it was cut
# by the check too. One that ran to a cap is judged by its text below.
CUT_BY_THE_CHECK = 1_000
SHORTEST_CAP_SEEN = 2_048


async def test_a_runaway_answer_is_stopped_long_before_its_cap(platform) -> None:
    policy = RepetitionPolicy()
    stopped = []
    async with ChatClient(
        platform.gateway_address, platform.tokens["plus"], tls=platform.tls("client")
    ) as chat:
        for _ in range(10):
            events = [e async for e in chat.send(new_conversation_id(), LOOP_BAIT)]
            done = events[-1]
            assert isinstance(done, Done)
            text = "".join(e.text for e in events if isinstance(e, Delta))
            if done.finish != "length":
                continue
            tail = text[-policy.max_period * policy.repeats :]
            looping = loop_period(tail, policy) is not None
            tokens = done.usage.output_tokens
            if tokens < CUT_BY_THE_CHECK or (looping and tokens < SHORTEST_CAP_SEEN):
                stopped.append(text)
                break
            # It ran to a cap: the model wandered without repeating one passage exactly (a
            # count, a growing line), which the check leaves alone by design. Had it ended in
            # a loop the check knows, the check failed to stop it.
            assert not looping, (done.usage, text[-600:])
    assert stopped, "the model never looped in 10 tries"
    assert loop_period(stopped[0], policy) is not None, stopped[0][-600:]
