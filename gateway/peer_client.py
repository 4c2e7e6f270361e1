"""The gateway's typed client of other regions' gateways: a message passed on, its answer's
stream relayed back as it comes; a resume or a stop passed to the region the answer runs in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import chat_service_pb2_grpc as pb_grpc
from gateway.regions import SERVE_FOR_HEADER, Forward
from infra.keepalive import CLIENT_CHANNEL, never_connected
from infra.tls import TlsConfig
from infra.tls_channel import open_channel

# A stop is one store read and a flag set where the answer runs.
STOP_TIMEOUT_S = 5.0


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
        async for response in self._stream(route, token, lambda stub: stub.SendMessage, request):
            yield response

    async def attach(
        self, route: Forward, request: pb.AttachMessageRequest, token: str
    ) -> AsyncIterator[pb.AttachMessageResponse]:
        """A running answer's stream, from the region it runs in (as send)."""
        async for response in self._stream(route, token, lambda stub: stub.AttachMessage, request):
            yield response

    async def stop(
        self, route: Forward, request: pb.StopMessageRequest, token: str
    ) -> pb.StopMessageResponse:
        """Asks the region the answer runs in to stop it; a gateway that cannot be reached is
        passed over for the next (a stop asked twice answers "not stopped" the second time, so
        only a call that reached none is asked again)."""
        metadata = _metadata(route, token)
        for address in route.addresses[:-1]:
            try:
                return await self._stop_at(address, request, metadata)
            except grpc.aio.AioRpcError as error:
                if not never_connected(error):
                    raise
        return await self._stop_at(route.addresses[-1], request, metadata)

    async def _stop_at(
        self, address: str, request: pb.StopMessageRequest, metadata: tuple[tuple[str, str], ...]
    ) -> pb.StopMessageResponse:
        stub = self._stub(address)
        return await stub.StopMessage(request, metadata=metadata, timeout=STOP_TIMEOUT_S)

    async def _stream(
        self,
        route: Forward,
        token: str,
        method: Callable[[pb_grpc.ChatServiceStub], Callable[..., Any]],
        request: Any,
    ) -> AsyncIterator[Any]:
        metadata = _metadata(route, token)
        for index, address in enumerate(route.addresses):
            call = method(self._stub(address))(request, metadata=metadata)
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


def _metadata(route: Forward, token: str) -> tuple[tuple[str, str], ...]:
    metadata = [("authorization", f"Bearer {token}")]
    if route.serve_for:
        metadata.append((SERVE_FOR_HEADER, route.serve_for))
    return tuple(metadata)
