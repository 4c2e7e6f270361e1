"""ChatService: authenticates, translates protobuf, delegates to the pipeline and the store."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import NoReturn, TypeVar

import grpc
from grpc_status import rpc_status

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import chat_service_pb2_grpc as pb_grpc
from domain.errors import InvalidArgument, NotFound
from domain.types import Role as TurnRole
from gateway.answer_streams import AnswerStreams, Batch, Caller
from gateway.auth import Authenticator
from gateway.buckets import Buckets
from gateway.convert import (
    conversation_to_pb,
    events_response,
    message_to_pb,
    rating_from_pb,
)
from gateway.far_runs import FarRuns
from gateway.feedback import RatingDesk
from gateway.file_api import FileApi
from gateway.files import FileDesk
from gateway.histories import Histories, History
from gateway.ids import ANSWER_SUFFIX, check_id
from gateway.memories import MemoryDesk
from gateway.memory_api import MemoryApi
from gateway.peer_client import PeerGateways
from gateway.pipeline import ChatPipeline
from gateway.regions import SERVE_FOR_HEADER, NoRegions, RegionRouter
from gateway.runs import RunAbandoned
from gateway.tool_loop import NoTools, PlatformTools
from infra.bearer import bearer_from_metadata
from infra.convert import RATING_TO_PB, TIER_TO_PB
from infra.grpcserver import maps_domain_errors
from infra.tls import Role, TlsConfig, peer
from store.records import MessageRecord

MAX_PAGE = 100
R = TypeVar("R", pb.SendMessageResponse, pb.AttachMessageResponse, pb.CompleteResponse)


def _page_cursor(token: str) -> float | None:
    """The updated_at a page token stands for; None for the first page. The tokens given out
    are finite times: "nan" or "inf" parse as floats, but would page nowhere or everywhere."""
    if not token:
        return None
    try:
        before = float(token)
    except ValueError as exc:
        raise InvalidArgument("page_token is not one this API gave out") from exc
    if not math.isfinite(before):
        raise InvalidArgument("page_token is not one this API gave out")
    return before


class ChatServicer(pb_grpc.ChatServiceServicer):
    def __init__(
        self,
        auth: Authenticator,
        pipeline: ChatPipeline,
        store: History,
        buckets: Buckets,
        ratings: RatingDesk,
        regions: RegionRouter | NoRegions | None = None,
        peers: PeerGateways | None = None,
        stream_interval_s: float = 0.0,
        tools: PlatformTools | None = None,
        memories: MemoryDesk | None = None,
        files: FileDesk | None = None,
    ) -> None:
        self._auth = auth
        self._pipeline = pipeline
        self._buckets = buckets
        self._regions = regions or NoRegions(pipeline)
        self._histories = Histories(store, ratings, self._regions)
        self._far_runs = FarRuns(self._histories, self._regions)
        self._memories = MemoryApi(memories, self._regions)
        self._files = FileApi(files, self._regions)
        self._peers = peers or PeerGateways(TlsConfig(insecure=True))
        self.streams = AnswerStreams(auth, pipeline, self._regions, self._far_runs, self._peers,
                                     stream_interval_s, tools or NoTools())  # fmt: skip

    @maps_domain_errors
    async def SendMessage(
        self, request: pb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.SendMessageResponse]:
        answer = self.streams.send(_caller(context), request)
        async for response in _served(answer, pb.SendMessageResponse, context):
            yield response

    @maps_domain_errors
    async def AttachMessage(
        self, request: pb.AttachMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AttachMessageResponse]:
        answer = self.streams.attach(_caller(context), request)
        async for response in _served(answer, pb.AttachMessageResponse, context):
            yield response

    @maps_domain_errors
    async def StopMessage(
        self, request: pb.StopMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopMessageResponse:
        user = await self._auth.user_of(context)
        serve_for = _serve_for(context)
        route = await self._far_runs.route(user, request.message_id, serve_for)
        if route is not None:
            try:
                return await self._peers.stop(route, request, _bearer(context))
            except grpc.aio.AioRpcError as error:
                await _abort_as(context, error)
        stopped = await self._regions.pipeline_for(serve_for).stop(user, request.message_id)
        return pb.StopMessageResponse(stopped=stopped)

    @maps_domain_errors
    async def GetConversation(
        self, request: pb.GetConversationRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetConversationResponse:
        user = await self._auth.user_of(context)
        check_id("conversation id", request.conversation_id)
        history = await self._histories.of(user)
        record = await history.get_conversation(user.user_id, request.conversation_id)
        return pb.GetConversationResponse(conversation=conversation_to_pb(record))

    @maps_domain_errors
    async def ListConversations(
        self, request: pb.ListConversationsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListConversationsResponse:
        user = await self._auth.user_of(context)
        if request.page_size > MAX_PAGE:
            raise InvalidArgument(f"page_size must be at most {MAX_PAGE}")
        before = _page_cursor(request.page_token)
        size = request.page_size or 20
        history = await self._histories.of(user)
        records = await history.list_conversations(user.user_id, size, before)
        next_token = repr(records[-1].updated_at) if len(records) == size else ""
        return pb.ListConversationsResponse(
            conversations=[conversation_to_pb(r) for r in records], next_page_token=next_token
        )

    @maps_domain_errors
    async def DeleteConversation(
        self, request: pb.DeleteConversationRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteConversationResponse:
        user = await self._auth.user_of(context)
        check_id("conversation id", request.conversation_id)
        history = await self._histories.of(user)
        await history.delete_conversation(user.user_id, request.conversation_id)
        return pb.DeleteConversationResponse()

    @maps_domain_errors
    async def GetMessage(
        self, request: pb.GetMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMessageResponse:
        user = await self._auth.user_of(context)
        history = await self._histories.of(user)
        record = await history.get_message(user.user_id, request.message_id)
        messages = await history.list_messages(user.user_id, record.conversation_id)
        ids = {m.seq: m.message_id for m in messages}
        parent_id = ids.get(record.parent_seq, "") if record.parent_seq else ""
        return pb.GetMessageResponse(message=message_to_pb(record, parent_id))

    @maps_domain_errors
    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMessagesResponse:
        user = await self._auth.user_of(context)
        check_id("conversation id", request.conversation_id)
        history = await self._histories.of(user)
        records = await history.list_messages(user.user_id, request.conversation_id)
        ids = {m.seq: m.message_id for m in records}
        return pb.ListMessagesResponse(
            messages=[
                message_to_pb(m, ids.get(m.parent_seq, "") if m.parent_seq else "") for m in records
            ]
        )

    @maps_domain_errors
    async def Complete(
        self, request: pb.CompleteRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.CompleteResponse]:
        answer = self.streams.complete(_caller(context), request)
        async for response in _served(answer, pb.CompleteResponse, context):
            yield response

    @maps_domain_errors
    async def GetResponse(
        self, request: pb.GetResponseRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetResponseResponse:
        user = await self._auth.user_of(context)
        check_id("response id", request.response_id)
        # Kept with the user's history: at home for a user who reached this region from another.
        history = await self._histories.of(user)
        if await history.response_deleted(user.user_id, request.response_id):
            raise NotFound(f"no response {request.response_id!r}")
        question = await _question(history, user.user_id, request.response_id)
        parent_id = await _message_id_at(history, user.user_id, question)
        reply = pb.GetResponseResponse(question=message_to_pb(question, parent_id))
        try:
            answer_id = request.response_id + ANSWER_SUFFIX
            answer = await history.get_message(user.user_id, answer_id)
        except NotFound:
            return reply  # still being written
        reply.answer.CopyFrom(message_to_pb(answer, request.response_id))
        reply.answered = True
        return reply

    @maps_domain_errors
    async def DeleteResponse(
        self, request: pb.DeleteResponseRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteResponseResponse:
        user = await self._auth.user_of(context)
        check_id("response id", request.response_id)
        history = await self._histories.of(user)
        await _question(history, user.user_id, request.response_id)
        await history.delete_response(user.user_id, request.response_id)
        return pb.DeleteResponseResponse()

    @maps_domain_errors
    async def RateMessage(
        self, request: pb.RateMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.RateMessageResponse:
        user = await self._auth.user_of(context)
        rating = rating_from_pb(request.rating)
        stored = await self._histories.rate(user, request.message_id, rating, request.comment)
        return pb.RateMessageResponse(message_id=stored.message_id, rating=RATING_TO_PB[rating],
                                      version=stored.version)  # fmt: skip

    @maps_domain_errors
    async def ListMemories(
        self, request: pb.ListMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMemoriesResponse:
        return await self._memories.list(await self._auth.user_of(context))

    @maps_domain_errors
    async def CreateMemory(
        self, request: pb.CreateMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateMemoryResponse:
        return await self._memories.create(await self._auth.user_of(context), request)

    @maps_domain_errors
    async def UpdateMemory(
        self, request: pb.UpdateMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateMemoryResponse:
        return await self._memories.update(await self._auth.user_of(context), request)

    @maps_domain_errors
    async def DeleteMemory(
        self, request: pb.DeleteMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteMemoryResponse:
        return await self._memories.delete(await self._auth.user_of(context), request)

    @maps_domain_errors
    async def UploadFile(
        self, request: pb.UploadFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.UploadFileResponse:
        return await self._files.upload(await self._auth.user_of(context), request)

    @maps_domain_errors
    async def ListFiles(
        self, request: pb.ListFilesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListFilesResponse:
        return await self._files.list(await self._auth.user_of(context))

    @maps_domain_errors
    async def GetFile(
        self, request: pb.GetFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetFileResponse:
        return await self._files.get(await self._auth.user_of(context), request)

    @maps_domain_errors
    async def GetFileContent(
        self, request: pb.GetFileContentRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetFileContentResponse:
        return await self._files.content(await self._auth.user_of(context), request)

    @maps_domain_errors
    async def DeleteFile(
        self, request: pb.DeleteFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteFileResponse:
        return await self._files.delete(await self._auth.user_of(context), request)

    @maps_domain_errors
    async def GetLimits(
        self, request: pb.GetLimitsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetLimitsResponse:
        user = await self._auth.user_of(context)
        # The bucket charged: home's for a user who reached this region from another.
        buckets = await self._regions.home_buckets(user) or self._buckets
        limit = buckets.limit(user.tier)
        bucket = await buckets.level(user.user_id, user.tier)
        return pb.GetLimitsResponse(
            tier=TIER_TO_PB[user.tier],
            level=bucket.level,
            capacity=limit.capacity,
            refill_per_second=limit.refill_per_s,
            full_in_seconds=(limit.capacity - bucket.level) / limit.refill_per_s,
        )


async def _abort_as(context: grpc.aio.ServicerContext, error: grpc.aio.AioRpcError) -> NoReturn:
    """Ends the call with the status another region's gateway gave."""
    status = rpc_status.from_call(error)
    if status is not None:
        await context.abort_with_status(rpc_status.to_status(status))
    await context.abort(error.code(), error.details() or "")
    # abort() always raises; grpc ships no types that could tell mypy so.
    raise AssertionError("unreachable")


