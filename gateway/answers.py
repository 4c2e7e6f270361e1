"""Writes one answer from the engines into its run: the stream from a node, a user's stop
passed on as a cancel, and failover to another replica when the serving one is lost."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from domain.answer_options import PLAIN, AnswerOptions
from domain.breaker import Breakers
from domain.context import Prompt
from domain.errors import Unavailable
from domain.repetition import RepetitionGuard
from domain.safety import OutputGuard, OutputMode, Refusals
from domain.safety.text import TOKEN
from domain.types import Finish, Tier, Usage
from gateway.metrics import GatewayMetrics
from gateway.ports import (
    Chunk,
    GenerateSpec,
    Generation,
    Nodes,
    ReplicaPick,
    ReplicaPicker,
    StreamBroken,
    Working,
)
from gateway.runs import Delta, MessageRun, Retract

# Sampling for chat answers.
ANSWER_TEMPERATURE = 0.7


@dataclass(frozen=True, slots=True)
class StreamTimeouts:
    # A node silent this long counts as lost, like one whose stream broke. Before the first
    # token the answer may be queued behind others, so that wait is allowed to be longer.
    first_token_s: float = 120.0
    stall_s: float = 10.0
    # Other replicas tried, one after another, when the serving one is lost mid-answer.
    max_failovers: int = 2
    # What a held-back answer (the output check's hold-back mode) asks its node for: the least
    # time between two chunks after the first; 0: the node's own interval. The user sees such
    # an answer only where a check releases it, every output_check_every_tokens, so chunks
    # in between cost the node and the gateway a gRPC message each and show nothing sooner.
    held_chunk_interval_s: float = 0.0
    # How long text may stay away while the node vouches for the answer (nodeagent/
    # link_servicer.py): queued, or behind a long prompt in the same batch, it is waiting, not
    # lost; past this an engine that passes its health check yet writes nothing counts as lost.
    vouched_stall_s: float = 120.0


@dataclass(frozen=True, slots=True)
class AnswerPlan:
    """How one answer is to be written: its prompt, the replica picked, its cap and the
    tokens reserved for it (gateway/planner.py makes it)."""

    prompt: Prompt
    pick: ReplicaPick
    max_answer_tokens: int
    reserved: float
    pool: str
    tier: Tier
    # The window the prompt was fitted into (the tier's, capped by the model's context).
    window_tokens: int = 0
    # How the output check shows text: the tier's choice for messages; completions always
    # hold back, since their clients cannot withdraw text (docs/decisions.md, "Retract mode").
    output_mode: OutputMode = OutputMode.HOLDBACK
    # Told to the user in the meta event (a conversation started away from a home region that
    # is out, without its history); not kept across a takeover.
    region_notice: str = ""
    # A completion's sampling, JSON answer and tools (messages keep the defaults).
    options: AnswerOptions = PLAIN
    # The model version that serves it, and that version's sampling.
    version: str = ""
    temperature: float = ANSWER_TEMPERATURE
    # Why a smaller pool than the router chose serves it ("daily_budget"), or ''.
    downgraded: str = ""
    # The daily allowance's outcome: "within", "over", or '' where the tier has none.
    budget: str = ""
    # The engine model the version asks for ('' for whatever the pool serves).
    version_model: str = ""
    # The user's slice of the rollout (the meta event says it).
    slice: str = ""
    # Why `pool` is not the one the message asked for (domain/pool_reason.py), or ''. The
    # planner sets its own move (fallback, ladder); the pipeline then the whole story's.
    pool_reason: str = ""
    # The new message's count in the prompt is an upper bound (its bytes): the node counts it
    # while it answers (gateway/planner.py).
    message_bound: bool = False


@dataclass(slots=True)
class Answer:
    """An answer as it is being written: its text so far and who is writing it."""

    served_by: ReplicaPick
    # Everything the engines wrote: what a continuation goes on from.
    pieces: list[str] = field(default_factory=list)
    # How many tokens the pieces hold (a node sends several to a chunk).
    tokens: int = 0
    # What the user was shown (the output check holds text back and never shows flagged
    # text, or withdraws it in retract mode): what is saved.
    shown: list[str] = field(default_factory=list)
    # The output check withdrew what was shown: the answer is refused, whoever writes it on.
    withdrawn: bool = False
    # How many times it moved to another replica mid-answer.
    failovers: int = 0
    finish: Finish = Finish.ERROR
    usage: Usage = field(default_factory=Usage)
    # The new message's exact token count, when the node counted it beside the answer (a plan
    # on a bound); 0: not known, the stored bound stands.
    message_tokens: int = 0
    guard: OutputGuard | None = None
    repetition: RepetitionGuard = field(default_factory=RepetitionGuard)


class _StopRelay:
    """Cancels the engine's work when the user stops the answer while it streams."""

    def __init__(self, run: MessageRun, generation: Generation) -> None:
        self._asked = asyncio.create_task(run.stop_requested.wait())
        self._asked.add_done_callback(lambda asked: asked.cancelled() or generation.cancel())

    def close(self) -> None:
        self._asked.cancel()


