"""HomeService: this region's store, for the gateways of other regions running this region's
users' conversations (gateway/home_client.py is the other end)."""

from __future__ import annotations

import grpc

from chat.v1 import home_service_pb2 as pb
from chat.v1 import home_service_pb2_grpc as pb_grpc
from gateway import home_convert
from gateway.pipeline import check_id
from infra.grpcserver import maps_domain_errors
from store.base import Store


class HomeServicer(pb_grpc.HomeServiceServicer):
    def __init__(self, store: Store) -> None:
        self._store = store

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
