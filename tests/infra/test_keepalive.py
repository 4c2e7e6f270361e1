"""Keepalive on real sockets: a stream whose link falls silent fails within 3 s on the client's
side, and a quiet stream with pings every second is never closed by the server for them; a
peer back after a long absence is connected again within about 2 s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edge.gateways import CHANNEL_OPTIONS as EDGE_TO_GATEWAY
from gateway.node_client import CHANNEL_OPTIONS as GATEWAY_TO_NODE
from gateway.scheduler_client import CHANNEL_OPTIONS as GATEWAY_TO_SCHEDULER
from infra.grpcserver import GrpcServer
from infra.keepalive import (
    CLIENT_CHANNEL,
    CLIENT_KEEPALIVE,
    RECONNECT_BACKOFF_MAX_MS,
    SILENCE_NOTICED_S,
)
from infra.tls import TlsConfig
from tests.relay import SilentRelay
from tests.servers import free_port

SERVICE = "chat.v1.Test"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
async def server() -> AsyncIterator[GrpcServer]:
    served = GrpcServer("127.0.0.1:0", [SERVICE], tls=TlsConfig(insecure=True))
    await served.start()
    await served.set_serving(True)
    yield served
    await served.stop(0)


@pytest.fixture
async def relay(server: GrpcServer) -> AsyncIterator[SilentRelay]:
    between = SilentRelay("127.0.0.1", server.port)
    await between.start()
    yield between
    await between.close()


def test_every_channel_on_the_answer_path_pings_and_reconnects_soon() -> None:
    for options in (EDGE_TO_GATEWAY, GATEWAY_TO_NODE, GATEWAY_TO_SCHEDULER):
        assert set(CLIENT_CHANNEL) <= set(options)


async def test_a_stream_whose_link_falls_silent_fails_within_three_seconds(
    relay: SilentRelay,
) -> None:
    async with grpc.aio.insecure_channel(relay.address, list(CLIENT_KEEPALIVE)) as channel:
        # A server stream that stays open and quiet, as a Generate stream between chunks does.
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=SERVICE)
        )
        assert (await watch.read()).status == SERVING
        relay.freeze()
        silent_since = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as lost:
            async with asyncio.timeout(4 * SILENCE_NOTICED_S):
                await watch.read()
        noticed_s = time.monotonic() - silent_since
    assert lost.value.code() == grpc.StatusCode.UNAVAILABLE
    assert noticed_s < SILENCE_NOTICED_S, f"noticed after {noticed_s:.1f} s"


async def test_a_quiet_stream_pinging_every_second_stays_open(server: GrpcServer) -> None:
    """gRPC's default server closes the connection (too_many_pings) after the third ping from
    a caller it sends no data to; ours lets them in for as long as the stream lasts."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}", list(CLIENT_KEEPALIVE)) as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service=SERVICE))
        assert (await watch.read()).status == SERVING
        # Five pings' worth of silence is what is tested here: no condition to wait on.
        await asyncio.sleep(5.5)
        await server.set_serving(False)
        async with asyncio.timeout(SILENCE_NOTICED_S):
            assert (await watch.read()).status == NOT_SERVING


async def test_a_peer_back_after_a_long_absence_is_reached_within_the_backoff_bound() -> None:
    """A node or gateway away for ten seconds: with gRPC's own backoff (1 s growing 1.6x to
    120 s) the channel's next try would come 4-8 s after it is back, and every call failed
    at once until then."""
    port = free_port()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", list(CLIENT_CHANNEL)) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        away_since = time.monotonic()
        # Ten seconds of refused connections grow the backoff to its bound.
        while time.monotonic() - away_since < 10.0:
            with pytest.raises(grpc.aio.AioRpcError):
                await health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=1)
            await asyncio.sleep(0.25)
        back = GrpcServer(f"127.0.0.1:{port}", [SERVICE], tls=TlsConfig(insecure=True))
        await back.start()
        await back.set_serving(True)
        try:
            back_at = time.monotonic()
            reply = await health.Check(
                health_pb2.HealthCheckRequest(service=SERVICE), wait_for_ready=True, timeout=30
            )
            reached_s = time.monotonic() - back_at
        finally:
            await back.stop(0)
    assert reply.status == SERVING
    bound_s = RECONNECT_BACKOFF_MAX_MS / 1000 * 1.2 + 1.0
    assert reached_s < bound_s, f"reached after {reached_s:.1f} s"
