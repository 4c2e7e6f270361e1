"""Picks over one held SchedulerService.PickReplicas stream to one scheduler.

A unary PickReplica sets up and tears down a call for every message, which here costs about
twice a message on an open stream (docs/decisions.md, "Picks over a held stream"). The stream
is opened on the first pick and again after it breaks; each pick is one message each way,
matched by its pick_id. One reader takes every answer and hands it to the pick waiting for
it. A broken stream fails every pick waiting on it with the stream's error; the caller asks
again by call (gateway/scheduler_client.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import grpc

from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc


class PickStreamLost(Exception):
    """The stream broke, ended or did not answer in time; detail says how. unimplemented:
    the scheduler does not serve PickReplicas (a release older than it), so ask it by call.
    timed_out: it held the pick unanswered for the whole timeout."""

    def __init__(self, detail: str, unimplemented: bool = False, timed_out: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.unimplemented = unimplemented
        self.timed_out = timed_out


class PickStream:
    def __init__(self, stub: pb_grpc.SchedulerServiceStub) -> None:
        self._stub = stub
        self._call: grpc.aio.StreamStreamCall | None = None
        # The open call's requests: gRPC takes one write at a time, so picks queue theirs.
        self._outbox: asyncio.Queue[pb.PickReplicasRequest | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[pb.PickReplicasResponse]] = {}
        self._ids = itertools.count(1)

    async def pick(
        self, request: pb.PickReplicaRequest, timeout_s: float
    ) -> pb.PickReplicasResponse:
        """The scheduler's answer, a pick or a refusal; PickStreamLost when there is none."""
        call = self._open()
        pick_id = next(self._ids)
        answer: asyncio.Future[pb.PickReplicasResponse] = asyncio.get_running_loop().create_future()
        self._waiting[pick_id] = answer
        self._outbox.put_nowait(pb.PickReplicasRequest(pick_id=pick_id, pick=request))
        try:
            async with asyncio.timeout(timeout_s):
                return await answer
        except TimeoutError:
            # A scheduler that holds picks unanswered is as good as gone: start afresh.
            lost = PickStreamLost(f"no answer within {timeout_s:g} s", timed_out=True)
            self._break(call, lost)
            raise lost from None
        finally:
            self._waiting.pop(pick_id, None)

    def _open(self) -> grpc.aio.StreamStreamCall:
        if self._call is not None and self._call.done():
            # Ended before its reader said so: its waiting picks will get no answer.
            self._break(self._call, PickStreamLost("the pick stream had ended"))
        if self._call is None:
            self._outbox = asyncio.Queue()
            self._call = self._stub.PickReplicas(_requests(self._outbox))
            self._reader = asyncio.create_task(self._read(self._call), name="pick-stream")
        return self._call

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        try:
            while True:
                answer = await call.read()
                if answer is grpc.aio.EOF:
                    self._break(call, PickStreamLost("the scheduler ended the pick stream"))
                    return
                waiting = self._waiting.get(answer.pick_id)
                if waiting is not None and not waiting.done():
                    waiting.set_result(answer)
        except grpc.aio.AioRpcError as error:
            self._break(call, _lost(error))

    def _break(self, call: grpc.aio.StreamStreamCall, lost: PickStreamLost) -> None:
        """Fails the picks waiting on call's answers; the next pick opens a new stream."""
        if self._call is None or self._call is not call:
            return
        self._call = None
        self._outbox.put_nowait(None)
        call.cancel()
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(lost)
        self._waiting.clear()

    async def close(self) -> None:
        if self._call is not None:
            self._break(self._call, PickStreamLost("the gateway is closing"))
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


async def _requests(
    outbox: asyncio.Queue[pb.PickReplicasRequest | None],
) -> AsyncIterator[pb.PickReplicasRequest]:
    while (request := await outbox.get()) is not None:
        yield request


def call_detail(error: grpc.aio.AioRpcError) -> str:
    """A failed call or stream in a few words: its code and what the other side said."""
    return f"{error.code().name} {error.details() or ''}".strip()


def _lost(error: grpc.aio.AioRpcError) -> PickStreamLost:
    unimplemented = error.code() == grpc.StatusCode.UNIMPLEMENTED
    return PickStreamLost(call_detail(error), unimplemented=unimplemented)
