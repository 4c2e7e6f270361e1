"""The edge's side of EdgeLinkService: the answer streams this edge reads from one gateway go
over one long-lived stream (or a few, see GatewayLinks) instead of a call each, so a frame
brings the news of every answer that had some.

A stream on a link is read exactly as the call it stands for (LinkedCall): its messages have
`event` and `more`, cancel() ends it, and it ends with the same grpc.aio.AioRpcError the call
would have raised, status details included, so the relay and the APIs above it need not know
which carried it. A link that breaks ends each of its streams as a lost call (UNAVAILABLE with
no status of the gateway's): the relay re-attaches through another gateway, as it does for a
call whose gateway went away. A gateway that does not serve the link (an older release) gets
each stream as its own call, and is asked again after a while.

Each stream's events wait in its own buffer until its reader takes them: a slow reader never
holds up the others on its link, and costs at most its answer's own events."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
import structlog

from chat.v1 import chat_service_pb2 as chat_pb
from chat.v1 import chat_service_pb2_grpc as chat_grpc
from chat.v1 import edge_link_pb2 as pb
from chat.v1 import edge_link_pb2_grpc as pb_grpc
from infra.status import STATUS_TRAILER

_CODES = {code.value[0]: code for code in grpc.StatusCode}
# Batches waiting for a stream's reader past which its events are copied out of their frames.
BEHIND_BATCHES = 8


class Batch:
    """One stream's events from one frame, shaped as a stream call's message."""

    __slots__ = ("event", "more")

    def __init__(self, events: Sequence[Any]) -> None:
        self.event = events[0]
        self.more = events[1:]


class Link:
    """One EdgeLinkService.EdgeLink stream and the streams open on it."""

    def __init__(self, stub: pb_grpc.EdgeLinkServiceStub, clock: Callable[[], float]) -> None:
        self._outbox: asyncio.Queue[pb.EdgeLinkRequest | None] = asyncio.Queue()
        self._call = stub.EdgeLink(_requests(self._outbox))
        self._streams: dict[int, LinkedCall] = {}
        self._ids = itertools.count(1)
        self.born = clock()
        self.closing = False
        self.broken = False
        # Done once the gateway's first (empty) frame came, or with the error that ended the
        # link before it.
        self.standing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read())

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def open(self, call: LinkedCall, request: pb.EdgeLinkOpen) -> int:
        stream_id = next(self._ids)
        request.stream_id = stream_id
        self._streams[stream_id] = call
        self._outbox.put_nowait(pb.EdgeLinkRequest(open=request))
        return stream_id

    def close_stream(self, stream_id: int) -> None:
        if self._streams.pop(stream_id, None) is not None and not self.broken:
            self._outbox.put_nowait(pb.EdgeLinkRequest(close=pb.EdgeLinkClose(stream_id=stream_id)))
            self._close_when_idle()

    def retire(self) -> None:
        """Takes no more streams; the link ends once those on it have."""
        self.closing = True
        self._close_when_idle()

    def _close_when_idle(self) -> None:
        if self.closing and not self._streams:
            self._outbox.put_nowait(None)  # our side done: the gateway ends the link

    async def aclose(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        self._call.cancel()

    async def _read(self) -> None:
        lost: grpc.aio.AioRpcError | None = None
        try:
            async for frame in self._call:
                if not self.standing.done():
                    self.standing.set_result(None)
                for part in frame.parts:
                    self._deliver(part)
        except grpc.aio.AioRpcError as error:
            lost = error
        except asyncio.CancelledError:
            lost = _lost("the edge closed its link to the gateway")
            raise
        finally:
            self.broken = True
            if lost is None:
                lost = _lost("the gateway ended the link")
            if not self.standing.done():
                self.standing.set_exception(lost)
                self.standing.exception()  # whoever waits on it raises it; none need to
            streams, self._streams = self._streams, {}
            if streams:
                structlog.get_logger(component="gateway-link").warning(
                    "a link to a gateway broke; its streams carry on elsewhere",
                    streams=len(streams),
                    reason=lost.details(),
                )
            for call in streams.values():
                call.ended(_lost(f"the link to the gateway broke: {lost.details()}"))

    def _deliver(self, part: pb.EdgeLinkPart) -> None:
        call = self._streams.get(part.stream_id)
        if call is None:
            return  # closed here while its news was on the way
        if part.events:
            call.deliver(part.events)
        if part.HasField("end"):
            del self._streams[part.stream_id]
            call.ended(_error_of(part.end))
            self._close_when_idle()


class GatewayLinks:
    """The links to one gateway address. New streams go on the link with the fewest; a link
    takes none once it is max_age_s old, so that, where the address names several gateways
    (round robin over a DNS name), links move onto gateways that were added, and a restarted
    gateway is linked to again."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        links: int = 1,
        max_age_s: float = 60.0,
        retry_unsupported_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if links < 1:
            raise ValueError("a gateway needs at least one link")
        self._stub = pb_grpc.EdgeLinkServiceStub(channel)
        self._most = links
        self._max_age_s = max_age_s
        self._retry_unsupported_s = retry_unsupported_s
        self._clock = clock
        self._links: list[Link] = []
        self._unsupported_until = 0.0

    async def link(self) -> Link | None:
        """The link for a new stream, standing; None while the gateway serves no link.
        Raises the lost error when the link could not be opened."""
        now = self._clock()
        if now < self._unsupported_until:
            return None
        self._links = [link for link in self._links if not link.broken]
        for link in self._links:
            if now - link.born >= self._max_age_s and not link.closing:
                link.retire()
        taking = [link for link in self._links if not link.closing]
        if len(taking) < self._most:
            fresh = Link(self._stub, self._clock)
            self._links.append(fresh)
            taking.append(fresh)
        chosen = min(taking, key=lambda link: link.open_streams)
        try:
            await asyncio.shield(chosen.standing)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._unsupported_until = now + self._retry_unsupported_s
                return None
            raise _lost(f"could not link to the gateway: {error.details()}") from error
        return chosen

    async def aclose(self) -> None:
        links, self._links = self._links, []
        await asyncio.gather(*(link.aclose() for link in links))


