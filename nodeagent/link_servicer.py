"""NodeService.Link's side on the node: one stream per gateway carrying every answer that gateway
runs here. Requests name their answer by request id; frames carry, for each answer with news,
the text since its last update and its finish, or a refusal that concerns that answer alone.

No task waits per answer: each answer's RunningRequest calls back on every token, the link
notes it and wakes its one sender, which reads every noted answer in one pass. The simulated
engine hands out a whole step's tokens at once, so a step becomes one frame; engines whose
answers stream apart still coalesce into whatever came while the frame before was written.
An answer's text waits in the registry (where a re-attach reads it anyway), never in a queue
of the link, so a gateway that reads slowly holds back the link as a whole (HTTP/2 flow
control) and never one answer behind another.

An answer with no news for the vouch interval gets an update that says only `working`, while
the engine passes its health check: a gateway cannot tell an answer queued or batched behind
a long prompt from a node that went quiet, and fails over only silence nobody vouched for. One
timer per link does this, and only while the link has answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
import structlog

from chat.v1 import node_service_pb2 as pb
from domain.errors import AlreadyExists, DomainError, InvalidArgument, NotFound, Unavailable
from infra.status import bounded, grpc_code_of
from nodeagent.convert import finish_to_pb, request_from_pb
from nodeagent.engine import Engine, EngineError
from nodeagent.request_registry import RequestRegistry, RunningRequest

# What a refused request's AnswerError.reason says, by the refusal's kind.
INVALID_START = "INVALID_START"
DRAINING = "DRAINING"
ENGINE_DOWN = "ENGINE_DOWN"
UNKNOWN_ANSWER = "UNKNOWN_ANSWER"
ANSWER_EXISTS = "ANSWER_EXISTS"
EMPTY_REQUEST = "EMPTY_REQUEST"


class Refused(Exception):
    """One request on the link refused: the answer it names gets this as its AnswerError."""

    def __init__(self, request_id: str, reason: str, error: DomainError) -> None:
        super().__init__(error.reason)
        self.request_id = request_id
        self.reason = reason
        self.error = error


@dataclass(frozen=True, slots=True)
class NodeGates:
    """What the node's servicer decides for every start, link or not."""

    registry: RequestRegistry
    engine: Engine
    # Raises InvalidArgument for a start no node would take.
    validate: Callable[[pb.GenerateStart], None]
    accepting: asyncio.Event
    engine_ok: asyncio.Event
    stream_interval_s: float
    # The counts of a start's count_texts, computed beside the answer; None: none asked for.
    count: Callable[[list[str]], asyncio.Task[list[int]] | None]
    # An answer quiet this long is vouched for (kept well under the gateways' stall timeout).
    vouch_interval_s: float = 1.0


class _Followed:
    """One answer on this link: how far it was sent, and when its next chunk may go."""

    __slots__ = ("counting", "hold_until", "interval_s", "listener", "running", "sent",
                 "sent_at", "timer")  # fmt: skip

    def __init__(self, running: RunningRequest, sent: int, interval_s: float, now: float) -> None:
        self.running = running
        self.sent = sent
        self.interval_s = interval_s
        self.hold_until = 0.0
        # When the gateway last heard of this answer: what decides whether it is vouched for.
        self.sent_at = now
        self.counting: asyncio.Task[list[int]] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.listener: Callable[[], None] | None = None


