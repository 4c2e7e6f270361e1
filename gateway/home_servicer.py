"""HomeService: this region's store, for the gateways of other regions running this region's
users' conversations (gateway/home_client.py is the other end)."""

from __future__ import annotations

from typing import Protocol

import grpc

from chat.v1 import common_pb2
from chat.v1 import home_service_pb2 as pb
from chat.v1 import home_service_pb2_grpc as pb_grpc
from domain.errors import InvalidArgument
from domain.types import Tier, User
from gateway import home_convert
from gateway.buckets import Buckets
from gateway.convert import rating_from_pb
from gateway.feedback import RatingDesk
from gateway.histories import History
from gateway.home_memories import HomeMemoryCalls
from gateway.ids import check_id
from infra.convert import TIER_FROM_PB
from infra.grpcserver import maps_domain_errors
from store.base import MemoryStore, PromptStore

# A page of conversations, as ChatService.ListConversations gives at most.
MAX_PAGE = 100


def _tier(value: common_pb2.Tier) -> Tier:
    tier = TIER_FROM_PB.get(value)
    if tier is None:
        raise InvalidArgument("tier must be free or plus")
    return tier


class KeptAtHome(History, PromptStore, MemoryStore, Protocol):
    """What the home region keeps of a user served elsewhere: the history, a turn's prompt,
    and their memory."""


class HomeServicer(HomeMemoryCalls, pb_grpc.HomeServiceServicer):
    _store: KeptAtHome

    def __init__(self, store: KeptAtHome, buckets: Buckets, ratings: RatingDesk) -> None:
        self._store = store
        self._buckets = buckets
        self._ratings = ratings

    @maps_domain_errors
    async def ReserveTokens(
        self, request: pb.ReserveTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReserveTokensResponse:
        if not request.amount >= 0:
            raise InvalidArgument("amount must be 0 or more")
        decision = await self._buckets.reserve(request.user_id, _tier(request.tier),
                                               request.amount)  # fmt: skip
        return pb.ReserveTokensResponse(admitted=decision.admitted, level=decision.bucket.level,
                                        retry_after_seconds=decision.retry_after_s)  # fmt: skip

    @maps_domain_errors
    async def SettleTokens(
        self, request: pb.SettleTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.SettleTokensResponse:
        await self._buckets.settle(request.user_id, _tier(request.tier), request.reserved,
                                   request.actual)  # fmt: skip
        return pb.SettleTokensResponse()

    @maps_domain_errors
    async def ReadConversation(
        self, request: pb.ReadConversationRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadConversationResponse:
        check_id("conversation id", request.conversation_id)
        record = await self._store.get_conversation(request.user_id, request.conversation_id)
        reply = pb.ReadConversationResponse(conversation=home_convert.conversation_to_pb(record))
        if request.with_messages:
            messages = await self._store.list_messages(request.user_id, request.conversation_id)
            reply.messages.extend(home_convert.message_to_pb(m) for m in messages)
        if request.with_version:
            user_id, conversation_id = request.user_id, request.conversation_id
            reply.version = await self._store.conversation_version(user_id, conversation_id)
        return reply

    @maps_domain_errors
    async def ReadMessage(
        self, request: pb.ReadMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadMessageResponse:
        record = await self._store.get_message(request.user_id, request.message_id)
        return pb.ReadMessageResponse(message=home_convert.message_to_pb(record))

    @maps_domain_errors
    async def AppendMessage(
        self, request: pb.AppendMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.AppendMessageResponse:
        check_id("conversation id", request.conversation_id)
        message = home_convert.new_message_from_pb(request.message)
        record = await self._store.add_message(request.user_id, request.conversation_id,
                                               message, request.title)  # fmt: skip
        return pb.AppendMessageResponse(message=home_convert.message_to_pb(record))

    @maps_domain_errors
    async def RateAnswer(
        self, request: pb.RateAnswerRequest, context: grpc.aio.ServicerContext
    ) -> pb.RateAnswerResponse:
        user = User(request.user_id, _tier(request.tier))
        rating = rating_from_pb(request.rating)
        record = await self._ratings.rate(user, request.message_id, rating, request.comment)
        return home_convert.feedback_to_pb(record)

    @maps_domain_errors
    async def ListStoredConversations(
        self, request: pb.ListStoredConversationsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListStoredConversationsResponse:
        if not 0 < request.limit <= MAX_PAGE:
            raise InvalidArgument(f"limit must be 1 to {MAX_PAGE}")
        before = request.updated_before if request.HasField("updated_before") else None
        records = await self._store.list_conversations(request.user_id, request.limit, before)
        return pb.ListStoredConversationsResponse(
            conversations=[home_convert.conversation_to_pb(r) for r in records]
        )

    @maps_domain_errors
    async def RecordServing(
        self, request: pb.RecordServingRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecordServingResponse:
        serving = home_convert.serving_from_pb(request.serving)
        check_id("message id", serving.message_id)
        await self._store.record_serving(request.user_id, serving)
        return pb.RecordServingResponse()

    @maps_domain_errors
    async def CapturePrompt(
        self, request: pb.CapturePromptRequest, context: grpc.aio.ServicerContext
    ) -> pb.CapturePromptResponse:
        prompt = home_convert.prompt_from_pb(request.prompt)
        check_id("message id", prompt.message_id)
        await self._store.capture_prompt(request.user_id, prompt)
        return pb.CapturePromptResponse()

    @maps_domain_errors
    async def DeleteStoredConversation(
        self, request: pb.DeleteStoredConversationRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteStoredConversationResponse:
        check_id("conversation id", request.conversation_id)
        await self._store.delete_conversation(request.user_id, request.conversation_id)
        return pb.DeleteStoredConversationResponse()

    @maps_domain_errors
    async def ReadTokens(
        self, request: pb.ReadTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadTokensResponse:
        bucket = await self._buckets.level(request.user_id, _tier(request.tier))
        return pb.ReadTokensResponse(level=bucket.level)

    @maps_domain_errors
    async def ReadResponseDeleted(
        self, request: pb.ReadResponseDeletedRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadResponseDeletedResponse:
        check_id("response id", request.response_id)
        deleted = await self._store.response_deleted(request.user_id, request.response_id)
        return pb.ReadResponseDeletedResponse(deleted=deleted)

    @maps_domain_errors
    async def DeleteStoredResponse(
        self, request: pb.DeleteStoredResponseRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteStoredResponseResponse:
        check_id("response id", request.response_id)
        await self._store.delete_response(request.user_id, request.response_id)
        return pb.DeleteStoredResponseResponse()