class LinkedCall:
    """One answer stream on a link, read as the call it stands for; made at once (as a call
    is), opened on the link when first read. On a gateway without the link it is that call."""

    def __init__(self, links: GatewayLinks, request: pb.EdgeLinkOpen,
                 as_call: Callable[[], grpc.aio.UnaryStreamCall]) -> None:  # fmt: skip
        self._links = links
        self._request = request
        self._as_call = as_call
        self._link: Link | None = None
        self._stream_id = 0
        self._call: grpc.aio.UnaryStreamCall | None = None
        self._responses: AsyncIterator[Any] | None = None
        self._batches: collections.deque[Batch] = collections.deque()
        self._news = asyncio.Event()
        self._begun = False
        self._done = False
        self._error: grpc.aio.AioRpcError | None = None

    def __aiter__(self) -> LinkedCall:
        return self

    async def __anext__(self) -> Any:
        if not self._begun:
            self._begun = True
            await self._begin()
        if self._responses is not None:
            return await anext(self._responses)
        while not self._batches:
            if self._done:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._news.clear()
            await self._news.wait()
        return self._batches.popleft()

    async def _begin(self) -> None:
        if self._done:
            return  # cancelled before it was read
        try:
            link = await self._links.link()
        except grpc.aio.AioRpcError as error:
            self.ended(error)
            return
        if link is None:
            self._call = self._as_call()
            self._responses = aiter(self._call)
            return
        self._link = link
        self._stream_id = link.open(self, self._request)

    def deliver(self, events: Sequence[chat_pb.ChatEvent]) -> None:
        if len(self._batches) >= BEHIND_BATCHES:
            # A reader this far behind would keep whole frames (every stream's news) alive
            # for its few events: its own are copied out, so it holds only what it owes.
            events = [_copied(event) for event in events]
        self._batches.append(Batch(events))
        self._news.set()

    def ended(self, error: grpc.aio.AioRpcError | None) -> None:
        self._done = True
        self._error = error
        self._news.set()

    def cancel(self) -> bool:
        if self._call is not None:
            return bool(self._call.cancel())
        if self._done:
            return False
        self.ended(grpc.aio.AioRpcError(grpc.StatusCode.CANCELLED, grpc.aio.Metadata(),
                                        grpc.aio.Metadata(), details="cancelled"))  # fmt: skip
        if self._link is not None:
            self._link.close_stream(self._stream_id)
        return True


class LinkedChatStub(chat_grpc.ChatServiceStub):
    """ChatService at one gateway, its answer streams (SendMessage, AttachMessage, Complete)
    carried by the gateway's links; every other call as it is."""

    def __init__(self, channel: grpc.aio.Channel, links: GatewayLinks) -> None:
        super().__init__(channel)
        self.SendMessage = _Linked(links, "send_message", self.SendMessage)
        self.AttachMessage = _Linked(links, "attach_message", self.AttachMessage)
        self.Complete = _Linked(links, "complete", self.Complete)


class _Linked:
    """A stream method of ChatService, called as gRPC's own is, answered on a link."""

    def __init__(self, links: GatewayLinks, field: str, as_call: Any) -> None:
        self._links = links
        self._field = field
        self._as_call = as_call

    def __call__(
        self, request: Any, metadata: Sequence[tuple[str, str]] = (), **kwargs: Any
    ) -> LinkedCall | grpc.aio.UnaryStreamCall:
        if kwargs:  # a deadline or call options: what only a call of its own carries
            return self._as_call(request, metadata=metadata, **kwargs)
        authorization = next((value for key, value in metadata if key == "authorization"), "")
        opening = pb.EdgeLinkOpen(authorization=authorization)
        getattr(opening, self._field).CopyFrom(request)
        return LinkedCall(self._links, opening,
                          lambda: self._as_call(request, metadata=metadata, **kwargs))  # fmt: skip


def _copied(event: chat_pb.ChatEvent) -> chat_pb.ChatEvent:
    copy = chat_pb.ChatEvent()
    copy.CopyFrom(event)
    return copy


def _error_of(end: pb.EdgeLinkEnd) -> grpc.aio.AioRpcError | None:
    if end.code == 0:
        return None
    code = _CODES.get(end.code, grpc.StatusCode.UNKNOWN)
    trailers = grpc.aio.Metadata(*([(STATUS_TRAILER, end.status)] if end.status else []))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, details=end.message)


def _lost(why: str) -> grpc.aio.AioRpcError:
    """A stream whose gateway went away, as a call's that lost its connection reads."""
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                grpc.aio.Metadata(), details=why)  # fmt: skip


async def _requests(
    outbox: asyncio.Queue[pb.EdgeLinkRequest | None],
) -> AsyncIterator[pb.EdgeLinkRequest]:
    while (request := await outbox.get()) is not None:
        yield request