class NodeLost(Exception):
    """The serving replica stopped answering mid-answer: dead, cut off, or silent too long."""


class AnswerWriter:
    def __init__(
        self,
        scheduler: ReplicaPicker,
        nodes: Nodes,
        timeouts: StreamTimeouts,
        metrics: GatewayMetrics,
        breakers: Breakers,
        new_guard: Callable[[OutputMode], OutputGuard] | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._nodes = nodes
        self._timeouts = timeouts
        self._metrics = metrics
        self._breakers = breakers
        # One output check per answer; None shows the engine's text as it comes.
        self._new_guard = new_guard
        self._log = structlog.get_logger(component="answer-writer")

    async def write(self, run: MessageRun, plan: AnswerPlan, answer: Answer) -> None:
        """Streams the answer; if the replica is lost mid-answer, another one of the pool
        continues from the text already sent, so the user sees a pause, not an error."""
        lost: list[str] = []
        # An answer taken over from a dead gateway already has text: it is continued, too.
        continued = bool(answer.pieces)
        if continued:
            await self._count_taken_over(answer)
        if answer.guard is None and self._new_guard is not None:
            answer.guard = self._new_guard(plan.output_mode)
        if answer.withdrawn:
            # Taken over after the check withdrew the text: only the refusal is left to show.
            await self._show_refusal(run, answer)
            answer.finish = Finish.REFUSED
            answer.usage = Usage(plan.prompt.tokens, 0, answer.tokens)
            return
        for _ in range(self._timeouts.max_failovers + 1):
            sent_before = answer.tokens
            try:
                finish, usage = await self._stream(run, plan, answer.served_by, answer)
            except NodeLost as error:
                self._refuse_broken_document(run, plan, answer, error)
                lost.append(answer.served_by.node_id)
                answer.failovers += 1
                self._metrics.failovers.labels(plan.tier.value, plan.pool).inc()
                if plan.version:
                    self._metrics.version_failovers.labels(plan.version, plan.tier.value).inc()
                self._breakers.of(plan.pool).record_failure(answer.served_by.node_id)
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

    def _refuse_broken_document(
        self, run: MessageRun, plan: AnswerPlan, answer: Answer, error: NodeLost
    ) -> None:
        """A JSON answer or tool calls are decoded under a grammar that starts at the answer's
        first character, and an engine cannot resume it mid-document (llama.cpp has no way
        to), so a continuation could write a broken document. Lost before its first token,
        the answer simply starts again elsewhere; lost later, it fails with this error."""
        if not plan.options.constrained or not answer.pieces:
            return
        self._log.warning("replica lost mid-document; not continued", message_id=run.message_id,
                          node=answer.served_by.node_id, reason=str(error))  # fmt: skip
        raise Unavailable(
            "the replica writing this JSON answer was lost mid-document, and a JSON answer "
            "cannot be continued on another replica; send the request again"
        )

    async def _count_taken_over(self, answer: Answer) -> None:
        """The log a takeover reads keeps text, not token counts, and a delta may hold many
        tokens: the serving model counts them, so that the continuation keeps to the cap and
        the usage is right."""
        text = "".join(answer.pieces)
        try:
            served_by = answer.served_by
            [answer.tokens] = await self._nodes.tokenize(served_by.address, [text], served_by.model)
        except Unavailable:
            # The node is gone too (a failover follows): an estimate, not a count of deltas.
            answer.tokens = len(TOKEN.findall(text))

    async def _show(self, run: MessageRun, answer: Answer, text: str) -> None:
        """Passes engine text through the output check; the user gets what it releases."""
        if answer.guard is not None:
            text = answer.guard.feed(text)
        if text:
            # Shown (and so saved) once appended: text the log did not take reached nobody.
            await run.append(Delta(text))
            answer.shown.append(text)

    async def _take(
        self, run: MessageRun, plan: AnswerPlan, answer: Answer, piece: str
    ) -> Finish | None:
        """Shows one piece of engine text; the finish when the answer must stop here."""
        await self._show(run, answer, piece)
        if answer.guard is not None and answer.guard.violated:
            return Finish.REFUSED
        if answer.repetition.feed(piece):
            # A runaway: it would loop until the cap, holding the slot for nothing.
            self._metrics.runaways.labels(plan.pool).inc()
            return Finish.LENGTH
        return None

    async def _final_check(
        self, run: MessageRun, plan: AnswerPlan, answer: Answer, finish: Finish
    ) -> Finish:
        """Reads the whole answer once more before `done`; a violation ends it as refused,
        with the held-back text never shown (or, in retract mode, what was shown withdrawn)."""
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
                          category=guard.verdict.category, mode=guard.mode.value)  # fmt: skip
        if guard.mode is OutputMode.RETRACT:
            # The flagged text was shown: withdraw all of it, so what stays on screen and what
            # is saved is the refusal alone.
            await self._withdraw(run, plan, answer)
            await self._show_refusal(run, answer)
            return Finish.REFUSED
        # A JSON or tool answer's refusal goes apart from the document (OpenAI's `refusal`).
        apart = plan.options.constrained
        refusal = ("\n\n" if answer.shown and not apart else "") + guard.refusal_text
        answer.shown.append(refusal)
        await run.append(Delta(refusal, refusal=apart))
        return Finish.REFUSED

    async def _withdraw(self, run: MessageRun, plan: AnswerPlan, answer: Answer) -> None:
        answer.withdrawn = True
        chars = sum(len(piece) for piece in answer.shown)
        answer.shown.clear()
        if chars:
            self._metrics.retracted_chars.labels(plan.tier.value).observe(chars)
            await run.append(Retract(chars))

    async def _show_refusal(self, run: MessageRun, answer: Answer) -> None:
        refusal = answer.guard.refusal_text if answer.guard is not None else Refusals().output
        if "".join(answer.shown) != refusal:  # a takeover may find it shown already
            answer.shown.append(refusal)
            await run.append(Delta(refusal))

    async def _failover_pick(
        self, run: MessageRun, plan: AnswerPlan, lost: list[str]
    ) -> ReplicaPick:
        return await self._scheduler.pick(run.conversation_id, plan.pool, plan.tier,
                                          plan.prompt.tokens, exclude_node_ids=lost,
                                          model=plan.version_model)  # fmt: skip

    async def _stream(
        self, run: MessageRun, plan: AnswerPlan, pick: ReplicaPick, answer: Answer
    ) -> tuple[Finish, Usage]:
        spec = GenerateSpec(
            request_id=f"{run.user_id}/{run.message_id}/{uuid.uuid4().hex[:8]}",
            turns=plan.prompt.turns,
            max_tokens=plan.max_answer_tokens - answer.tokens,
            tier=plan.tier,
            temperature=answer_temperature(plan),
            prompt_tokens=plan.prompt.tokens,
            continue_from="".join(answer.pieces),
            options=plan.options,
            count_texts=(plan.prompt.turns[-1].text,) if plan.message_bound else (),
            stream_interval_s=self._chunk_interval_s(answer),
        )
        generation: Generation | None = None
        stop: _StopRelay | None = None
        loop = asyncio.get_running_loop()
        # One deadline for the whole stream, moved on by each chunk and each vouch: a node
        # silent this long counts as lost. Before the first token the answer may be queued
        # behind others. A vouch moves it on by the stall timeout, never past text_due.
        timeouts = self._timeouts
        silence_s = timeouts.first_token_s
        text_due = loop.time() + silence_s
        last_index = 0
        try:
            async with asyncio.timeout(silence_s) as deadline:
                generation = await self._nodes.generate(pick.address, spec)
                stop = _StopRelay(run, generation)  # after the start: a cancel must come second
                while True:
                    deadline.reschedule(min(loop.time() + silence_s, text_due))
                    item = await generation.read()
                    if type(item) is Working:
                        silence_s = timeouts.stall_s
                        continue
                    if type(item) is not Chunk:
                        if item.engine_lost:
                            raise NodeLost("its engine was lost mid-answer")
                        if item.tool_calls:
                            await run.append(Delta("", tool_calls=item.tool_calls))
                        if item.text_tokens:
                            answer.message_tokens = item.text_tokens[0]
                        return item.finish, item.usage
                    silence_s = timeouts.stall_s
                    text_due = loop.time() + timeouts.vouched_stall_s
                    # A chunk's index is its last token's: it may carry several.
                    answer.tokens += max(1, item.index - last_index)
                    last_index = item.index
                    answer.pieces.append(item.text)
                    for piece in item.pieces or (item.text,):
                        ending = await self._take(run, plan, answer, piece)
                        if ending is not None:
                            await generation.cancel()
                            return ending, Usage(plan.prompt.tokens, 0, answer.tokens)
        except TimeoutError as error:
            if loop.time() >= text_due:
                raise NodeLost(f"vouched for, but wrote nothing in {timeouts.vouched_stall_s} s"
                               if last_index else f"no first token in {timeouts.first_token_s} s"
                               ) from error  # fmt: skip
            raise NodeLost(f"silent for {silence_s} s") from error
        except StreamBroken as error:
            raise NodeLost(str(error)) from error
        finally:
            if stop is not None:
                stop.close()
            if generation is not None:
                generation.close()

    def _chunk_interval_s(self, answer: Answer) -> float:
        held = answer.guard is not None and answer.guard.holds_back
        return self._timeouts.held_chunk_interval_s if held else 0.0


def answer_temperature(plan: AnswerPlan) -> float:
    """A completion's own temperature, else the serving version's."""
    chosen = plan.options.temperature
    return plan.temperature if chosen is None else chosen
