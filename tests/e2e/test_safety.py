"""The safety checks outside the model, on real processes and a real engine. The gateway here
loads a test blocklist that flags the word "the" (which any story holds) and the canary phrase,
so a real answer can be seen being stopped without anyone writing harmful text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clients.chat_client import ChatClient, Delta, Done, Meta, new_conversation_id
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.safety import Refusals
from gateway.pipeline import SAFETY_MODEL

pytestmark = pytest.mark.slow

BLOCKLIST = Path(__file__).parent / "data" / "blocks_the.json"
FLAGGED_WORD = re.compile(r"\bthe\b", re.IGNORECASE)


@pytest.fixture(scope="module")
async def guarded(tmp_path_factory):
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("safety"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            slot_context_tokens=2048,
            parallel=1,
            extra_env={
                "CHAT_GATEWAY_SAFETY_BLOCKLIST": str(BLOCKLIST),
                "CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": "200",
                "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "200",
            },
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


async def test_a_blocked_message_is_refused_recorded_and_never_reaches_a_model(guarded) -> None:
    conversation = new_conversation_id()
    async with ChatClient(
        guarded.gateway_address, guarded.tokens["plus"], tls=guarded.tls("client")
    ) as chat:
        before = (await chat.limits()).level
        events = [e async for e in chat.send(conversation, "Say FORBIDDEN-CANARY-PHRASE please")]
        assert isinstance(events[0], Meta) and events[0].model == SAFETY_MODEL
        assert [e.text for e in events if isinstance(e, Delta)] == [Refusals().input]
        assert isinstance(events[-1], Done) and events[-1].finish == "refused"
        stored = await chat.messages(conversation)
        assert [(m.role, m.finish) for m in stored] == [
            ("user", "refused"),
            ("assistant", "refused"),
        ]
        assert (await chat.limits()).level >= before  # nothing was charged
        # The conversation goes on: the next message reaches the model (this blocklist may
        # still stop its answer, which is the output check, not the input one).
        follow_up = [e async for e in chat.send(conversation, "Name one colour.")]
        assert isinstance(follow_up[0], Meta) and follow_up[0].model != SAFETY_MODEL
        assert isinstance(follow_up[-1], Done)


async def test_a_flagged_answer_is_stopped_and_the_flagged_text_never_shown(guarded) -> None:
    # Free, whose output check holds text back as shipped (Plus's shows it at once and
    # withdraws a flagged answer: tests/e2e/test_retract.py).
    # The engine samples (temperature 0.7), so an answer may, rarely, hold no "the" at all and
    # end normally; another conversation is tried then. (The prompt cannot hold "the": the
    # input check would refuse it.) A flagged word that reaches the user fails at once.
    for _ in range(3):
        conversation = new_conversation_id()
        async with ChatClient(
            guarded.gateway_address, guarded.tokens["free"], tls=guarded.tls("client")
        ) as chat:
            events = [
                e
                async for e in chat.send(
                    conversation, "Tell me a long story about a fox and a hen."
                )
            ]
            stored = await chat.messages(conversation)
        shown = "".join(e.text for e in events if isinstance(e, Delta))
        assert not FLAGGED_WORD.search(shown), shown
        assert isinstance(events[-1], Done), events[-1]
        if events[-1].finish == "refused":
            break
    assert events[-1].finish == "refused", shown
    assert shown.endswith(Refusals().output), shown
    # What is saved is what the user saw: the flagged text is not kept either.
    assert stored[-1].content == shown and stored[-1].finish == "refused"


async def test_a_stateless_completion_passes_the_same_input_check(guarded) -> None:

    from chat.v1 import chat_service_pb2 as pb
    from chat.v1 import chat_service_pb2_grpc as pb_grpc
    from chat.v1 import common_pb2

    request = pb.CompleteRequest(
        turns=[common_pb2.Turn(role=common_pb2.ROLE_USER, content="FORBIDDEN canary PHRASE")]
    )
    metadata = (("authorization", f"Bearer {guarded.tokens['free']}"),)
    async with guarded.channel(guarded.gateway_address, "client") as channel:
        stub = pb_grpc.ChatServiceStub(channel)
        events = [
            e async for r in stub.Complete(request, metadata=metadata) for e in (r.event, *r.more)
        ]
    assert events[0].meta.model == SAFETY_MODEL
    assert [e.delta.text for e in events if e.HasField("delta")] == [Refusals().input]
    assert events[-1].done.finish == common_pb2.FINISH_REASON_REFUSED
