"""gRPC clients of the scheduler and the nodes, one channel per address, reused."""

from __future__ import annotations

import grpc

from chat.v1 import node_service_pb2_grpc, scheduler_service_pb2, scheduler_service_pb2_grpc
from domain.errors import InvalidArgument, Unavailable
from infra.tls import TlsConfig, open_channel

_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
]


class NoReplica(Unavailable):
    """The scheduler answered: no replica of the pool is ready (or its breaker is open)."""


class Upstreams:
    def __init__(
        self, scheduler_address: str, tls: TlsConfig | None, rpc_timeout_s: float = 5.0
    ) -> None:
        # The gateway's certificate, for the scheduler and every node alike.
        self._tls = tls
        self._scheduler_channel = open_channel(scheduler_address, tls, _CHANNEL_OPTIONS)
        self.scheduler = scheduler_service_pb2_grpc.SchedulerServiceStub(self._scheduler_channel)
        self._node_channels: dict[str, grpc.aio.Channel] = {}
        self.rpc_timeout_s = rpc_timeout_s

    def node(self, address: str) -> node_service_pb2_grpc.NodeServiceStub:
        channel = self._node_channels.get(address)
        if channel is None:
            channel = open_channel(address, self._tls, _CHANNEL_OPTIONS)
            self._node_channels[address] = channel
        return node_service_pb2_grpc.NodeServiceStub(channel)

    async def pick(
        self, request: scheduler_service_pb2.PickReplicaRequest
    ) -> scheduler_service_pb2.PickReplicaResponse:
        try:
            answer: scheduler_service_pb2.PickReplicaResponse = await self.scheduler.PickReplica(
                request, timeout=self.rpc_timeout_s
            )
        except grpc.aio.AioRpcError as error:
            code = error.code()
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidArgument(
                    error.details() or "the scheduler refused the pick"
                ) from error
            if code == grpc.StatusCode.UNAVAILABLE and error.details():
                # The scheduler answered: no replica is ready. Its reason says which pool.
                raise NoReplica(error.details()) from error
            raise Unavailable(f"the scheduler is unreachable: {code.name}") from error
        return answer

    async def close(self) -> None:
        await self._scheduler_channel.close()
        for channel in self._node_channels.values():
            await channel.close()
