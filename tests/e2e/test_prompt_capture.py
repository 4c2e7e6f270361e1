"""Prompt capture on the real processes, with simulated replicas whose answer is a function of
the prompt they are sent (tests/e2e/test_responses.py's): the captured turns, answered again
by the same function, give the very answer the user read, so the capture is the prompt the
engine answered, not the gateway's idea of it. An operator reads it through the scheduler's
admin API and `chatctl prompts show`; it goes with its conversation; bad reads are refused.
Replayed at the version that served it, it gives the same answer again; at a version with
another system prompt, that version's answer, and `chatctl replay` shows the difference.
Deleting the user deletes their captures."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from clients.admin_client import AdminClient
from clients.base import ClientError
from clients.chat_client import ChatClient, Delta, Done, Meta
from clients.chatctl.main import main as chatctl
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from clients.prompts_client import CapturedPrompt, PromptsClient, Replay, ReplayClient
from clients.rollout_client import RolloutClient
from domain.rollout import Version
from domain.types import Role
from nodeagent.engine import PromptTurn
from nodeagent.sim import planned_answer, rendered

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You answer in one short paragraph."
ANSWER_TOKENS = (12, 20)
# How long the capture (written after the answer's end) may take to appear.
PATIENCE_S = 30.0


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("capture"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                "CHAT_GATEWAY_ROUTER": "false",
                # Compaction would add a summary turn; these turns are short of it anyway.
                "CHAT_GATEWAY_COMPACTION": "false",
            },
        )
    )
    await local.start()
    yield local
    await local.stop()


def sim_answer(turns: list[tuple[Role, str]]) -> str:
    """The simulated replica's whole answer to a prompt of these turns."""
    prompt = [PromptTurn(role, text) for role, text in turns]
    return "".join(rendered(planned_answer(prompt, ANSWER_TOKENS), 0))


def prompts(platform: LocalPlatform, admin_token: str = "") -> PromptsClient:
    return PromptsClient(platform.scheduler_address, admin_token or platform.admin_token,
                         tls=platform.tls())  # fmt: skip


async def captured(platform: LocalPlatform, user_id: str, message_id: str) -> CapturedPrompt:
    """The capture, once the gateway has written it (after the answer's `done`)."""
    deadline = time.monotonic() + PATIENCE_S
    async with prompts(platform) as client:
        while True:
            try:
                return await client.captured(user_id, message_id)
            except ClientError as error:
                if error.code != "NOT_FOUND" or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.05)


async def turn(chat: ChatClient, conversation: str, text: str, parent: str = "") -> tuple:
    events = [e async for e in chat.send(conversation, text, parent_id=parent)]
    meta, done = events[0], events[-1]
    assert isinstance(meta, Meta) and isinstance(done, Done) and done.finish == "stop", events
    return meta, "".join(e.text for e in events if isinstance(e, Delta))


async def test_a_turns_captured_prompt_is_the_one_its_engine_answered(
    platform: LocalPlatform, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation = f"c_{uuid.uuid4().hex[:8]}"
    first_q, second_q = "Name a colour.", "And a fruit of that colour?"
    async with ChatClient(platform.gateway_address, platform.tokens["free"],
                          tls=platform.tls("client")) as chat:  # fmt: skip
        first, first_a = await turn(chat, conversation, first_q)
        second, second_a = await turn(chat, conversation, second_q, first.message_id + ".answer")

    kept = await captured(platform, "dev-free", second.message_id)
    assert [(t.role, t.text) for t in kept.turns] == [
        (Role.SYSTEM, SYSTEM_PROMPT),
        (Role.USER, first_q),
        (Role.ASSISTANT, first_a),
        (Role.USER, second_q),
    ]
    # The replica's answer to the captured turns is the answer the user read: the capture is
    # the prompt the engine was sent, character for character.
    assert sim_answer([(t.role, t.text) for t in kept.turns]) == second_a
    assert (kept.message_id, kept.conversation_id) == (second.message_id, conversation)
    assert (kept.version, kept.model, kept.node_id) == (second.version, second.model,
                                                        second.replica_id)  # fmt: skip
    assert all(t.tokens > 0 for t in kept.turns)
    first_kept = await captured(platform, "dev-free", first.message_id)
    assert sim_answer([(t.role, t.text) for t in first_kept.turns]) == first_a

    # The operator's command line reads the same capture.
    args = ["prompts", "show", "dev-free", second.message_id, "--json",
            "--scheduler", platform.scheduler_address, "--admin-token", platform.admin_token,
            "--tls-dir", str(platform.tls_dir)]  # fmt: skip
    assert await asyncio.to_thread(chatctl, args) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(t["role"], t["text"]) for t in shown["turns"]] == [
        (t.role.value, t.text) for t in kept.turns
    ]


