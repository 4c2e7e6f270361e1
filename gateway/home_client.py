"""The home region's store and token buckets, as a conversation running away from home sees
them: each read, write, reservation and settlement is a HomeService call to a gateway of the
user's home region (never a database connection across regions). HomeStore implements the
parts of the store a pipeline and the API use away from home, store/base.py's ConversationStore
and ResponseStore, and no other: users stay in their region, compaction at home (an away
pipeline has no compactor), and a rating is passed home whole (rate_answer), where the version
that served the answer is read."""

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
from gateway.home_memories import HomeMemories
from infra.convert import RATING_TO_PB, TIER_TO_PB
from infra.keepalive import CLIENT_CHANNEL, never_connected
from infra.tls import TlsConfig
from infra.tls_channel import open_channel
from store.records import (
    CapturedPrompt,
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
    """The home region's store through any of its gateways: a call goes to the one that last
    answered, and on to the region's next gateway when it cannot be reached. A read is asked
    again of the next on any UNAVAILABLE; a change only when the call never reached a gateway
    (one that saw it may have made the change: asking twice could make it twice)."""

    def __init__(self, region: str, addresses: Sequence[str], tls: TlsConfig) -> None:
        self.region = region
        self._tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._addresses: tuple[str, ...] = ()
        self._answered = ""
        self.reach(addresses)

    def reach(self, addresses: Sequence[str]) -> None:
        """The home region's gateways as its directory now lists them (they come and go)."""
        if not addresses:
            raise Unavailable(f"home region {self.region!r} has no gateway")
        self._addresses = tuple(addresses)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    def buckets(self, limits: Callable[[Tier], limiter.Limit]) -> HomeBuckets:
        """The home region's token buckets, over this store's channels."""
        return HomeBuckets(self, limits)

    def memories(self) -> HomeMemories:
        """The user's memory at home, over this store's channels."""
        return HomeMemories(self)

    def _stub(self, address: str) -> pb_grpc.HomeServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(address, self._tls, CLIENT_CHANNEL)
        return pb_grpc.HomeServiceStub(channel)

    def _order(self) -> list[str]:
        """The gateway that last answered first, then the others as listed."""
        first = [a for a in self._addresses if a == self._answered]
        return first + [a for a in self._addresses if a != self._answered]

    async def _query(self, call: Callable[[pb_grpc.HomeServiceStub], Awaitable[T]]) -> T:
        """A read: asked of the next gateway on any UNAVAILABLE."""
        return await self._ask(call, _unavailable)

    async def _change(self, call: Callable[[pb_grpc.HomeServiceStub], Awaitable[T]]) -> T:
        """A change: asked of the next gateway only when no gateway saw it."""
        return await self._ask(call, never_connected)

    async def _ask(
        self,
        call: Callable[[pb_grpc.HomeServiceStub], Awaitable[T]],
        ask_next: Callable[[grpc.aio.AioRpcError], bool],
    ) -> T:
        *others, last = self._order()
        for address in others:
            try:
                return await self._answer(address, call)
            except grpc.aio.AioRpcError as error:
                if not ask_next(error):
                    raise self._mapped(error) from error
        try:
            return await self._answer(last, call)
        except grpc.aio.AioRpcError as error:
            raise self._mapped(error) from error

    async def _answer(
        self, address: str, call: Callable[[pb_grpc.HomeServiceStub], Awaitable[T]]
    ) -> T:
        reply = await call(self._stub(address))
        self._answered = address
        return reply

    def _mapped(self, error: grpc.aio.AioRpcError) -> Exception:
        code, details = error.code(), error.details() or ""
        if code == grpc.StatusCode.NOT_FOUND:
            return NotFound(details)
        if code == grpc.StatusCode.ALREADY_EXISTS:
            return AlreadyExists(details)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidArgument(details)
        return Unavailable(f"home region {self.region!r}: {code.name} {details}")

    async def _read(
        self, user_id: str, conversation_id: str, with_messages: bool
    ) -> pb.ReadConversationResponse:
        request = pb.ReadConversationRequest(user_id=user_id, conversation_id=conversation_id,
                                             with_messages=with_messages)  # fmt: skip
        return await self._query(
            lambda stub: stub.ReadConversation(request, timeout=CALL_TIMEOUT_S)
        )

    async def get_conversation(self, user_id: str, conversation_id: str) -> ConversationRecord:
        reply = await self._read(user_id, conversation_id, False)
        return home_convert.conversation_from_pb(user_id, reply.conversation)

    async def list_conversations(
        self, user_id: str, limit: int, updated_before: float | None = None
    ) -> list[ConversationRecord]:
        request = pb.ListStoredConversationsRequest(user_id=user_id, limit=limit)
        if updated_before is not None:
            request.updated_before = updated_before
        reply = await self._query(
            lambda stub: stub.ListStoredConversations(request, timeout=CALL_TIMEOUT_S)
        )
        return [home_convert.conversation_from_pb(user_id, c) for c in reply.conversations]

    async def delete_conversation(self, user_id: str, conversation_id: str) -> None:
        request = pb.DeleteStoredConversationRequest(user_id=user_id,
                                                     conversation_id=conversation_id)  # fmt: skip
        await self._change(
            lambda stub: stub.DeleteStoredConversation(request, timeout=CALL_TIMEOUT_S)
        )

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
        reply = await self._query(lambda stub: stub.ReadMessage(request, timeout=CALL_TIMEOUT_S))
        return home_convert.message_from_pb(reply.message)

    async def add_message(
        self, user_id: str, conversation_id: str, message: NewMessage, title: str = ""
    ) -> MessageRecord:
        request = pb.AppendMessageRequest(user_id=user_id, conversation_id=conversation_id,
                                          message=home_convert.new_message_to_pb(message),
                                          title=title)  # fmt: skip
        reply = await self._change(lambda stub: stub.AppendMessage(request, timeout=CALL_TIMEOUT_S))
        return home_convert.message_from_pb(reply.message)

    async def rate_answer(
        self, user: User, message_id: str, rating: Rating, comment: str
    ) -> FeedbackRecord:
        """The user's rating of their answer, stored and counted at home (gateway/feedback.py
        runs there)."""
        request = pb.RateAnswerRequest(user_id=user.user_id, tier=TIER_TO_PB[user.tier],
                                       message_id=message_id, rating=RATING_TO_PB[rating],
                                       comment=comment)  # fmt: skip
        reply = await self._change(lambda stub: stub.RateAnswer(request, timeout=CALL_TIMEOUT_S))
        return home_convert.feedback_from_pb(reply)

    async def response_deleted(self, user_id: str, response_id: str) -> bool:
        request = pb.ReadResponseDeletedRequest(user_id=user_id, response_id=response_id)
        reply = await self._query(
            lambda stub: stub.ReadResponseDeleted(request, timeout=CALL_TIMEOUT_S)
        )
        return reply.deleted

    async def delete_response(self, user_id: str, response_id: str) -> None:
        request = pb.DeleteStoredResponseRequest(user_id=user_id, response_id=response_id)
        await self._change(lambda stub: stub.DeleteStoredResponse(request, timeout=CALL_TIMEOUT_S))

    async def record_serving(self, user_id: str, serving: ServingRecord) -> None:
        request = pb.RecordServingRequest(user_id=user_id,
                                          serving=home_convert.serving_to_pb(serving))  # fmt: skip
        await self._change(lambda stub: stub.RecordServing(request, timeout=CALL_TIMEOUT_S))

    async def capture_prompt(self, user_id: str, prompt: CapturedPrompt) -> None:
        request = pb.CapturePromptRequest(user_id=user_id,
                                          prompt=home_convert.prompt_to_pb(prompt))  # fmt: skip
        await self._change(lambda stub: stub.CapturePrompt(request, timeout=CALL_TIMEOUT_S))

    async def conversation_version(self, user_id: str, conversation_id: str) -> str:
        request = pb.ReadConversationRequest(user_id=user_id, conversation_id=conversation_id,
                                             with_version=True)  # fmt: skip
        try:
            reply = await self._query(
                lambda stub: stub.ReadConversation(request, timeout=CALL_TIMEOUT_S)
            )
            return reply.version
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
        reply = await self._home._change(
            lambda stub: stub.ReserveTokens(request, timeout=CALL_TIMEOUT_S)
        )
        return limiter.Decision(limiter.Bucket(reply.level, 0.0), reply.admitted,
                                reply.retry_after_seconds)  # fmt: skip

    async def settle(self, user_id: str, tier: Tier, reserved: float, actual: float) -> None:
        request = pb.SettleTokensRequest(user_id=user_id, tier=TIER_TO_PB[tier],
                                         reserved=reserved, actual=actual)  # fmt: skip
        await self._home._change(lambda stub: stub.SettleTokens(request, timeout=CALL_TIMEOUT_S))

    async def level(self, user_id: str, tier: Tier) -> limiter.Bucket:
        request = pb.ReadTokensRequest(user_id=user_id, tier=TIER_TO_PB[tier])
        reply = await self._home._query(
            lambda stub: stub.ReadTokens(request, timeout=CALL_TIMEOUT_S)
        )
        return limiter.Bucket(reply.level, 0.0)


def _unavailable(error: grpc.aio.AioRpcError) -> bool:
    return error.code() == grpc.StatusCode.UNAVAILABLE
