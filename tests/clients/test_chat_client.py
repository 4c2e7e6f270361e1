"""The Python client library against the real local platform (gateway and scheduler over gRPC)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

from clients.admin_client import AdminClient
from clients.base import ClientError
from clients.chat_client import (
    ChatClient,
    ChatEvent,
    Delta,
    Done,
    Meta,
    new_conversation_id,
    new_message_id,
)
from clients.chatctl.platform import LocalPlatform, PlatformSettings

pytestmark = pytest.mark.slow

# Long enough to still be answering a few events in; short enough for a CPU model.
COUNTING = "Count from one to thirty in words, one number per line."
STORY = "Write a very long story about the sea, in many chapters."


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """The whole platform, sending text token by token: these tests act a few events into an
    answer, and the output check's default hold-back would send a short answer as one event.
    (The check still reads every token.)"""
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("client"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            slot_context_tokens=4096,
            parallel=2,
            extra_env={
                "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
                "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
            },
        )
    )
    try:
        await local.start()
        yield local
    finally:
        await local.stop()


@pytest.fixture(scope="module")
async def endless(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """A simulated replica whose every answer runs to the Plus cap, 4,000 tokens: at its real
    time pace (about 40 tokens a second, whatever the machine's speed) an answer is still
    running a minute and a half after its first event, so a cut or a stop a few events in
    meets it running, on a fast machine or a starved one; the test then stops it."""
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("endless"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "5000,5000",
                "CHAT_GATEWAY_ROUTER": "false",
                "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
                "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
            },
        )
    )
    try:
        await local.start()
        yield local
    finally:
        await local.stop()


@pytest.fixture(scope="module")
async def endless_token(endless: LocalPlatform) -> str:
    async with AdminClient(
        endless.scheduler_address, endless.admin_token, tls=endless.tls()
    ) as admin:
        created = await admin.create_user(f"client-tests-{uuid.uuid4().hex[:8]}", "plus")
    return created.token


def assert_well_formed(events: list[ChatEvent]) -> None:
    assert [e.event_id for e in events] == list(range(1, len(events) + 1))
    assert isinstance(events[0], Meta)
    assert isinstance(events[-1], Done)
    assert all(isinstance(e, Delta) for e in events[1:-1])


@pytest.fixture(scope="module")
async def plus_token(platform: LocalPlatform) -> str:
    """A user of these tests' own, so their answers spend no dev user's bucket."""
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls()
    ) as admin:
        created = await admin.create_user(f"client-tests-{uuid.uuid4().hex[:8]}", "plus")
    return created.token


@pytest.fixture
async def client(platform: LocalPlatform, plus_token: str) -> AsyncIterator[ChatClient]:
    async with ChatClient(platform.gateway_address, plus_token, tls=platform.tls("client")) as chat:
        yield chat


@pytest.fixture
async def admin(platform: LocalPlatform) -> AsyncIterator[AdminClient]:
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls()
    ) as scheduler:
        yield scheduler


async def collect(events: AsyncIterator[ChatEvent]) -> list[ChatEvent]:
    return [event async for event in events]


class DroppingProxy:
    """A TCP relay in front of the gateway whose open connections a test can cut, the way a
    flaky network or a restarted load balancer would."""

    def __init__(self, target: str) -> None:
        self._host, port = target.rsplit(":", 1)
        self._port = int(port)
        self._writers: list[asyncio.StreamWriter] = []
        self._pumps: set[asyncio.Task[None]] = set()
        self.accepted = 0

    async def __aenter__(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self.cut()
        await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink))
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()

    async def cut(self) -> None:
        """Resets every open connection (RST, not a polite close)."""
        writers, self._writers = self._writers, []
        for writer in writers:
            writer.transport.abort()
        for writer in writers:
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await asyncio.gather(*self._pumps, return_exceptions=True)


async def test_send_streams_a_real_answer_meta_first_done_last(client: ChatClient) -> None:
    conversation = new_conversation_id()
    events = await collect(client.send(conversation, "Say hello in five words."))
    assert_well_formed(events)
    meta, done = events[0], events[-1]
    assert isinstance(meta, Meta) and isinstance(done, Done)
    assert meta.conversation_id == conversation and meta.replica_id == "local-small-0"
    assert done.finish in ("stop", "length")
    assert done.usage.input_tokens > 0 and done.usage.output_tokens > 0
    answer = "".join(e.text for e in events if isinstance(e, Delta))
    assert answer.strip()

    stored = await client.messages(conversation)
    assert [m.role for m in stored] == ["user", "assistant"]
    # No model wrote the user's turn: it has no finish.
    assert [m.finish for m in stored] == [None, done.finish]
    assert stored[1].content == answer and stored[1].tokens > 0
    listed = await client.conversations()
    assert conversation in [c.conversation_id for c in listed]
    await client.delete_conversation(conversation)
    with pytest.raises(ClientError) as caught:
        await client.messages(conversation)
    assert caught.value.code == "NOT_FOUND"


async def test_resume_after_a_cancelled_stream_neither_loses_nor_repeats(
    client: ChatClient,
) -> None:
    message = new_message_id()
    first: list[ChatEvent] = []
    async with contextlib.aclosing(client.send(new_conversation_id(), COUNTING, message)) as s:
        async for event in s:
            first.append(event)
            if len(first) == 3:
                break  # cancels the call; the gateway keeps writing the answer
    rest = await collect(client.resume(message, first[-1].event_id))
    whole = await collect(client.resume(message))
    assert_well_formed(whole)
    assert first + rest == whole


async def test_send_reattaches_by_itself_when_the_connection_drops(
    endless: LocalPlatform, endless_token: str
) -> None:
    message = new_message_id()
    seen: list[ChatEvent] = []
    stopped = False
    async with (
        DroppingProxy(endless.gateway_address) as proxy,
        ChatClient(endless.gateway_address, endless_token, tls=endless.tls("client")) as direct,
    ):
        async with ChatClient(proxy.address, endless_token, tls=endless.tls("client")) as client:
            stream = client.send(new_conversation_id(), STORY, message)
            async with contextlib.aclosing(stream):
                async for event in stream:
                    seen.append(event)
                    if len(seen) == 3:
                        await proxy.cut()
                    elif len(seen) > 3 and proxy.accepted >= 2 and not stopped:
                        # It came back through a new connection: the answer may end now.
                        stopped = await direct.stop(message)
        whole = await collect(direct.resume(message))
    assert stopped
    assert_well_formed(whole)
    assert isinstance(whole[-1], Done) and whole[-1].finish == "cancelled"
    assert seen == whole


async def test_stop_ends_the_answer_as_cancelled(
    endless: LocalPlatform, endless_token: str
) -> None:
    message = new_message_id()
    events: list[ChatEvent] = []
    stopped = False
    async with ChatClient(
        endless.gateway_address, endless_token, tls=endless.tls("client")
    ) as client:
        async with contextlib.aclosing(client.send(new_conversation_id(), STORY, message)) as s:
            async for event in s:
                events.append(event)
                if isinstance(event, Delta) and not stopped:
                    stopped = await client.stop(message)
        assert stopped
        assert isinstance(events[-1], Done) and events[-1].finish == "cancelled"
        assert await client.stop(message) is False  # it had already ended


async def test_errors_are_client_errors_with_the_grpc_code(
    platform: LocalPlatform, client: ChatClient
) -> None:
    cases = [
        (client.messages("c_nobody_has_this"), "NOT_FOUND"),
        (client.delete_conversation("c_nobody_has_this"), "NOT_FOUND"),
        (collect(client.resume("m_nobody_has_this")), "NOT_FOUND"),
    ]
    for call, code in cases:
        with pytest.raises(ClientError) as caught:
            await call
        assert caught.value.code == code, caught.value
    async with ChatClient(
        platform.gateway_address, "u_not_a_real_token", tls=platform.tls("client")
    ) as stranger:
        with pytest.raises(ClientError) as caught:
            await stranger.limits()
    assert caught.value.code == "UNAUTHENTICATED"
    with pytest.raises(ClientError) as caught:
        client.send("c1", "hi", model="huge")
    assert caught.value.code == "INVALID_ARGUMENT"


async def test_an_unreachable_gateway_is_unavailable_and_names_the_address() -> None:
    async with ChatClient("127.0.0.1:1", "u_whatever", timeout_s=2) as client:
        with pytest.raises(ClientError) as caught:
            await client.limits()
    assert caught.value.code == "UNAVAILABLE" and "127.0.0.1:1" in str(caught.value)


async def test_limits_are_the_callers_bucket(client: ChatClient) -> None:
    bucket = await client.limits()
    assert bucket.tier == "plus" and bucket.capacity == 250_000
    assert 0 <= bucket.level <= bucket.capacity and bucket.refill_per_second > 0


async def test_admin_sees_the_fleet_and_the_ladder(admin: AdminClient) -> None:
    (node,) = await admin.nodes()
    assert node.node_id == "local-small-0" and node.pool == "small" and node.state == "ready"
    assert 0 < node.free_kv_tokens <= node.kv_capacity_tokens
    assert await admin.nodes("large") == []
    ladder = await admin.ladder()
    assert 0 <= ladder.rung <= 3 and ladder.leading


async def test_admin_manages_users_and_their_tokens(
    platform: LocalPlatform, admin: AdminClient
) -> None:
    user_id = f"client-user-{uuid.uuid4().hex[:8]}"
    created = await admin.create_user(user_id, "free")
    assert created.user.tier == "free" and created.user.has_token
    assert user_id in [u.user_id for u in await admin.users()]
    assert (await admin.set_tier(user_id, "plus")).tier == "plus"
    token = await admin.rotate_token(user_id)
    async with ChatClient(platform.gateway_address, token, tls=platform.tls("client")) as user:
        assert (await user.limits()).tier == "plus"
        await admin.revoke_tokens(user_id)
        with pytest.raises(ClientError) as caught:
            await user.limits()
    assert caught.value.code == "UNAUTHENTICATED"
    with pytest.raises(ClientError) as caught:
        await admin.create_user(user_id, "free")
    assert caught.value.code == "ALREADY_EXISTS"


async def test_the_admin_api_refuses_a_user_token(platform: LocalPlatform, plus_token: str) -> None:
    async with AdminClient(platform.scheduler_address, plus_token, tls=platform.tls()) as impostor:
        with pytest.raises(ClientError) as caught:
            await impostor.nodes()
    assert caught.value.code == "PERMISSION_DENIED"
