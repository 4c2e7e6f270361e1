"""The edge's link to a gateway (EdgeLinkService): answer streams read on it are the calls'
own, event for event and refusal for refusal; many answers share its frames, and a reader
that stops reading holds up no other; a gateway that does not serve the link is called.

Against a real gateway, scheduler and simulated node; the edge side is the edge's own
`Gateways` (as `edge.main` builds it), once with a link and once without."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import chat_service_pb2_grpc as pb_grpc
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from edge.gateways import Gateways
from gateway.ids import ANSWER_SUFFIX
from infra.status import STATUS_TRAILER
from infra.tls import Role

pytestmark = pytest.mark.slow

ANSWER_TOKENS = 80


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("edge-link"),
            edge_listen="127.0.0.1:0",
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": f"{ANSWER_TOKENS},{ANSWER_TOKENS}",
                # Plus may run this many answers at once (the test's burst).
                "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "32",
                "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "10000000",
            },
        )
    )
    await local.start()
    yield local
    await local.stop()


@pytest.fixture
async def linked(platform: LocalPlatform) -> AsyncIterator[Gateways]:
    gateways = Gateways.dial([platform.gateway_address], platform.tls(Role.EDGE), links=1)
    yield gateways
    await gateways.close()


@pytest.fixture
async def called(platform: LocalPlatform) -> AsyncIterator[Gateways]:
    gateways = Gateways.dial([platform.gateway_address], platform.tls(Role.EDGE), links=0)
    yield gateways
    await gateways.close()


def auth(platform: LocalPlatform, tier: str = "plus") -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {platform.tokens[tier]}"),)


def send(content: str) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        conversation_id=f"c_{uuid.uuid4().hex[:10]}",
        message_id=f"m_{uuid.uuid4().hex[:10]}",
        content=content,
    )


async def events_of(call: Any) -> list[pb.ChatEvent]:
    events: list[pb.ChatEvent] = []
    async for item in call:
        events.extend([item.event, *item.more])
    return events


def text_of(events: list[pb.ChatEvent]) -> str:
    return "".join(e.delta.text for e in events if e.WhichOneof("kind") == "delta")


async def stored_answer(gateways: Gateways, platform: LocalPlatform, message_id: str) -> str:
    reply = await gateways.all[0].chat.GetMessage(
        pb.GetMessageRequest(message_id=message_id + ANSWER_SUFFIX), metadata=auth(platform)
    )
    return str(reply.message.content)


async def gateway_frames(platform: LocalPlatform) -> float:
    port = platform._child("gateway").ready["metrics"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    found = re.search(r"^gateway_edge_link_frames_total (\S+)$", text, re.MULTILINE)
    assert found is not None, "the gateway counts its link frames"
    return float(found.group(1))


async def test_an_answer_read_on_the_link_is_the_calls_event_for_event(
    platform: LocalPlatform, linked: Gateways, called: Gateways
) -> None:
    request = send("Tell me about lighthouses.")
    on_link = await events_of(linked.all[0].chat.SendMessage(request, metadata=auth(platform)))
    attach = pb.AttachMessageRequest(message_id=request.message_id)
    by_call = await events_of(called.all[0].chat.AttachMessage(attach, metadata=auth(platform)))
    attached_on_link = await events_of(
        linked.all[0].chat.AttachMessage(attach, metadata=auth(platform))
    )
    assert [e.SerializeToString() for e in on_link] == [e.SerializeToString() for e in by_call]
    assert attached_on_link == by_call
    assert [e.event_id for e in on_link] == list(range(1, len(on_link) + 1))
    assert on_link[0].WhichOneof("kind") == "meta" and on_link[-1].WhichOneof("kind") == "done"
    assert text_of(on_link) == await stored_answer(called, platform, request.message_id)


async def test_many_answers_share_frames_and_an_unread_one_holds_up_none(
    platform: LocalPlatform, linked: Gateways
) -> None:
    chat = linked.all[0].chat
    frames_before = await gateway_frames(platform)
    requests = [send(f"Question number {i} about the sea.") for i in range(16)]
    calls = [chat.SendMessage(r, metadata=auth(platform)) for r in requests]
    unread, *others = calls
    # The first answer's stream opens, then nobody reads it while the others run to the end.
    first = await anext(aiter(unread))
    batches = 0

    async def read(call: Any) -> list[pb.ChatEvent]:
        nonlocal batches
        events: list[pb.ChatEvent] = []
        async for item in call:
            batches += 1
            events.extend([item.event, *item.more])
        return events

    answers = await asyncio.wait_for(asyncio.gather(*(read(c) for c in others)), 120)
    rest = await read(unread)
    answers.insert(0, [first.event, *first.more, *rest])
    for request, events in zip(requests, answers, strict=True):
        assert events[-1].WhichOneof("kind") == "done"
        assert text_of(events) == await stored_answer(linked, platform, request.message_id)
    frames = await gateway_frames(platform) - frames_before
    # Each stream's news came in batches; a frame carries every stream that had news, so the
    # sixteen streams' batches came in far fewer frames.
    assert frames * 2 < batches, (frames, batches)


async def test_refusals_on_the_link_are_the_calls_own(
    platform: LocalPlatform, linked: Gateways, called: Gateways
) -> None:
    bad_conversation = pb.SendMessageRequest(conversation_id="bad id!", message_id="m_x1",
                                             content="hi")  # fmt: skip
    cases = [
        ("SendMessage", send("hello"), (("authorization", "Bearer not-a-token"),)),
        ("SendMessage", send("hello"), ()),
        ("SendMessage", bad_conversation, auth(platform)),
        ("SendMessage", send(""), auth(platform)),
        ("AttachMessage", pb.AttachMessageRequest(message_id="m_nobody"), auth(platform)),
        ("Complete", pb.CompleteRequest(), auth(platform)),
    ]
    for method, request, metadata in cases:
        outcomes = []
        for gateways in (linked, called):
            call = getattr(gateways.all[0].chat, method)(request, metadata=metadata)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await events_of(call)
            error = refused.value
            trailers = dict(error.trailing_metadata() or ())
            outcomes.append((error.code(), error.details(), trailers.get(STATUS_TRAILER)))
        on_link, by_call = outcomes
        assert on_link == by_call, (method, request)
        assert on_link[2] is not None, "a gateway's refusal carries its status details"


class OlderGateway(pb_grpc.ChatServiceServicer):
    """A gateway of a release before the link: ChatService alone."""

    def __init__(self) -> None:
        self.calls = 0

    async def SendMessage(self, request: pb.SendMessageRequest, context: Any) -> Any:
        self.calls += 1
        yield pb.SendMessageResponse(
            event=pb.ChatEvent(event_id=1, delta=pb.DeltaEvent(text=request.content)),
            more=[pb.ChatEvent(event_id=2, done=pb.DoneEvent())],
        )


async def test_a_gateway_without_the_link_is_called() -> None:
    older = OlderGateway()
    server = grpc.aio.server()
    pb_grpc.add_ChatServiceServicer_to_server(older, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    gateways = Gateways([(f"127.0.0.1:{port}", channel)], links=1)
    try:
        for content in ("first", "second"):
            call = gateways.all[0].chat.SendMessage(send(content))
            events = await events_of(call)
            assert text_of(events) == content
            assert events[-1].WhichOneof("kind") == "done"
        assert older.calls == 2
    finally:
        await gateways.close()
        await server.stop(0)
