"""Which gateway the edge calls: round robin over the live ones, a lost gateway passed over
for a cooldown, a lost call sent once more elsewhere; and which failures count as the
gateway's. Against real gRPC servers on 127.0.0.1 (a tiny ChatService) and a closed port."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import chat_service_pb2_grpc as pb_grpc
from domain.errors import Unavailable
from edge.gateways import Gateways, Rotation, gateway_lost, never_sent
from infra.status import to_rpc_status
from tests.servers import free_port


def test_calls_take_turns_over_the_gateways() -> None:
    rotation = Rotation(3, cooldown_s=5.0)
    assert [rotation.order(0.0)[0] for _ in range(4)] == [0, 1, 2, 0]


def test_a_lost_gateway_is_passed_over_until_its_cooldown_ends() -> None:
    rotation = Rotation(3, cooldown_s=5.0)
    rotation.lost(1, now=10.0)
    assert [rotation.order(11.0) for _ in range(4)] == [[0, 2, 1], [2, 0, 1]] * 2
    assert rotation.down(11.0) == [1]
    assert rotation.order(15.0) == [1, 2, 0]  # in turn again
    assert rotation.down(15.0) == []


def test_a_gateway_that_answers_is_up_at_once() -> None:
    rotation = Rotation(2, cooldown_s=5.0)
    rotation.lost(0, now=0.0)
    rotation.answered(0)
    assert rotation.order(1.0) == [0, 1]


def test_with_every_gateway_down_calls_still_go_somewhere() -> None:
    rotation = Rotation(2, cooldown_s=5.0)
    rotation.lost(0, now=0.0)
    rotation.lost(1, now=0.0)
    assert sorted(rotation.order(1.0)) == [0, 1]


class Limits(pb_grpc.ChatServiceServicer):
    """A gateway that answers GetLimits, and refuses GetMessage as a gateway does."""

    def __init__(self) -> None:
        self.calls = 0

    async def GetLimits(self, request, context):
        self.calls += 1
        return pb.GetLimitsResponse()

    async def GetMessage(self, request, context):
        await context.abort_with_status(to_rpc_status(Unavailable("the store is down")))


@pytest.fixture
async def live() -> AsyncIterator[tuple[str, Limits]]:
    server = grpc.aio.server()
    servicer = Limits()
    pb_grpc.add_ChatServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}", servicer
    await server.stop(None)


async def test_a_call_to_a_dead_gateway_goes_to_a_live_one(live) -> None:
    address, servicer = live
    dead = f"127.0.0.1:{free_port()}"
    gateways = Gateways.dial([dead, address], None)
    try:
        for _ in range(4):
            await gateways.call(lambda chat: chat.GetLimits(pb.GetLimitsRequest(), timeout=5))
        assert servicer.calls == 4
        assert gateways.down() == [dead]
    finally:
        await gateways.close()


async def test_a_dead_gateways_failure_is_the_gateways_a_refusal_is_the_calls(live) -> None:
    address, _ = live
    gateways = Gateways.dial([f"127.0.0.1:{free_port()}", address], None)
    dead, alive = gateways.all
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused_connection:
            await dead.chat.GetLimits(pb.GetLimitsRequest(), timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as refused_by_gateway:
            await alive.chat.GetMessage(pb.GetMessageRequest(message_id="m_1"), timeout=5)
    finally:
        await gateways.close()
    assert gateway_lost(refused_connection.value) and never_sent(refused_connection.value)
    assert refused_by_gateway.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not gateway_lost(refused_by_gateway.value)


async def limits_at(address: str) -> grpc.aio.Server:
    server = grpc.aio.server()
    pb_grpc.add_ChatServiceServicer_to_server(Limits(), server)
    server.add_insecure_port(address)
    await server.start()
    return server


async def test_with_every_gateway_lost_a_call_waits_for_one_to_come_back() -> None:
    """Both refused, then one starts listening while the edge is backing off from it: the
    call is answered there instead of failing."""
    first, second = (f"127.0.0.1:{free_port()}" for _ in range(2))
    gateways = Gateways.dial([first, second], None, reconnect_wait_s=30.0)
    server: grpc.aio.Server | None = None

    async def back_once_both_refused() -> None:
        nonlocal server
        while True:
            if len(gateways.down()) == 2:
                server = await limits_at(second)
                return
            await asyncio.sleep(0.01)

    try:
        starting = asyncio.create_task(back_once_both_refused())
        reply = await gateways.call(lambda chat: chat.GetLimits(pb.GetLimitsRequest(), timeout=5))
        await starting
        assert isinstance(reply, pb.GetLimitsResponse)
    finally:
        await gateways.close()
        if server is not None:
            await server.stop(None)


async def test_with_every_gateway_gone_a_call_fails_after_the_reconnect_wait() -> None:
    gateways = Gateways.dial([f"127.0.0.1:{free_port()}" for _ in range(2)], None,
                             reconnect_wait_s=0.5)  # fmt: skip
    started = time.monotonic()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gateways.call(lambda chat: chat.GetLimits(pb.GetLimitsRequest(), timeout=5))
    finally:
        await gateways.close()
    assert never_sent(refused.value)
    assert 0.5 <= time.monotonic() - started < 10.0
