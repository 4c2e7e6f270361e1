"""The gateway's typed client of other regions' gateways: a message passed on, its answer's
stream relayed back as it comes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import chat_service_pb2_grpc as pb_grpc
from gateway.regions import SERVE_FOR_HEADER, Forward
from infra.keepalive import CLIENT_CHANNEL
from infra.tls import TlsConfig, open_channel


class PeerGateways:
    def __init__(self, tls: TlsConfig) -> None:
        self._tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, address: str) -> pb_grpc.ChatServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(address, self._tls, CLIENT_CHANNEL)
        return pb_grpc.ChatServiceStub(channel)

    async def send(
        self, route: Forward, request: pb.SendMessageRequest, token: str
    ) -> AsyncIterator[pb.SendMessageResponse]:
        """The answer's stream from the first of the region's gateways that takes the call; a
        gateway that cannot be reached before the first event is passed over for the next.
        Raises grpc.aio.AioRpcError with the last gateway's status."""
        metadata = [("authorization", f"Bearer {token}")]
        if route.serve_for:
            metadata.append((SERVE_FOR_HEADER, route.serve_for))
        for index, address in enumerate(route.addresses):
            call = self._stub(address).SendMessage(request, metadata=tuple(metadata))
            started = False
            try:
                async for response in call:
                    started = True
                    yield response
                return
            except grpc.aio.AioRpcError as error:
                last = index == len(route.addresses) - 1
                if started or last or error.code() != grpc.StatusCode.UNAVAILABLE:
                    raise

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