async def test_a_capture_goes_with_its_conversation_and_bad_reads_are_refused(
    platform: LocalPlatform, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation = f"c_{uuid.uuid4().hex[:8]}"
    async with ChatClient(platform.gateway_address, platform.tokens["free"],
                          tls=platform.tls("client")) as chat:  # fmt: skip
        meta, _ = await turn(chat, conversation, "Say hello.")
        await captured(platform, "dev-free", meta.message_id)
        async with prompts(platform) as client:
            with pytest.raises(ClientError) as other:  # another user's message id
                await client.captured("dev-plus", meta.message_id)
            assert other.value.code == "NOT_FOUND"
            with pytest.raises(ClientError) as unnamed:
                await client.captured("dev-free", "")
            assert unnamed.value.code == "INVALID_ARGUMENT"
            assert "user_id and message_id" in str(unnamed.value)
        async with prompts(platform, platform.tokens["free"]) as not_admin:
            with pytest.raises(ClientError) as refused:  # a user's token is not the admin's
                await not_admin.captured("dev-free", meta.message_id)
            assert refused.value.code == "PERMISSION_DENIED"
        await chat.delete_conversation(conversation)
    async with prompts(platform) as client:
        with pytest.raises(ClientError) as gone:
            await client.captured("dev-free", meta.message_id)
        assert gone.value.code == "NOT_FOUND"
    args = ["prompts", "show", "dev-free", meta.message_id,
            "--scheduler", platform.scheduler_address, "--admin-token", platform.admin_token,
            "--tls-dir", str(platform.tls_dir)]  # fmt: skip
    assert await asyncio.to_thread(chatctl, args) == 1
    assert "no captured prompt of message" in capsys.readouterr().err


def replays(platform: LocalPlatform, admin_token: str = "") -> ReplayClient:
    return ReplayClient(platform.gateway_address, admin_token or platform.admin_token,
                        tls=platform.tls())  # fmt: skip


async def test_a_replay_at_the_same_version_is_identical_and_at_another_shows_the_change(
    platform: LocalPlatform, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    conversation = f"c_{uuid.uuid4().hex[:8]}"
    async with ChatClient(platform.gateway_address, platform.tokens["free"],
                          tls=platform.tls("client")) as chat:  # fmt: skip
        first, _ = await turn(chat, conversation, "Name a river.")
        second, second_a = await turn(chat, conversation, "How long is it?",
                                      first.message_id + ".answer")  # fmt: skip
    kept = await captured(platform, "dev-free", second.message_id)

    async with replays(platform) as client:
        same = await client.replay("dev-free", second.message_id)
    assert (same.original, same.replayed) == (second_a, second_a)
    assert (same.version, same.finish, same.system_prompt_replaced) == (second.version, "stop",
                                                                        False)  # fmt: skip

    # A candidate with its own system prompt: the rest of the prompt goes as captured.
    terse = "Answer in five words or fewer."
    async with RolloutClient(platform.scheduler_address, platform.admin_token,
                             tls=platform.tls()) as rollout:  # fmt: skip
        await rollout.create(Version(f"terse-{uuid.uuid4().hex[:6]}", system_prompt=terse))
        name = (await rollout.rollout()).versions[-1].name
    other = await until_known(platform, second.message_id, name)
    expected = sim_answer([(Role.SYSTEM, terse), *((t.role, t.text) for t in kept.turns[1:])])
    assert (other.original, other.replayed) == (second_a, expected)
    assert expected != second_a and other.system_prompt_replaced and other.version == name

    # The command line: one turn with its diff, then a set with a tally.
    common = ["--gateway", platform.gateway_address, "--admin-token", platform.admin_token,
              "--tls-dir", str(platform.tls_dir)]  # fmt: skip
    args = ["replay", "dev-free", second.message_id, "--version", name, *common]
    assert await asyncio.to_thread(chatctl, args) == 0
    shown = capsys.readouterr().out
    assert f"then:\n{second_a}\n\nnow:\n{expected}\n\ndiff:\n" in shown
    listed = tmp_path / "turns.txt"
    listed.write_text(f"# two turns\ndev-free {first.message_id}\n\ndev-free {second.message_id}\n")
    assert await asyncio.to_thread(chatctl, ["replay", "--set", str(listed), *common]) == 0
    assert capsys.readouterr().out.endswith("2 of 2 identical\n")


async def until_known(platform: LocalPlatform, message_id: str, version: str) -> Replay:
    """The replay at a version just created, once the gateway's rollout holds it."""
    deadline = time.monotonic() + PATIENCE_S
    async with replays(platform) as client:
        while True:
            try:
                return await client.replay("dev-free", message_id, version)
            except ClientError as error:
                if "no version" not in str(error) or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.05)


async def test_bad_replays_are_refused_with_their_reason(
    platform: LocalPlatform, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    async with ChatClient(platform.gateway_address, platform.tokens["free"],
                          tls=platform.tls("client")) as chat:  # fmt: skip
        meta, _ = await turn(chat, f"c_{uuid.uuid4().hex[:8]}", "Say hi.")
    await captured(platform, "dev-free", meta.message_id)
    async with replays(platform) as client:
        with pytest.raises(ClientError) as unknown_version:
            await client.replay("dev-free", meta.message_id, "no-such-version")
        assert (unknown_version.value.code, unknown_version.value.message) == (
            "NOT_FOUND", "no version 'no-such-version'")  # fmt: skip
        with pytest.raises(ClientError) as unknown_turn:
            await client.replay("dev-free", "m_never_sent")
        assert unknown_turn.value.code == "NOT_FOUND"
        with pytest.raises(ClientError) as unnamed:
            await client.replay("", meta.message_id)
        assert unnamed.value.code == "INVALID_ARGUMENT"
    async with replays(platform, platform.tokens["free"]) as not_admin:
        with pytest.raises(ClientError) as refused:
            await not_admin.replay("dev-free", meta.message_id)
        assert refused.value.code == "PERMISSION_DENIED"
    common = ["--gateway", platform.gateway_address, "--admin-token", platform.admin_token,
              "--tls-dir", str(platform.tls_dir)]  # fmt: skip
    garbled = tmp_path / "bad.txt"
    garbled.write_text("dev-free\n")
    assert await asyncio.to_thread(chatctl, ["replay", "--set", str(garbled), *common]) == 1
    assert f"{garbled}:1: expected `USER MESSAGE_ID`" in capsys.readouterr().err
    assert await asyncio.to_thread(chatctl, ["replay", *common]) == 1
    assert "name USER and MESSAGE_ID, or --set FILE" in capsys.readouterr().err


async def test_deleting_a_user_deletes_their_captures_and_ends_their_token(
    platform: LocalPlatform, capsys: pytest.CaptureFixture[str]
) -> None:
    user_id = f"u-{uuid.uuid4().hex[:8]}"
    async with AdminClient(platform.scheduler_address, platform.admin_token,
                           tls=platform.tls()) as admin:  # fmt: skip
        created = await admin.create_user(user_id, "free")
        async with ChatClient(platform.gateway_address, created.token,
                              tls=platform.tls("client")) as chat:  # fmt: skip
            meta, _ = await turn(chat, f"c_{uuid.uuid4().hex[:8]}", "Remember this turn.")
            await captured(platform, user_id, meta.message_id)
            common = ["--scheduler", platform.scheduler_address, "--admin-token",
                      platform.admin_token, "--tls-dir", str(platform.tls_dir)]  # fmt: skip
            assert await asyncio.to_thread(chatctl, ["users", "delete", user_id, *common]) == 0
            assert f"user {user_id} is deleted" in capsys.readouterr().out
            with pytest.raises(ClientError) as refused:
                await turn(chat, f"c_{uuid.uuid4().hex[:8]}", "Still there?")
            assert refused.value.code == "UNAUTHENTICATED"
        assert user_id not in [u.user_id for u in await admin.users()]
    async with prompts(platform) as client:
        with pytest.raises(ClientError) as gone:
            await client.captured(user_id, meta.message_id)
        assert gone.value.code == "NOT_FOUND"
    assert await asyncio.to_thread(chatctl, ["users", "delete", user_id, *common]) == 1
    assert f"no user '{user_id}'" in capsys.readouterr().err