def _bearer(context: grpc.aio.ServicerContext) -> str:
    return bearer_from_metadata(context.invocation_metadata()) or ""


def _caller(context: grpc.aio.ServicerContext) -> Caller:
    return Caller(bearer_from_metadata(context.invocation_metadata()), _serve_for(context))


async def _served(
    answer: AsyncIterator[Batch], response_type: type[R], context: grpc.aio.ServicerContext
) -> AsyncIterator[R]:
    """An answer stream as this call's messages: its own events built in place, another
    region's messages relayed as they came; its ends as the call's status."""
    try:
        async for batch in answer:
            if isinstance(batch, list):
                yield events_response(response_type, batch)
            else:
                yield batch  # type: ignore[misc]  # the same message type, from the same call
    except RunAbandoned as error:
        await _attach_elsewhere(context, error)
    except grpc.aio.AioRpcError as error:
        await _abort_as(context, error)


def _serve_for(context: grpc.aio.ServicerContext) -> str:
    """The home region a message passed on by another region's gateway runs for; '' for a
    message from anyone else (an edge, a client), whose header is ignored."""
    caller = peer(context)
    if caller is not None and caller.role != Role.GATEWAY:
        return ""
    for key, value in context.invocation_metadata() or ():
        if key == SERVE_FOR_HEADER and isinstance(value, str):
            return value
    return ""


async def _attach_elsewhere(context: grpc.aio.ServicerContext, error: RunAbandoned) -> None:
    """UNAVAILABLE without a status in the trailers: the edge takes it as this gateway gone and
    attaches at another after the last event it relayed, where the answer goes on."""
    await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))


async def _question(history: History, user_id: str, response_id: str) -> MessageRecord:
    """The user's turn a response id names (NotFound for an answer's id, or none)."""
    try:
        question = await history.get_message(user_id, response_id)
    except NotFound as error:
        raise NotFound(f"no response {response_id!r}") from error
    if question.role is not TurnRole.USER:
        raise NotFound(f"no response {response_id!r}")
    return question


async def _message_id_at(history: History, user_id: str, message: MessageRecord) -> str:
    """The id of the message this one answers (its parent), "" for a first message."""
    if not message.parent_seq:
        return ""
    messages = await history.list_messages(user_id, message.conversation_id)
    return next((m.message_id for m in messages if m.seq == message.parent_seq), "")
