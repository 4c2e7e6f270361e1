"""The home region's store and token buckets, as a conversation running away from home sees
them: each read, write, reservation and settlement is a HomeService call to a gateway of the
user's home region (never a database connection across regions). HomeStore implements the
part of the store a message's pipeline uses; compaction stays at home (an away pipeline has no
compactor)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from chat.v1 import home_service_pb2 as pb
from chat.v1 import home_service_pb2_grpc as pb_grpc
from domain import limiter
from domain.errors import AlreadyExists, InvalidArgument, NotFound, Unavailable
from domain.feedback import Rating
from domain.types import Tier, User
from gateway import home_convert
from infra.convert import RATING_TO_PB, TIER_TO_PB
from infra.keepalive import CLIENT_CHANNEL
from infra.tls import TlsConfig, open_channel
from store.records import (
    ConversationRecord,
    FeedbackRecord,
    MessageRecord,
    NewMessage,
    ServingRecord,
)

T = TypeVar("T")
# A store call: the home region answers in milliseconds, or it is away.
CALL_TIMEOUT_S = 5.0


class HomeStore:
    def __init__(self, region: str, addresses: Sequence[str], tls: TlsConfig) -> None:
        if not addresses:
            raise Unavailable(f"home region {region!r} has no gateway")
        self.region = region
        self._channel = open_channel(addresses[0], tls, CLIENT_CHANNEL)
        self._stub = pb_grpc.HomeServiceStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    def buckets(self, limits: Callable[[Tier], limiter.Limit]) -> HomeBuckets:
        """The home region's token buckets, over this store's channel."""
        return HomeBuckets(self, limits)

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except grpc.aio.AioRpcError as error:
            code, details = error.code(), error.details() or ""
            if code == grpc.StatusCode.NOT_FOUND:
                raise NotFound(details) from error
            if code == grpc.StatusCode.ALREADY_EXISTS:
                raise AlreadyExists(details) from error
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidArgument(details) from error
            raise Unavailable(f"home region {self.region!r}: {code.name} {details}") from error

    async def _read(
        self, user_id: str, conversation_id: str, with_messages: bool
    ) -> pb.ReadConversationResponse:
        request = pb.ReadConversationRequest(user_id=user_id, conversation_id=conversation_id,
                                             with_messages=with_messages)  # fmt: skip
        return await self._call(self._stub.ReadConversation(request, timeout=CALL_TIMEOUT_S))

    async def get_conversation(self, user_id: str, conversation_id: str) -> ConversationRecord:
        reply = await self._read(user_id, conversation_id, False)
        return home_convert.conversation_from_pb(user_id, reply.conversation)

    async def list_conversations(
        self, user_id: str, limit: int, updated_before: float | None = None
    ) -> list[ConversationRecord]:
        request = pb.ListStoredConversationsRequest(user_id=user_id, limit=limit)
        if updated_before is not None:
            request.updated_before = updated_before
        call = self._stub.ListStoredConversations(request, timeout=CALL_TIMEOUT_S)
        reply = await self._call(call)
        return [home_convert.conversation_from_pb(user_id, c) for c in reply.conversations]

    async def delete_conversation(self, user_id: str, conversation_id: str) -> None:
        request = pb.DeleteStoredConversationRequest(user_id=user_id,
                                                     conversation_id=conversation_id)  # fmt: skip
        await self._call(self._stub.DeleteStoredConversation(request, timeout=CALL_TIMEOUT_S))

    async def list_messages(self, user_id: str, conversation_id: str) -> list[MessageRecord]:
        reply = await self._read(user_id, conversation_id, True)
        return [home_convert.message_from_pb(m) for m in reply.messages]

    async def newest_message(self, user_id: str, conversation_id: str) -> MessageRecord | None:
        try:
            messages = await self.list_messages(user_id, conversation_id)
        except NotFound:
            return None
        return max(messages, key=lambda m: m.seq, default=None)

    async def get_message(self, user_id: str, message_id: str) -> MessageRecord:
        request = pb.ReadMessageRequest(user_id=user_id, message_id=message_id)
        reply = await self._call(self._stub.ReadMessage(request, timeout=CALL_TIMEOUT_S))
        return home_convert.message_from_pb(reply.message)

    async def add_message(
        self, user_id: str, conversation_id: str, message: NewMessage, title: str = ""
    ) -> MessageRecord:
        request = pb.AppendMessageRequest(user_id=user_id, conversation_id=conversation_id,
                                          message=home_convert.new_message_to_pb(message),
                                          title=title)  # fmt: skip
        reply = await self._call(self._stub.AppendMessage(request, timeout=CALL_TIMEOUT_S))
        return home_convert.message_from_pb(reply.message)

    async def rate_answer(
        self, user: User, message_id: str, rating: Rating, comment: str
    ) -> FeedbackRecord:
        """The user's rating of their answer, stored and counted at home (gateway/feedback.py
        runs there)."""
        request = pb.RateAnswerRequest(user_id=user.user_id, tier=TIER_TO_PB[user.tier],
                                       message_id=message_id, rating=RATING_TO_PB[rating],
                                       comment=comment)  # fmt: skip
        reply = await self._call(self._stub.RateAnswer(request, timeout=CALL_TIMEOUT_S))
        return home_convert.feedback_from_pb(reply)

    async def record_serving(self, user_id: str, serving: ServingRecord) -> None:
        request = pb.RecordServingRequest(user_id=user_id,
                                          serving=home_convert.serving_to_pb(serving))  # fmt: skip
        await self._call(self._stub.RecordServing(request, timeout=CALL_TIMEOUT_S))

    async def serving_of(self, user_id: str, message_id: str) -> ServingRecord:
        # Read only by ratings, which are made at home (rate_answer).
        raise NotFound(f"no serving record of message {message_id!r} away from home")

    async def conversation_version(self, user_id: str, conversation_id: str) -> str:
        request = pb.ReadConversationRequest(user_id=user_id, conversation_id=conversation_id,
                                             with_version=True)  # fmt: skip
        try:
            call = self._stub.ReadConversation(request, timeout=CALL_TIMEOUT_S)
            return (await self._call(call)).version
        except NotFound:
            return ""


class HomeBuckets:
    """The Buckets a pipeline running away from home charges: the home region's."""

    def __init__(self, home: HomeStore, limits: Callable[[Tier], limiter.Limit]) -> None:
        self._home = home
        self._limits = limits

    def limit(self, tier: Tier) -> limiter.Limit:
        # Every region runs the same tiers (one configuration).
        return self._limits(tier)

    async def reserve(self, user_id: str, tier: Tier, amount: float) -> limiter.Decision:
        request = pb.ReserveTokensRequest(user_id=user_id, tier=TIER_TO_PB[tier], amount=amount)
        home = self._home
        reply = await home._call(home._stub.ReserveTokens(request, timeout=CALL_TIMEOUT_S))
        return limiter.Decision(limiter.Bucket(reply.level, 0.0), reply.admitted,
                                reply.retry_after_seconds)  # fmt: skip

    async def settle(self, user_id: str, tier: Tier, reserved: float, actual: float) -> None:
        request = pb.SettleTokensRequest(user_id=user_id, tier=TIER_TO_PB[tier],
                                         reserved=reserved, actual=actual)  # fmt: skip
        home = self._home
        await home._call(home._stub.SettleTokens(request, timeout=CALL_TIMEOUT_S))

    async def level(self, user_id: str, tier: Tier) -> limiter.Bucket:
        # A reservation of nothing: the level, unchanged.
        return (await self.reserve(user_id, tier, 0.0)).bucket
