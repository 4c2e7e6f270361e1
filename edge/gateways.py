"""The gateways an edge calls: one channel each, a choice per call that passes over the ones
that just failed, and which failures are the gateway's (its process or connection went away)
rather than the call's."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from chat.v1 import chat_service_pb2_grpc as pb_grpc
from edge.gateway_link import GatewayLinks, LinkedChatStub
from infra.keepalive import CLIENT_CHANNEL, never_connected
from infra.status import STATUS_TRAILER
from infra.tls import TlsConfig
from infra.tls_channel import open_channel

T = TypeVar("T")
# A gateway's own errors carry a google.rpc.Status in STATUS_TRAILER (infra.status); errors
# made by the gRPC library on this side (connection refused, reset, closed) carry none.
LOST_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
# One address may be a DNS name for several gateways; round_robin spreads calls over all it
# resolves to and passes over the ones that are down (gRPC's default would pin to the first).
# A restarted gateway is called again within the channel's reconnect backoff (2 s, plus gRPC's
# 20 % jitter), not gRPC's 120 s; until then calls to it fail at once. Pings find a gateway
# whose host vanished without closing the connection (infra/keepalive.py).
# A link's frame (edge/gateway_link.py) carries many answers' events: gRPC's 4 MiB default for
# one message could be reached by a frame of far-behind readers' catch-up.
MOST_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = (
    ("grpc.lb_policy_name", "round_robin"),
    ("grpc.max_receive_message_length", MOST_MESSAGE_BYTES),
    *CLIENT_CHANNEL,
)


def gateway_lost(error: grpc.aio.AioRpcError) -> bool:
    """The call failed because the gateway or the connection to it went away, not because the
    gateway answered with an error: the same call may succeed at another gateway."""
    if error.code() not in LOST_CODES:
        return False
    trailers = error.trailing_metadata() or ()
    return not any(key == STATUS_TRAILER for key, _ in trailers)


def never_sent(error: grpc.aio.AioRpcError) -> bool:
    """No gateway saw the call: safe to send again even when it changes something."""
    return gateway_lost(error) and never_connected(error)


class Rotation:
    """Which gateway each call goes to: round robin over those not marked down, then the
    ones marked down (a call must go somewhere; they may be back). A gateway whose call was
    lost is marked down for cooldown_s, then tried again in turn. No I/O, no timers: the
    caller passes the time."""

    def __init__(self, count: int, cooldown_s: float) -> None:
        if count < 1:
            raise ValueError("an edge needs at least one gateway")
        self._count = count
        self._cooldown_s = cooldown_s
        self._turn = 0
        self._down_until = [0.0] * count

    def order(self, now: float) -> list[int]:
        turn = self._turn
        self._turn += 1
        up = [i for i in range(self._count) if self._down_until[i] <= now]
        down = [i for i in range(self._count) if self._down_until[i] > now]
        if up:
            up = up[turn % len(up) :] + up[: turn % len(up)]
        return up + down

    def lost(self, index: int, now: float) -> None:
        self._down_until[index] = now + self._cooldown_s

    def answered(self, index: int) -> None:
        self._down_until[index] = 0.0

    def down(self, now: float) -> list[int]:
        return [i for i in range(self._count) if self._down_until[i] > now]


@dataclass(frozen=True, slots=True)
class Gateway:
    index: int
    address: str
    channel: grpc.aio.Channel
    chat: pb_grpc.ChatServiceStub
    health: health_pb2_grpc.HealthStub

    async def serving_state(self) -> str:
        """serving, not serving or unreachable, as its gRPC health check says."""
        with contextlib.suppress(grpc.aio.AioRpcError):
            reply = await self.health.Check(health_pb2.HealthCheckRequest(), timeout=2)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return "serving"
            return "not serving"
        return "unreachable"


class Gateways:
    def __init__(
        self,
        channels: Sequence[tuple[str, grpc.aio.Channel]],
        cooldown_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        reconnect_wait_s: float = 3.0,
        links: int = 1,
        link_max_age_s: float = 60.0,
    ) -> None:
        # Answer streams go over `links` EdgeLinkService streams per address
        # (edge/gateway_link.py); 0: a call each.
        self._links = [GatewayLinks(c, links, link_max_age_s) for _, c in channels if links]
        self.all = [
            Gateway(i, address, c, self._stub(c, i), health_pb2_grpc.HealthStub(c))
            for i, (address, c) in enumerate(channels)
        ]
        self._rotation = Rotation(len(self.all), cooldown_s)
        self._clock = clock
        # A call whose two tries were both lost waits this long for any gateway to connect
        # (one restarted while the other died is still in its reconnect backoff) before it
        # fails; above the channels' longest backoff with its jitter (2.4 s).
        self._reconnect_wait_s = reconnect_wait_s

    def _stub(self, channel: grpc.aio.Channel, index: int) -> pb_grpc.ChatServiceStub:
        if self._links:
            return LinkedChatStub(channel, self._links[index])
        return pb_grpc.ChatServiceStub(channel)

    @classmethod
    def dial(
        cls,
        addresses: Sequence[str],
        tls: TlsConfig | None,
        cooldown_s: float = 5.0,
        reconnect_wait_s: float = 3.0,
        links: int = 1,
        link_max_age_s: float = 60.0,
    ) -> Gateways:
        """One channel per address, with the edge's certificate (None: plaintext)."""
        channels = [(address, open_channel(address, tls, CHANNEL_OPTIONS)) for address in addresses]
        return cls(channels, cooldown_s, reconnect_wait_s=reconnect_wait_s, links=links,
                   link_max_age_s=link_max_age_s)  # fmt: skip

    def ordered(self) -> list[Gateway]:
        """Every gateway, the one this call should go to first."""
        return [self.all[i] for i in self._rotation.order(self._clock())]

    def lost(self, gateway: Gateway) -> None:
        self._rotation.lost(gateway.index, self._clock())

    def answered(self, gateway: Gateway) -> None:
        self._rotation.answered(gateway.index)

    def down(self) -> list[str]:
        return [self.all[i].address for i in self._rotation.down(self._clock())]

    async def call(
        self,
        send: Callable[[pb_grpc.ChatServiceStub], Awaitable[T]],
        may_resend: Callable[[grpc.aio.AioRpcError], bool] = gateway_lost,
    ) -> T:
        """A unary call at one gateway, sent again to the next when the first gateway was
        lost and may_resend allows it: a lost read may always go again, a change only when it
        never left (never_sent)."""
        lost: grpc.aio.AioRpcError | None = None
        async with contextlib.aclosing(self._tries()) as tries:
            async for gateway in tries:
                try:
                    return await self._send_at(gateway, send)
                except grpc.aio.AioRpcError as error:
                    if not gateway_lost(error) or not may_resend(error):
                        raise
                    lost = error
        raise _last(lost)

    async def open_stream(
        self, start: Callable[[pb_grpc.ChatServiceStub], grpc.aio.UnaryStreamCall]
    ) -> tuple[Gateway, grpc.aio.UnaryStreamCall, Any | None]:
        """A streaming call at one gateway and its first message (None: it ended without
        one), sent again to the next gateway when the first was lost before answering.
        Safe for every stream the edge opens: SendMessage is idempotent by message id,
        AttachMessage reads, and a completion whose gateway was lost died with it (or was
        cancelled with its connection)."""
        lost: grpc.aio.AioRpcError | None = None
        async with contextlib.aclosing(self._tries()) as tries:
            async for gateway in tries:
                call = start(gateway.chat)
                try:
                    first = await anext(aiter(call), None)
                except grpc.aio.AioRpcError as error:
                    if not gateway_lost(error):
                        raise
                    self.lost(gateway)
                    lost = error
                    continue
                self.answered(gateway)
                return gateway, call, first
        raise _last(lost)

    async def _tries(self) -> AsyncGenerator[Gateway, None]:
        """The gateway for a call and the one to send it to again (with one address, that
        address twice: when it is a name for several gateways, round_robin picks another);
        when both were lost, the first gateway to connect within reconnect_wait_s."""
        ordered = self.ordered()
        yield ordered[0]
        yield ordered[1 % len(ordered)]
        back = await self._first_connected()
        if back is not None:
            yield back

    async def _first_connected(self) -> Gateway | None:
        waits = {asyncio.ensure_future(g.channel.channel_ready()): g for g in self.all}
        done, pending = await asyncio.wait(
            waits, timeout=self._reconnect_wait_s, return_when=asyncio.FIRST_COMPLETED
        )
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        ready = [waits[task] for task in done if task.exception() is None]
        return ready[0] if ready else None

    async def _send_at(
        self, gateway: Gateway, send: Callable[[pb_grpc.ChatServiceStub], Awaitable[T]]
    ) -> T:
        try:
            reply = await send(gateway.chat)
        except grpc.aio.AioRpcError as error:
            if gateway_lost(error):
                self.lost(gateway)
            raise
        self.answered(gateway)
        return reply

    async def close(self) -> None:
        await asyncio.gather(*(links.aclose() for links in self._links))
        await asyncio.gather(*(gateway.channel.close() for gateway in self.all))


def _last(lost: grpc.aio.AioRpcError | None) -> grpc.aio.AioRpcError:
    """The error of a call's last try (every call has at least two)."""
    if lost is None:
        raise RuntimeError("a call ended without a try")
    return lost
