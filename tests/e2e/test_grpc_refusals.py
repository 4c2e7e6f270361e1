"""What the gRPC fuzzer (tests/e2e/test_grpc_fuzz.py) found or checks in bulk, told once
plainly, on a platform with mutual TLS: another user's answer, even as it streams, is NOT_FOUND
to every call; an id too long to quote in a reason still gets its own status; a page token
the API never gave out is refused even if it parses."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest

from chat.v1 import chat_service_pb2 as chat_pb
from chat.v1 import chat_service_pb2_grpc as chat_grpc
from clients.admin_client import AdminClient
from clients.base import ClientError
from clients.chat_client import ChatClient, Done, answer_text
from infra.tls import Role
from tests.grpcfuzz import CALL_S, message_row, rows
from tests.seeded import Seeded, bearer, seeded_platform

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def seeded(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Seeded]:
    async with seeded_platform(tmp_path_factory.mktemp("grpc-refusals")) as platform:
        yield platform


async def test_an_id_too_long_to_quote_gets_its_own_status_not_resource_exhausted(
    seeded: Seeded,
) -> None:
    """The reason quoting a 300,000-character id once made trailers no client accepts: the
    caller read RESOURCE_EXHAUSTED (HTTP 429 at the edge) for a user that does not exist."""
    platform, huge = seeded.platform, "x" * 300_000
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls(Role.OPERATOR)
    ) as admin:
        with pytest.raises(ClientError) as rotating:
            await admin.rotate_token(huge)
        with pytest.raises(ClientError) as draining:
            await admin.drain(huge)
    async with platform.channel(platform.gateway_address, Role.CLIENT) as channel:
        reading = chat_grpc.ChatServiceStub(channel).GetMessage(
            chat_pb.GetMessageRequest(message_id=huge),
            metadata=bearer(platform.tokens["free"]),
            timeout=CALL_S,
        )
        with pytest.raises(grpc.aio.AioRpcError) as read:
            await reading
    assert (rotating.value.code, draining.value.code) == ("NOT_FOUND", "NOT_FOUND")
    assert read.value.code() == grpc.StatusCode.NOT_FOUND
    assert rotating.value.message.startswith("no user 'xxxxxxxx")
    assert read.value.details().startswith("no message 'xxxxxxxx")
    assert read.value.details().endswith("\u2026") and len(read.value.details()) <= 1024


async def refusal_of(call: grpc.aio.Call) -> grpc.StatusCode:
    """The status a call ended with, its answers (none are expected) read to the end."""
    with contextlib.suppress(grpc.aio.AioRpcError):
        if isinstance(call, grpc.aio.UnaryStreamCall):
            async for _ in call:
                pass
        else:
            await call
    return await call.code()


def tries_on(
    stub: chat_grpc.ChatServiceStub, token: str, conversation_id: str, message_id: str
) -> dict[str, grpc.aio.Call]:
    """Every call that names a conversation or a message, as the holder of `token`."""
    kw = {"metadata": bearer(token), "timeout": CALL_S}
    answer_id = message_id + ".answer"
    return {
        "GetConversation": stub.GetConversation(
            chat_pb.GetConversationRequest(conversation_id=conversation_id), **kw
        ),
        "ListMessages": stub.ListMessages(
            chat_pb.ListMessagesRequest(conversation_id=conversation_id), **kw
        ),
        "GetMessage": stub.GetMessage(chat_pb.GetMessageRequest(message_id=message_id), **kw),
        "GetMessage answer": stub.GetMessage(chat_pb.GetMessageRequest(message_id=answer_id), **kw),
        "AttachMessage": stub.AttachMessage(
            chat_pb.AttachMessageRequest(message_id=message_id), **kw
        ),
        "StopMessage": stub.StopMessage(chat_pb.StopMessageRequest(message_id=message_id), **kw),
        "DeleteConversation": stub.DeleteConversation(
            chat_pb.DeleteConversationRequest(conversation_id=conversation_id), **kw
        ),
        # An answer to that message, in a conversation of the caller's with the same id.
        "SendMessage": stub.SendMessage(
            chat_pb.SendMessageRequest(
                conversation_id=conversation_id,
                message_id="m_reply",
                parent_id=message_id,
                content="And then?",
            ),
            **kw,
        ),
    }


async def test_no_user_reads_resumes_stops_or_deletes_another_users_answer_as_it_streams(
    seeded: Seeded,
) -> None:
    platform = seeded.platform
    conversation_id, message_id = f"c_{uuid.uuid4().hex[:8]}", f"m_{uuid.uuid4().hex[:8]}"
    answer_id = message_id + ".answer"
    before = rows(seeded.database)
    events: list[object] = []
    tls = platform.tls(Role.CLIENT)
    async with (
        ChatClient(platform.gateway_address, platform.tokens["plus"], tls=tls) as plus,
        platform.channel(platform.gateway_address, Role.CLIENT) as channel,
    ):
        stub = chat_grpc.ChatServiceStub(channel)
        async for event in plus.send(conversation_id, "Tell me a long story.", message_id):
            events.append(event)
            if len(events) != 2:  # meta, then the first text: the answer is streaming
                continue
            tries = tries_on(stub, platform.tokens["free"], conversation_id, message_id)
            codes = {name: await refusal_of(call) for name, call in tries.items()}
            # Plus's answer was still streaming after all of them: not stored yet.
            own = stub.GetMessage(
                chat_pb.GetMessageRequest(message_id=answer_id),
                metadata=bearer(platform.tokens["plus"]),
                timeout=CALL_S,
            )
            still_streaming = await refusal_of(own)
    assert codes == dict.fromkeys(tries, grpc.StatusCode.NOT_FOUND)
    assert still_streaming == grpc.StatusCode.NOT_FOUND
    done = events[-1]
    assert isinstance(done, Done) and done.finish == "stop"  # Free's stop stopped nothing
    after = rows(seeded.database)
    assert after.of_others("dev-plus") == before.of_others("dev-plus")
    stored = message_row(after, "dev-plus", answer_id)
    assert stored is not None and stored[6] == answer_text(events)  # type: ignore[arg-type]


async def test_a_page_token_the_api_never_gave_out_is_invalid_even_if_it_parses(
    seeded: Seeded,
) -> None:
    """ "nan" and "inf" parse as floats: they answered OK, with no page or the first one."""
    platform = seeded.platform
    async with platform.channel(platform.gateway_address, Role.CLIENT) as channel:
        stub = chat_grpc.ChatServiceStub(channel)
        listing = {"metadata": bearer(platform.tokens["free"]), "timeout": CALL_S}
        first = await stub.ListConversations(
            chat_pb.ListConversationsRequest(page_size=1), **listing
        )
        after_first = await stub.ListConversations(
            chat_pb.ListConversationsRequest(page_size=1, page_token=first.next_page_token),
            **listing,
        )
        codes = {
            token: await refusal_of(
                stub.ListConversations(
                    chat_pb.ListConversationsRequest(page_token=token), **listing
                )
            )
            for token in ("nan", "inf", "-inf", "1e999", "soon")
        }
    assert first.next_page_token and float(first.next_page_token) > 0
    assert [c.conversation_id for c in after_first.conversations] != [
        c.conversation_id for c in first.conversations
    ]
    assert codes == dict.fromkeys(codes, grpc.StatusCode.INVALID_ARGUMENT)