class NodeLink:
    def __init__(self, gates: NodeGates) -> None:
        self._gates = gates
        self._answers: dict[str, _Followed] = {}
        # Answers with news since the last frame, in the order they got it.
        self._noted: dict[str, None] = {}
        # Answers to vouch for in the next frame, unless they have news of their own.
        self._working: set[str] = set()
        self._vouch_timer: asyncio.TimerHandle | None = None
        self._refusals: list[pb.AnswerUpdate] = []
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._ending = False

    def end_when_idle(self) -> None:
        """Ends the link once no answer is left on it (the node drains)."""
        self._ending = True
        self._wake.set()

    async def run(self, requests: AsyncIterator[pb.LinkRequest]) -> AsyncIterator[pb.LinkResponse]:
        reader = asyncio.create_task(self._read(requests))
        reader.add_done_callback(lambda _: self._wake.set())
        try:
            yield pb.LinkResponse()
            while True:
                await self._wake.wait()
                self._wake.clear()
                frame = self._frame()
                if frame.updates:
                    yield frame
                # A caller that closed its side sends nothing more, but reads on: the link ends
                # once its answers have, as a Generate stream does. A draining node ends its
                # links the same way, so its server stops without waiting out its grace.
                if (reader.done() or self._ending) and not self._answers:
                    return
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            for request_id in list(self._answers):
                self._leave(request_id)
            if self._vouch_timer is not None:
                self._vouch_timer.cancel()

    async def _read(self, requests: AsyncIterator[pb.LinkRequest]) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for request in requests:
                try:
                    self._take(request)
                except Refused as refused:
                    self._refuse(refused)

    def _take(self, request: pb.LinkRequest) -> None:
        kind = request.WhichOneof("kind")
        if kind == "start":
            self._start(request.start)
        elif kind == "attach":
            self._attach(request.attach)
        elif kind == "cancel":
            self._on_link(request.cancel.request_id).running.cancel()
        elif kind == "detach":
            self._on_link(request.detach.request_id)
            self._leave(request.detach.request_id)
        else:
            raise Refused("", EMPTY_REQUEST, InvalidArgument("a link request needs a kind"))

    def _start(self, start: pb.GenerateStart) -> None:
        request_id = start.request_id
        gates = self._gates
        try:
            gates.validate(start)
        except InvalidArgument as error:
            raise Refused(request_id, INVALID_START, error) from error
        if request_id in self._answers or gates.registry.get(request_id) is not None:
            raise Refused(request_id, ANSWER_EXISTS, AlreadyExists(
                f"answer {request_id!r} already runs on this node; attach to it"))  # fmt: skip
        if not gates.accepting.is_set():
            raise Refused(request_id, DRAINING, Unavailable(
                "this node is draining; pick another replica"))  # fmt: skip
        if not gates.engine_ok.is_set():
            raise Refused(request_id, ENGINE_DOWN, Unavailable(
                "this node's engine is not answering; pick another replica"))  # fmt: skip
        interval_s = start.stream_interval_ms / 1000 or gates.stream_interval_s
        running = gates.registry.start(request_from_pb(start, interval_s))
        followed = self._follow(request_id, running, 0, interval_s)
        followed.counting = gates.count(list(start.count_texts))

    def _attach(self, attach: pb.GenerateAttach) -> None:
        request_id = attach.request_id
        if request_id in self._answers:
            raise Refused(request_id, ANSWER_EXISTS, AlreadyExists(
                f"answer {request_id!r} is already followed on this link"))  # fmt: skip
        running = self._gates.registry.get(request_id)
        if running is None:
            raise Refused(request_id, UNKNOWN_ANSWER, NotFound(
                f"no running request {request_id!r} on this node"))  # fmt: skip
        sent = running.chunks_through(attach.after_chunk_index)
        self._follow(request_id, running, sent, self._gates.stream_interval_s)
        self._note(request_id)  # what came while no link followed it goes at once

    def _follow(
        self, request_id: str, running: RunningRequest, sent: int, interval_s: float
    ) -> _Followed:
        followed = _Followed(running, sent, interval_s, self._loop.time())
        followed.listener = lambda: self._note(request_id)
        running.listeners.append(followed.listener)
        self._answers[request_id] = followed
        self._gates.registry.follow_started(running)
        if self._vouch_timer is None:
            self._vouch_timer = self._loop.call_later(self._gates.vouch_interval_s, self._vouch)
        return followed

    def _vouch(self) -> None:
        """Notes the answers quiet for half the interval or more as working, while the engine
        passes its health check; runs again while the link has answers."""
        self._vouch_timer = None
        if not self._answers:
            return
        interval_s = self._gates.vouch_interval_s
        if self._gates.engine_ok.is_set():
            quiet_since = self._loop.time() - interval_s / 2
            for request_id, followed in self._answers.items():
                if followed.running.finished is None and followed.sent_at <= quiet_since:
                    self._working.add(request_id)
                    self._noted[request_id] = None
            if self._working:
                self._wake.set()
        self._vouch_timer = self._loop.call_later(interval_s, self._vouch)

    def _on_link(self, request_id: str) -> _Followed:
        followed = self._answers.get(request_id)
        if followed is None:
            raise Refused(request_id, UNKNOWN_ANSWER, NotFound(
                f"no answer {request_id!r} on this link"))  # fmt: skip
        return followed

    def _leave(self, request_id: str) -> None:
        followed = self._answers.pop(request_id)
        self._noted.pop(request_id, None)
        self._working.discard(request_id)
        if followed.listener in followed.running.listeners:
            followed.running.listeners.remove(followed.listener)
        if followed.timer is not None:
            followed.timer.cancel()
        if followed.counting is not None and not followed.counting.done():
            followed.counting.cancel()
        self._gates.registry.follow_ended(followed.running)

    def _note(self, request_id: str) -> None:
        self._noted[request_id] = None
        self._wake.set()

    def _refuse(self, refused: Refused) -> None:
        error = pb.AnswerError(code=grpc_code_of(refused.error).value[0], reason=refused.reason,
                               message=bounded(refused.error.reason))  # fmt: skip
        self._refusals.append(pb.AnswerUpdate(request_id=refused.request_id, error=error))
        self._wake.set()

    def _frame(self) -> pb.LinkResponse:
        frame = pb.LinkResponse(updates=self._refusals)
        self._refusals = []
        noted, self._noted = self._noted, {}
        working, self._working = self._working, set()
        now = self._loop.time()
        for request_id in noted:
            followed = self._answers.get(request_id)
            if followed is None:
                continue
            update = self._update(request_id, followed, now)
            if update is None and request_id in working and followed.running.finished is None:
                update = pb.AnswerUpdate(request_id=request_id, working=True)
            if update is not None:
                followed.sent_at = now
                frame.updates.append(update)
        return frame

    def _update(self, request_id: str, followed: _Followed, now: float) -> pb.AnswerUpdate | None:
        """The answer's news for this frame; None while its chunk is held (a timer notes it
        again when the hold ends) or when there is none."""
        running = followed.running
        finished = running.finished
        pending = running.chunks[followed.sent :]
        if finished is None and followed.hold_until > now:
            if followed.timer is None:
                followed.timer = self._loop.call_at(followed.hold_until, self._unhold, request_id)
            return None
        update = pb.AnswerUpdate(request_id=request_id)
        if pending:
            followed.sent += len(pending)
            pieces = pending
            if followed.interval_s > 0:
                followed.hold_until = now + followed.interval_s
                pieces = ["".join(pending)]
            update.chunk.index = running.token_index(followed.sent)
            update.chunk.text = "".join(pieces)
            if len(pieces) > 1:
                update.chunk.pieces.extend(pieces)
        if finished is not None and followed.sent >= len(running.chunks):
            counting = followed.counting
            if counting is not None and not counting.done():
                # The counts ride in the finish: it goes in the frame after they are known.
                counting.add_done_callback(lambda _: self._note(request_id))
                return update if pending else None
            update.finish.CopyFrom(finish_to_pb(finished, self._gates.engine.model).finish)
            if counting is not None:
                update.finish.text_tokens.extend(_counts_of(counting))
                followed.counting = None
            self._leave(request_id)
        return update if pending or update.HasField("finish") else None

    def _unhold(self, request_id: str) -> None:
        followed = self._answers.get(request_id)
        if followed is not None:
            followed.timer = None
            self._note(request_id)


def _counts_of(counting: asyncio.Task[list[int]]) -> list[int]:
    """The counts, or none when the engine could not count (the gateway keeps its bound)."""
    try:
        return counting.result()
    except EngineError as error:
        structlog.get_logger(component="node-link").warning(
            "texts asked for beside an answer were not counted", reason=str(error)
        )
        return []
