"""The gateway builds prompts from a conversation's summary on real processes: once a summary
covers the older turns, a long paste folded into it no longer costs the next message its tokens,
and the pinned constraints ride along. (The compaction worker itself, writing a summary with the
small model, is tested in tests/gateway/test_compactor.py.)"""

from __future__ import annotations

import pytest

from clients.chat_client import ChatClient, Done, new_conversation_id
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from store.factory import open_store

pytestmark = pytest.mark.slow

PASTE = "Here is my log file: " + " ".join(f"line {i}: disk ok, fan ok." for i in range(60))


@pytest.fixture(scope="module")
async def short_answers(tmp_path_factory):
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("compaction"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            slot_context_tokens=4096,
            parallel=1,
            extra_env={
                "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "8",
                # Summaries are written by this test, not by the worker, so the numbers hold.
                "CHAT_GATEWAY_COMPACTION": "false",
            },
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


async def _input_tokens(chat: ChatClient, conversation: str, text: str) -> int:
    events = [e async for e in chat.send(conversation, text)]
    done = events[-1]
    assert isinstance(done, Done), done
    return done.usage.input_tokens


async def test_the_next_prompt_is_built_from_the_summary_and_pinned_turn(short_answers) -> None:
    platform = short_answers
    conversation = new_conversation_id()
    async with ChatClient(
        platform.gateway_address, platform.tokens["free"], tls=platform.tls("client")
    ) as chat:
        await _input_tokens(chat, conversation, "Hello! Always answer in French.")
        await _input_tokens(chat, conversation, PASTE)
        before = await _input_tokens(chat, conversation, "Name a fruit.")
        store = await open_store(f"sqlite:///{platform.settings.state_dir / 'chat.db'}")
        try:
            messages = await store.list_messages("dev-free", conversation)
            folded_upto = messages[3].seq  # the paste's answer: the paste is folded
            summary = "Summary of the earlier conversation: greetings and a log file, all fine."
            pinned = "Pinned constraints:\n- Always answer in French."
            assert await store.set_summary(
                "dev-free", conversation, summary, 20, folded_upto, pinned, 12, 0
            )
        finally:
            await store.close()
        after = await _input_tokens(chat, conversation, "Name a vegetable.")
    # The paste alone is several hundred tokens; the summary and pinned turn are a few dozen.
    assert before > 400
    assert after < before - 300
