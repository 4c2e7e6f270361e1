"""Writes one answer from the engines into its run: the gRPC stream to a node, a user's stop
passed on as a cancel, and failover to another replica when the serving one is lost."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import structlog

from chat.v1 import common_pb2, node_service_pb2, scheduler_service_pb2
from domain.breaker import Breakers
from domain.context import Prompt
from domain.errors import Unavailable
from domain.repetition import RepetitionGuard
from domain.safety import OutputGuard
from domain.types import Finish, Tier, Usage
from gateway.metrics import GatewayMetrics
from gateway.runs import Delta, MessageRun
from gateway.upstream import Upstreams
from infra.enums import FINISH_FROM_PB, ROLE_TO_PB, TIER_TO_PB


@dataclass(frozen=True, slots=True)
class StreamTimeouts:
    # A node silent this long counts as lost, like one whose stream broke. Before the first
    # token the answer may be queued behind others, so that wait is allowed to be longer.
    first_token_s: float = 120.0
    stall_s: float = 10.0
    # Other replicas tried, one after another, when the serving one is lost mid-answer.
    max_failovers: int = 2


@dataclass(frozen=True, slots=True)
class Plan:
    prompt: Prompt
    pick: scheduler_service_pb2.PickReplicaResponse
    max_answer_tokens: int
    reserved: float
    pool: str
    tier: Tier
    # The window the prompt was fitted into (the tier's, capped by the model's context).
    window_tokens: int = 0


@dataclass(slots=True)
class Answer:
    """An answer as it is being written: its text so far and who is writing it."""

    served_by: scheduler_service_pb2.PickReplicaResponse
    # Everything the engines wrote: what a continuation goes on from.
    pieces: list[str] = field(default_factory=list)
    # How many tokens the pieces hold (a node sends several to a chunk).
    tokens: int = 0
    # What the user was shown (the output check holds text back and never shows flagged
    # text): what is saved.
    shown: list[str] = field(default_factory=list)
    finish: Finish = Finish.ERROR
    usage: Usage = field(default_factory=Usage)
    guard: OutputGuard | None = None
    repetition: RepetitionGuard = field(default_factory=RepetitionGuard)


class _StopRelay:
    """Sends the node one cancel while the answer streams: when the user stops the answer, or
    when the gateway does (a flagged or looping answer). One: a gRPC call takes one write at
    a time."""

    def __init__(self, run: MessageRun, call: grpc.aio.StreamStreamCall) -> None:
        self._call = call
        self._sent: asyncio.Task[None] | None = None
        self._asked = asyncio.create_task(run.stop_requested.wait())
        self._asked.add_done_callback(self._on_stop)

    def _on_stop(self, asked: asyncio.Task[bool]) -> None:
        if not asked.cancelled():
            self.send()

    def send(self) -> asyncio.Task[None]:
        if self._sent is None:
            self._sent = asyncio.create_task(_cancel(self._call))
        return self._sent

    def close(self) -> None:
        self._asked.cancel()


class NodeLost(Exception):
    """The serving replica stopped answering mid-answer: dead, cut off, or silent too long."""


class AnswerWriter:
    def __init__(
        self,
        upstreams: Upstreams,
        timeouts: StreamTimeouts,
        metrics: GatewayMetrics,
        breakers: Breakers,
        new_guard: Callable[[], OutputGuard] | None = None,
    ) -> None:
        self._upstreams = upstreams
        self._timeouts = timeouts
        self._metrics = metrics
        self._breakers = breakers
        # One output check per answer; None shows the engine's text as it comes.
        self._new_guard = new_guard
        self._log = structlog.get_logger(component="answer-writer")

    async def write(self, run: MessageRun, plan: Plan, answer: Answer) -> None:
        """Streams the answer; if the replica is lost mid-answer, another one of the pool
        continues from the text already sent, so the user sees a pause, not an error."""
        lost: list[str] = []
        # An answer taken over from a dead gateway already has text: it is continued, too.
        continued = bool(answer.pieces)
        if answer.guard is None and self._new_guard is not None:
            answer.guard = self._new_guard()
        for _ in range(self._timeouts.max_failovers + 1):
            sent_before = answer.tokens
            try:
                finish, usage = await self._stream(run, plan, answer.served_by, answer)
            except NodeLost as error:
                lost.append(answer.served_by.node_id)
                self._metrics.failovers.labels(plan.pool).inc()
                self._breakers.of(plan.pool).record_failure()
                self._log.warning("replica lost mid-answer; failing over",
                                  node=answer.served_by.node_id, reason=str(error),
                                  message_id=run.message_id)  # fmt: skip
                answer.served_by = await self._failover_pick(run, plan, lost)
                continue
            answer.finish = await self._final_check(run, plan, answer, finish)
            # After a failover or a takeover the continuation re-read the prompt and the partial
            # answer: nothing was cached for the user, who got every chunk of every attempt.
            answer.usage = (
                Usage(plan.prompt.tokens, 0, sent_before + usage.output_tokens)
                if lost or continued
                else usage
            )
            return
        raise Unavailable(f"the answer lost {len(lost)} replicas in a row; try again")

    async def _show(self, run: MessageRun, answer: Answer, text: str) -> None:
        """Passes engine text through the output check; the user gets what it releases."""
        if answer.guard is not None:
            text = answer.guard.feed(text)
        if text:
            answer.shown.append(text)
            await run.append(Delta(text))

    async def _final_check(
        self, run: MessageRun, plan: Plan, answer: Answer, finish: Finish
    ) -> Finish:
        """Reads the whole answer once more before `done`; a violation ends it as refused,
        with the held-back text never shown."""
        guard = answer.guard
        if guard is None:
            return finish
        if not guard.violated:
            rest = guard.finish()
            if rest:
                answer.shown.append(rest)
                await run.append(Delta(rest))
        if not guard.violated:
            return finish
        self._metrics.refusals.labels(plan.tier.value, "safety_output").inc()
        self._log.warning("answer stopped by the output check", message_id=run.message_id,
                          category=guard.verdict.category)  # fmt: skip
        refusal = ("\n\n" if answer.shown else "") + guard.refusal_text
        answer.shown.append(refusal)
        await run.append(Delta(refusal))
        return Finish.REFUSED

    async def _failover_pick(
        self, run: MessageRun, plan: Plan, lost: list[str]
    ) -> scheduler_service_pb2.PickReplicaResponse:
        ask = scheduler_service_pb2.PickReplicaRequest(
            conversation_id=run.conversation_id,
            pool=plan.pool,
            tier=TIER_TO_PB[plan.tier],
            prompt_tokens=plan.prompt.tokens,
            exclude_node_ids=lost,
        )
        return await self._upstreams.pick(ask)

    async def _stream(
        self,
        run: MessageRun,
        plan: Plan,
        pick: scheduler_service_pb2.PickReplicaResponse,
        answer: Answer,
    ) -> tuple[Finish, Usage]:
        pieces = answer.pieces
        start = node_service_pb2.GenerateStart(
            request_id=f"{run.user_id}/{run.message_id}/{uuid.uuid4().hex[:8]}",
            turns=[
                common_pb2.Turn(role=ROLE_TO_PB[t.role], content=t.text) for t in plan.prompt.turns
            ],
            max_tokens=max(1, plan.max_answer_tokens - answer.tokens),
            tier=TIER_TO_PB[plan.tier],
            continue_from="".join(pieces),
            prompt_tokens=plan.prompt.tokens,
            temperature=0.7,
        )
        call = self._upstreams.node(pick.address).Generate()
        stop: _StopRelay | None = None
        loop = asyncio.get_running_loop()
        # One deadline for the whole stream, moved on by each chunk: a node silent this long
        # counts as lost. Before the first token the answer may be queued behind others.
        silence_s = self._timeouts.first_token_s
        last_index = 0
        try:
            async with asyncio.timeout(silence_s) as deadline:
                await call.write(node_service_pb2.GenerateRequest(start=start))
                stop = _StopRelay(run, call)  # after the start: a cancel must come second
                while True:
                    deadline.reschedule(loop.time() + silence_s)
                    response = await call.read()
                    if response is grpc.aio.EOF:
                        raise NodeLost("the stream ended without a finish")
                    if response.HasField("chunk"):
                        silence_s = self._timeouts.stall_s
                        chunk = response.chunk
                        # A chunk's index is its last token's: it may carry several.
                        answer.tokens += max(1, chunk.index - last_index)
                        last_index = chunk.index
                        pieces.append(chunk.text)
                        await self._show(run, answer, chunk.text)
                        if answer.guard is not None and answer.guard.violated:
                            await stop.send()
                            return Finish.REFUSED, Usage(plan.prompt.tokens, 0, answer.tokens)
                        if answer.repetition.feed(chunk.text):
                            # A runaway: it would loop until the cap, holding the slot for nothing.
                            self._metrics.runaways.labels(plan.pool).inc()
                            await stop.send()
                            return Finish.LENGTH, Usage(plan.prompt.tokens, 0, answer.tokens)
                        continue
                    finish = response.finish
                    usage = Usage(
                        finish.usage.input_tokens,
                        finish.usage.cached_tokens,
                        finish.usage.output_tokens,
                    )
                    return FINISH_FROM_PB.get(finish.finish, Finish.ERROR), usage
        except TimeoutError as error:
            raise NodeLost(f"silent for {silence_s} s") from error
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise Unavailable(f"the node refused the request: {error.details()}") from error
            raise NodeLost(error.code().name) from error
        finally:
            if stop is not None:
                stop.close()
            call.cancel()


async def _cancel(call: grpc.aio.StreamStreamCall) -> None:
    """Stops the engine now, not after the node's re-attach grace for a vanished gateway."""
    cancel = node_service_pb2.GenerateCancel()
    with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
        await call.write(node_service_pb2.GenerateRequest(cancel=cancel))
