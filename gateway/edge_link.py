"""EdgeLinkService on the gateway: one stream per edge link carrying the answer streams of
many callers. Each stream opened on it runs as its ChatService call would
(gateway/answer_streams.py) and ends with the status that call would have ended with.

Every stream's news goes into the frame being gathered, written in place; one sender writes
it at most once per frame interval (25 ms), so the streams that had news meanwhile share one
message instead of costing one each (each message costs CPU at both ends, see
docs/decisions.md). The frame interval takes the place of a call's per-stream one (50 ms):
a stream's news waits only for the next frame, never for its own pace as well, which kept
text 20 ms later at the median (bench/results/line_rate_edge_link_paced.txt); a node sends
an answer's text in steps of its own interval anyway, so a lone answer costs the link about
as many messages as its call would. A stream's events up to its first text, and its end, go
at once: they are a reader's time to first token and to the end.

Nothing waits per stream on the link: a reader that falls behind costs its own buffer at the
edge (an answer's events, bounded by its length), never another stream's turn."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

import grpc
import structlog
from grpc_status import rpc_status

from chat.v1 import edge_link_pb2 as pb
from chat.v1 import edge_link_pb2_grpc as pb_grpc
from domain.errors import DomainError, InvalidArgument
from gateway.answer_streams import AnswerStreams, Batch, Caller
from gateway.convert import add_events
from gateway.metrics import GatewayMetrics
from gateway.runs import Delta, RunAbandoned
from infra.bearer import bearer_from_metadata
from infra.status import STATUS_TRAILER, to_rpc_status

OK = pb.EdgeLinkEnd()
# Events a frame carries at most: an answer's event is at most a few KB (a tool call's
# arguments), so a frame stays far under the 64 MiB the edge reads in one message.
MOST_FRAME_EVENTS = 1024


class EdgeLinkServicer(pb_grpc.EdgeLinkServiceServicer):
    def __init__(
        self, streams: AnswerStreams, metrics: GatewayMetrics, frame_interval_s: float
    ) -> None:
        self._streams = streams
        self._metrics = metrics
        self._frame_interval_s = frame_interval_s

    async def EdgeLink(
        self, request_iterator: AsyncIterator[pb.EdgeLinkRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.EdgeLinkResponse]:
        session = EdgeLinkSession(self._streams, self._metrics, self._frame_interval_s)
        async for frame in session.run(request_iterator):
            yield frame


class EdgeLinkSession:
    """One edge's link: its open streams and the frame being gathered for it."""

    def __init__(
        self, streams: AnswerStreams, metrics: GatewayMetrics, frame_interval_s: float
    ) -> None:
        self._streams = streams
        self._metrics = metrics
        self._frame_interval_s = frame_interval_s
        self._loop = asyncio.get_running_loop()
        self._last_frame_at = 0.0
        # Set for news that goes at once (a stream's events up to its first text, a stream's
        # end); other news waits for the frame interval, gathering the news of the streams
        # that get some meanwhile.
        self._urgent = asyncio.Event()
        self._texted: set[int] = set()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._frame = pb.EdgeLinkResponse()
        self._parts: dict[int, pb.EdgeLinkPart] = {}
        self._frame_events = 0
        self._full: collections.deque[pb.EdgeLinkResponse] = collections.deque()
        self._wake = asyncio.Event()

    async def run(
        self, requests: AsyncIterator[pb.EdgeLinkRequest]
    ) -> AsyncIterator[pb.EdgeLinkResponse]:
        reader = asyncio.create_task(self._read(requests))
        reader.add_done_callback(lambda _: self._wake.set())
        try:
            # An empty first frame: the edge knows the link stands before it sends a stream.
            yield pb.EdgeLinkResponse()
            while True:
                await self._wake.wait()
                await self._gather()
                self._wake.clear()
                self._urgent.clear()
                while self._full:
                    self._metrics.edge_link_frames.inc()
                    yield self._full.popleft()
                if self._parts:
                    frame, self._frame, self._parts = self._frame, pb.EdgeLinkResponse(), {}
                    self._frame_events = 0
                    self._metrics.edge_link_frames.inc()
                    self._last_frame_at = self._loop.time()
                    yield frame
                # An edge that closed its side reads on until its streams have ended.
                if reader.done() and not self._tasks and not self._parts:
                    return
        finally:
            reader.cancel()
            tasks = [reader, *self._tasks.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _gather(self) -> None:
        """Waits out the frame interval since the last frame, unless news is urgent."""
        delay_s = self._last_frame_at + self._frame_interval_s - self._loop.time()
        if delay_s <= 0 or self._urgent.is_set():
            return
        timer = self._loop.call_later(delay_s, self._urgent.set)
        try:
            await self._urgent.wait()
        finally:
            timer.cancel()

    async def _read(self, requests: AsyncIterator[pb.EdgeLinkRequest]) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for request in requests:
                kind = request.WhichOneof("kind")
                if kind == "open":
                    self._open(request.open)
                elif kind == "close":
                    task = self._tasks.get(request.close.stream_id)
                    if task is not None:
                        task.cancel()

    def _open(self, request: pb.EdgeLinkOpen) -> None:
        stream_id = request.stream_id
        if stream_id in self._tasks:
            # The open stream keeps its id; only the edge's bookkeeping could have erred.
            structlog.get_logger(component="edge-link").warning(
                "a stream was opened twice on one link", stream_id=stream_id
            )
            return
        caller = Caller(bearer_from_metadata((("authorization", request.authorization),)))
        kind = request.WhichOneof("call")
        if kind == "send_message":
            answer = self._streams.send(caller, request.send_message, interval_s=0.0)
        elif kind == "attach_message":
            answer = self._streams.attach(caller, request.attach_message, interval_s=0.0)
        elif kind == "complete":
            answer = self._streams.complete(caller, request.complete, interval_s=0.0)
        else:
            self._end(stream_id, _domain_end(InvalidArgument("a stream needs a call to open")))
            return
        self._tasks[stream_id] = asyncio.create_task(self._relay(stream_id, answer))
        self._metrics.edge_link_streams.inc()

    async def _relay(self, stream_id: int, answer: AsyncIterator[Batch]) -> None:
        end = OK
        try:
            async with contextlib.aclosing(answer):  # type: ignore[type-var]  # an async generator
                async for batch in answer:
                    self._add(stream_id, batch)
        except asyncio.CancelledError:
            # Closed by the edge, or the link ended: nobody reads this stream's end.
            self._texted.discard(stream_id)
            raise
        except DomainError as error:
            end = _domain_end(error)
        except RunAbandoned as error:
            end = pb.EdgeLinkEnd(code=grpc.StatusCode.UNAVAILABLE.value[0], message=str(error))
        except grpc.aio.AioRpcError as error:
            end = _call_end(error)
        except Exception as error:  # one stream's fault must not end the others on the link
            structlog.get_logger(component="edge-link").exception("a linked stream failed")
            # As grpc.aio ends a call whose servicer raised.
            end = pb.EdgeLinkEnd(code=grpc.StatusCode.UNKNOWN.value[0],
                                 message=f"Unexpected {type(error)}: {error}")  # fmt: skip
        finally:
            self._tasks.pop(stream_id, None)
        self._end(stream_id, end)

    def _part(self, stream_id: int) -> pb.EdgeLinkPart:
        if self._frame_events >= MOST_FRAME_EVENTS:
            # A frame stays well under what the edge reads in one message (a reader far
            # behind, a burst of resumes): the full one waits its turn, news goes in the next.
            self._full.append(self._frame)
            self._frame, self._parts, self._frame_events = pb.EdgeLinkResponse(), {}, 0
        part = self._parts.get(stream_id)
        if part is None:
            part = self._parts[stream_id] = self._frame.parts.add(stream_id=stream_id)
            self._wake.set()
        return part

    def _add(self, stream_id: int, batch: Batch) -> None:
        if stream_id not in self._texted:
            # Up to its first text a stream's news goes at once: that is the reader's time to
            # first token.
            self._urgent.set()
            if _has_text(batch):
                self._texted.add(stream_id)
        part = self._part(stream_id)
        if isinstance(batch, list):
            add_events(part.events, batch)
            self._frame_events += len(batch)
        else:
            part.events.append(batch.event)
            part.events.extend(batch.more)
            self._frame_events += 1 + len(batch.more)

    def _end(self, stream_id: int, end: pb.EdgeLinkEnd) -> None:
        self._part(stream_id).end.CopyFrom(end)
        self._texted.discard(stream_id)
        self._urgent.set()
        self._wake.set()


def _has_text(batch: Batch) -> bool:
    if isinstance(batch, list):
        return any(type(event) is Delta for _, event in batch)
    return batch.event.HasField("delta") or any(e.HasField("delta") for e in batch.more)


def _domain_end(error: DomainError) -> pb.EdgeLinkEnd:
    status = to_rpc_status(error)
    details = dict(status.trailing_metadata).get(STATUS_TRAILER, b"")
    return pb.EdgeLinkEnd(code=status.code.value[0], message=status.details, status=details)


def _call_end(error: grpc.aio.AioRpcError) -> pb.EdgeLinkEnd:
    """Another region's gateway's status, passed on as it gave it."""
    status = rpc_status.from_call(error)
    if status is not None:
        return pb.EdgeLinkEnd(code=status.code, message=status.message,
                              status=status.SerializeToString())  # fmt: skip
    return pb.EdgeLinkEnd(code=error.code().value[0], message=error.details() or "")
