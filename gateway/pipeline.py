"""The chat pipeline: one user message in, one streamed answer out.

Order (`send`, `_begin`, `_run`): validate ids and content (nothing stored yet); idempotency
(a run held here or still starting, else with shared runs the message id claimed in Redis);
an answer already stored is replayed; the user's open-stream cap; the conversation and the
message answered; the input safety check; the context parts (summary, pinned constraints,
the branch's turns); the router; the planner (gateway/planner.py: the pick, whose ladder rung
decides pool and answer cap, falling back large -> small; token counts from the picked node;
the context that fits; the bucket's reservation); save the user turn; then generate in a task
of its own that keeps writing the answer when the client has gone, saves it, settles the
bucket, ends the run and asks the compactor to consider the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import re
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from domain import limiter
from domain.breaker import Breakers
from domain.errors import (
    Conflict,
    InvalidArgument,
    MessageTooLarge,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from domain.router import RouteDecision
from domain.safety import Verdict
from domain.scores import tokens_per_s
from domain.types import Finish, Role, Usage, User
from gateway import completions
from gateway.answers import Answer, AnswerPlan, AnswerWriter
from gateway.buckets import Buckets
from gateway.compactor import Compactor
from gateway.completions import CompleteRequest
from gateway.daily_budget import DailyBudget
from gateway.metrics import GatewayMetrics
from gateway.node_client import NodeClient
from gateway.planner import PipelinePolicy, Planner, PoolsDown
from gateway.policies import MessagePolicies
from gateway.run_sharing import Claim, FollowedRun, LocalRuns, RunSharing
from gateway.runs import (
    Delta,
    Done,
    Event,
    Failed,
    FailureCode,
    MessageRun,
    Meta,
    RunRegistry,
)
from gateway.scheduler_client import SchedulerClient
from gateway.serving_choice import ServingChooser
from gateway.shared_runs import OwnershipLost
from gateway.stored_context import ContextParts, branch, context_parts
from gateway.versions import VersionBook
from store.base import Store
from store.records import ConversationRecord, MessageRecord, NewMessage, ServingRecord

# The last hop of the fallback chain: what the user reads when no pool can answer.
BUSY_MODEL = "busy"
# What the meta event names when the input check answered instead of a model.
SAFETY_MODEL = "safety"
BUSY_TEXT = (
    "Sorry, the assistant is overloaded right now and could not answer. "
    "Please send your message again in a minute."
)
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ANSWER_SUFFIX = ".answer"
# A message may follow a user's message or an answer, whose id is the question's plus a suffix.
PARENT_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}(\.answer)?$")


@dataclass(frozen=True, slots=True)
class SendRequest:
    conversation_id: str
    message_id: str
    parent_id: str
    content: str
    pool: str | None  # None: the router decides
    # The meta event's notice about the region serving (gateway/regions.py).
    region_notice: str = ""
    # This message's own system prompt (the Responses API's instructions); "": the platform's.
    instructions: str = ""
    # The client cannot withdraw shown text: hold-back whatever the tier's output mode.
    hold_back: bool = False
    # At most this many answer tokens, below the tier's cap; 0: the tier's cap.
    max_tokens: int = 0


def check_id(name: str, value: str) -> None:
    if not ID_PATTERN.match(value):
        raise InvalidArgument(f"{name} must be 1-64 characters of A-Z, a-z, 0-9, '_' or '-'")


class ChatPipeline:
    def __init__(
        self,
        store: Store,
        scheduler: SchedulerClient,
        nodes: NodeClient,
        runs: RunRegistry,
        buckets: Buckets,
        policy: PipelinePolicy,
        clock: Callable[[], float],
        sharing: RunSharing | None = None,
        metrics: GatewayMetrics | None = None,
        policies: MessagePolicies | None = None,
        compactor: Compactor | None = None,
        region: str = "",
        *,
        versions: VersionBook,
        budget: DailyBudget,
    ) -> None:
        self._versions = versions
        self._budget = budget
        self._serving = ServingChooser(versions, budget)
        # This gateway's region, named in each meta event and stored turn ('' with one).
        self._region = region
        # None: conversations are never compacted; the oldest turns simply drop out.
        self._compactor = compactor
        self._metrics = metrics or GatewayMetrics(CollectorRegistry())
        self._policies = policies or MessagePolicies()
        self._store = store
        self._sharing = sharing or LocalRuns()
        breakers = Breakers(policy.breaker, clock)
        self._planner = Planner(scheduler, nodes, buckets, policy, breakers, self._metrics)
        self._writer = AnswerWriter(scheduler, nodes, policy.streaming, self._metrics, breakers,
                                    self._policies.new_output_guard)  # fmt: skip
        self._breakers = breakers
        self._runs = runs
        self._buckets = buckets
        self._policy = policy
        self._tasks: set[asyncio.Task[None]] = set()
        self._starting: dict[tuple[str, str], asyncio.Future[MessageRun | FollowedRun]] = {}
        self._log = structlog.get_logger(component="pipeline")

    # Sending ------------------------------------------------------------------------------------

    async def send(self, user: User, request: SendRequest) -> MessageRun | FollowedRun:
        self._validate(request)
        fingerprint = _fingerprint(request)
        key = (user.user_id, request.message_id)
        existing = self._runs.get(*key)
        if existing is None and key in self._starting:
            # A retry raced the first attempt: share its outcome, run or error alike.
            existing = await asyncio.shield(self._starting[key])
        if existing is not None:
            if existing.fingerprint != fingerprint:
                raise Conflict(f"message id {request.message_id!r} was used for another message")
            return existing
        starting: asyncio.Future[MessageRun | FollowedRun] = (
            asyncio.get_running_loop().create_future()
        )
        self._starting[key] = starting
        try:
            run = await self._begin(user, request, fingerprint)
        except BaseException as error:
            starting.set_exception(error)
            starting.exception()  # retrieved here, so an unshared failure is not logged as lost
            raise
        else:
            starting.set_result(run)
            return run
        finally:
            del self._starting[key]

    async def _begin(
        self, user: User, request: SendRequest, fingerprint: str
    ) -> MessageRun | FollowedRun:
        claim = await self._sharing.claim(user.user_id, request.message_id, fingerprint,
                                          request.conversation_id, self.resume)  # fmt: skip
        if claim.held is not None:
            if claim.held.fingerprint != fingerprint:
                raise Conflict(f"message id {request.message_id!r} was used for another message")
            return claim.held
        try:
            run = await self._replay_stored(user, request, fingerprint) or await self._run(
                user, request, fingerprint, claim
            )
        except BaseException:
            await claim.release()
            raise
        if run.sink is None:
            # Answered without the model (from the store, or a composed "busy" answer):
            # nothing for other gateways to follow, and a retry may yet run it for real.
            await claim.release()
        return run

    async def _run(
        self, user: User, request: SendRequest, fingerprint: str, claim: Claim
    ) -> MessageRun:
        arrived = time.monotonic()
        self._check_open_streams(user)
        conversation, parent = await self._parent_of(user, request)
        unsafe = self._policies.check_input(request.content)
        if unsafe is None and request.instructions:
            # The caller's own system prompt reaches the model too: blocked text must not.
            unsafe = self._policies.check_input(request.instructions)
        if unsafe is not None:
            return await self._refuse_input(user, request, fingerprint, parent, *unsafe)
        parts = await self._context_parts(user, conversation, parent)
        route = self._route(user, request, conversation)
        kept = (
            ""
            if conversation is None
            else await self._store.conversation_version(user.user_id, request.conversation_id)
        )
        chosen = await self._serving.choose(user, route.pool, kept)
        version = chosen.version
        try:
            plan = await self._planner.plan(user, request.conversation_id, request.content, parts,
                                            chosen.pool, chosen.system_prompt(request.instructions),
                                            version.model,
                                            counted_once=not request.instructions)  # fmt: skip
        except PoolsDown as down:
            return await self._busy_answer(user, request, fingerprint, down, version.name)
        plan = chosen.applied(dataclasses.replace(plan, region_notice=request.region_notice))
        plan = chosen.explained(plan, request.pool, route)
        if not request.hold_back:
            plan = dataclasses.replace(plan, output_mode=self._policies.output_mode(user.tier))
        if request.max_tokens:
            cap = completions.answer_cap(plan.max_answer_tokens, request.max_tokens)
            plan = dataclasses.replace(plan, max_answer_tokens=cap)
        run = MessageRun(user.user_id, request.conversation_id, request.message_id, fingerprint,
                         started_at=arrived)  # fmt: skip
        self._runs.add(run)
        try:
            user_turn = await self._store.add_message(
                user.user_id,
                request.conversation_id,
                NewMessage(
                    message_id=request.message_id,
                    role=Role.USER,
                    content=request.content,
                    tokens=plan.prompt.turns[-1].tokens,
                    parent_seq=parent.seq if parent else None,
                    model=plan.pick.model,
                    pool=route.conversation_pool,
                    region=self._region,
                ),
                title=request.content[:80],
            )
            served = ServingRecord(request.message_id, request.conversation_id, version.name,
                                   plan.slice, route.pool, plan.budget, plan.pool)  # fmt: skip
            await self._store.record_serving(user.user_id, served)
        except BaseException:
            self._runs.discard(run)
            await self._buckets.settle(user.user_id, user.tier, plan.reserved, 0.0)
            raise
        await claim.publish(run, plan, user_turn.seq)
        self._start(run, self._drive(run, user, plan, answer_parent_seq=user_turn.seq))
        return run

    def _route(
        self, user: User, request: SendRequest, current: ConversationRecord | None
    ) -> RouteDecision:
        route = self._policies.route(request.content, user.tier, current.pool if current else "",
                                     request.pool, self._policy.default_pool)  # fmt: skip
        self._metrics.routes.labels(route.reason.value, route.pool).inc()
        return route

    async def _refuse_input(
        self,
        user: User,
        request: SendRequest,
        fingerprint: str,
        parent: MessageRecord | None,
        verdict: Verdict,
        refusal: str,
    ) -> MessageRun:
        """A message the input check blocks never reaches a model: it is recorded with its
        refusal (both marked refused, so no later prompt includes them) and answered with it."""
        self._metrics.refusals.labels(user.tier.value, "safety_input").inc()
        self._log.warning("message refused by the input check", category=verdict.category,
                          message_id=request.message_id)  # fmt: skip
        parent_seq = parent.seq if parent else None
        question = NewMessage(request.message_id, Role.USER, request.content, 0, parent_seq,
                              finish=Finish.REFUSED.value)  # fmt: skip
        saved = await self._store.add_message(user.user_id, request.conversation_id, question,
                                              title=request.content[:80])  # fmt: skip
        answer = NewMessage(request.message_id + ANSWER_SUFFIX, Role.ASSISTANT, refusal, 0,
                            saved.seq, model=SAFETY_MODEL, finish=Finish.REFUSED.value)  # fmt: skip
        await self._store.add_message(user.user_id, request.conversation_id, answer)
        run = MessageRun(user.user_id, request.conversation_id, request.message_id, fingerprint)
        self._runs.add(run)
        await _compose(run, SAFETY_MODEL, refusal, Finish.REFUSED)
        self._runs.mark_ended(run)
        return run

    def _check_open_streams(self, user: User) -> None:
        if self._runs.open_for(user.user_id) >= self._policy.max_open_streams_per_user:
            raise ResourceExhausted("too many answers streaming at once for this user", 1.0)

    def _validate(self, request: SendRequest) -> None:
        check_id("conversation id", request.conversation_id)
        check_id("message id", request.message_id)
        if request.parent_id and not PARENT_PATTERN.match(request.parent_id):
            raise InvalidArgument("parent id must be a message id, or one followed by '.answer'")
        if not request.content.strip():
            raise InvalidArgument("content must not be empty")
        if len(request.content) > self._policy.max_message_chars:
            raise MessageTooLarge(
                f"content has {len(request.content)} characters; "
                f"at most {self._policy.max_message_chars} are accepted"
            )
        if len(request.instructions) > self._policy.max_message_chars:
            raise MessageTooLarge(
                f"instructions have {len(request.instructions)} characters; "
                f"at most {self._policy.max_message_chars} are accepted"
            )

    # Completing (stateless: the caller sends the history, nothing is stored) ---------------------

    async def complete(self, user: User, request: CompleteRequest) -> MessageRun:
        """Plans a completion like a message (ladder, limits, fitting, replica) and starts it.
        The run is registered only while it streams, so it counts against the user's open
        streams; nobody attaches to it later."""
        completions.validate(request, self._policy.max_message_chars)
        self._check_open_streams(user)
        key = completions.affinity_key(user.user_id, request)
        newest = request.turns[-1].text
        run = MessageRun(user.user_id, key, completions.completion_id(uuid.uuid4().hex), "")
        unsafe = self._policies.check_input(newest)
        if unsafe is not None:
            return await self._refused_completion(run, user, *unsafe, request.options.constrained)
        # Stateless: no stored pool, so each call is routed on its own newest message.
        route = self._policies.route(newest, user.tier, "", request.pool,
                                     self._policy.default_pool)  # fmt: skip
        self._metrics.routes.labels(route.reason.value, route.pool).inc()
        # The plan's output mode stays hold-back whatever the tier's: an OpenAI-compatible
        # client has no way to withdraw text it was sent (docs/decisions.md, "Retract mode").
        chosen = await self._serving.choose(user, route.pool)
        try:
            plan = await self._planner.plan_completion(user, key, request, chosen.pool,
                                                       chosen.system_prompt(),
                                                       chosen.version.model)  # fmt: skip
        except PoolsDown:
            self._count_failed(user, chosen.version.name)  # it counts against the version
            raise
        plan = chosen.explained(chosen.applied(plan), request.pool, route)
        self._runs.add(run)
        self._start(run, self._drive_completion(run, user, plan, request.resumable))
        return run

    async def _refused_completion(
        self, run: MessageRun, user: User, verdict: Verdict, refusal: str, apart: bool
    ) -> MessageRun:
        """apart: the caller asked for JSON or tools, so the refusal is marked as one
        (OpenAI's `refusal`) rather than passed off as the document."""
        self._metrics.refusals.labels(user.tier.value, "safety_input").inc()
        self._log.warning("completion refused by the input check", category=verdict.category)
        await _compose(run, SAFETY_MODEL, refusal, Finish.REFUSED, apart)
        return run

    async def _drive_completion(
        self, run: MessageRun, user: User, plan: AnswerPlan, resumable: bool
    ) -> None:
        try:
            await self._drive(run, user, plan, answer_parent_seq=None, store_answer=False)
        finally:
            if not resumable or not run.ended:
                self._runs.discard(run)
            # A resumable one is kept, like a message's run, for a client coming back to it.

    async def _replay_stored(
        self, user: User, request: SendRequest, fingerprint: str
    ) -> MessageRun | None:
        """A retry after this gateway forgot the run: answer from what was stored."""
        try:
            question = await self._store.get_message(user.user_id, request.message_id)
        except NotFound:
            return None
        if question.conversation_id != request.conversation_id or question.content != (
            request.content
        ):
            raise Conflict(f"message id {request.message_id!r} was used for another message")
        run = MessageRun(user.user_id, request.conversation_id, request.message_id, fingerprint)
        try:
            answer = await self._store.get_message(user.user_id, request.message_id + ANSWER_SUFFIX)
        except NotFound:
            # The run's gateway died before saving the answer. With shared runs (runs: redis)
            # another gateway takes it over; here it reads as an error the client can retry
            # with a new id (docs/decisions.md, "Ids and answers").
            await run.append(Failed(FailureCode.UNAVAILABLE, "the answer was lost"))
            return run
        await run.append(Meta(request.message_id, request.conversation_id, answer.model,
                              answer.replica_id, answer.region))  # fmt: skip
        await run.append(Delta(answer.content))
        await run.append(Done(Finish(answer.finish or "stop"), Usage(output_tokens=answer.tokens)))
        return run

    async def _parent_of(
        self, user: User, request: SendRequest
    ) -> tuple[ConversationRecord | None, MessageRecord | None]:
        """The conversation (None when this message starts it) and the message answered."""
        try:
            conversation = await self._store.get_conversation(user.user_id, request.conversation_id)
        except NotFound:
            conversation = None
        if request.parent_id:
            parent = await self._store.get_message(user.user_id, request.parent_id)
            if parent.conversation_id != request.conversation_id:
                raise NotFound(f"no message {request.parent_id!r} in this conversation")
            return conversation, parent
        if conversation is None:
            return None, None
        newest = await self._store.newest_message(user.user_id, request.conversation_id)
        return conversation, newest

    async def _context_parts(
        self, user: User, conversation: ConversationRecord | None, parent: MessageRecord | None
    ) -> ContextParts:
        """The conversation's summary, pinned constraints and the turns after the summary on
        the branch that ends at parent (regenerations make other branches). Refused turns are
        left out: blocked text must never reach a model."""
        if conversation is None or parent is None:
            return ContextParts(None, None, [])
        messages = await self._store.list_messages(user.user_id, conversation.conversation_id)
        return context_parts(conversation, branch(messages, parent))

    async def _busy_answer(
        self, user: User, request: SendRequest, fingerprint: str, down: PoolsDown, version: str
    ) -> MessageRun:
        """The end of the fallback chain: a composed answer instead of a raw error. Nothing
        is stored or charged, so the same message can be sent again later."""
        run = MessageRun(user.user_id, request.conversation_id, request.message_id, fingerprint)
        self._runs.add(run)
        await _compose(run, BUSY_MODEL, BUSY_TEXT, Finish.ERROR, version=version)
        self._runs.mark_ended(run)
        self._count_failed(user, version)
        self._log.warning("composed a busy answer", reason=down.reason)
        return run

    def _count_failed(self, user: User, version: str) -> None:
        """An answer no pool could write, in the metrics and the version's guardrails."""
        self._metrics.answers.labels(user.tier.value, BUSY_MODEL, Finish.ERROR.value).inc()
        self._metrics.observe_version(version, user.tier, Finish.ERROR.value, None, None)
        self._versions.tally(version, user.tier, Finish.ERROR.value, BUSY_TEXT, None)

    # Generating ---------------------------------------------------------------------------------

    def _start(self, run: MessageRun, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name=f"run-{run.message_id}")
        run.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drive(
        self,
        run: MessageRun,
        user: User,
        plan: AnswerPlan,
        answer_parent_seq: int | None,
        store_answer: bool = True,
        resumed: Answer | None = None,
    ) -> None:
        """Writes the answer, saves it, settles the bucket, ends the run. A resumed answer
        (taken over from a dead gateway) goes on from the text already in the log."""
        pick = plan.pick
        answer = resumed or Answer(served_by=pick)
        ending: Event
        try:
            if resumed is None:
                meta = Meta(run.message_id, run.conversation_id, pick.model, pick.node_id,
                            self._region, plan.region_notice, version=plan.version,
                            downgraded=plan.downgraded, slice=plan.slice, pool=plan.pool,
                            pool_reason=plan.pool_reason)  # fmt: skip
                self._log.info("answer started", message_id=run.message_id, version=plan.version,
                               pool=plan.pool, model=pick.model, downgraded=plan.downgraded,
                               pool_reason=plan.pool_reason)  # fmt: skip
                await run.append(meta)
            await self._writer.write(run, plan, answer)
            ending = Done(answer.finish, answer.usage)
        except Unavailable as error:
            ending = Failed(FailureCode.UNAVAILABLE, error.reason)
        except OwnershipLost as lost:
            # Another gateway took this run over (this one was thought dead), or will: it
            # saves, settles and ends the answer; writing more here would only repeat it.
            # Whoever follows it here attaches there.
            self._log.warning("run left to another gateway", message_id=run.message_id,
                              reason=str(lost))  # fmt: skip
            await run.abandon()
            self._runs.discard(run)
            return
        if store_answer:
            try:
                await self._save_answer(run, user, answer_parent_seq, answer)
            except Exception:
                # Whatever the store did, the client's stream must still end; the answer it
                # read is logged as unsaved for the operator.
                self._log.exception("answer not saved", message_id=run.message_id)
        await self._buckets.settle(
            user.user_id, user.tier, plan.reserved, limiter.usage_cost(answer.usage)
        )
        await self._budget.charge(user, plan.pool, answer.usage)
        self._observe(run, user, plan.pool, answer, plan.version)
        if answer.finish is not Finish.ERROR:
            self._breakers.of(plan.pool).record_success()
        try:
            await run.append(ending)
        except OwnershipLost:
            await run.abandon()
            self._runs.discard(run)
            return
        except Unavailable as error:
            # The shared log takes no more (Redis away): the run still ends, for the followers
            # here at least, rather than staying open forever.
            self._log.warning("answer ended here only", message_id=run.message_id,
                              reason=error.reason)  # fmt: skip
            await run.append_here(ending)
        self._runs.mark_ended(run)
        await self._sharing.end(run)
        if store_answer and self._compactor is not None:
            # After `done`: the user never waits for this; it reads one row when nothing is due.
            system_tokens = plan.prompt.turns[0].tokens
            await self._compactor.consider(user.user_id, run.conversation_id, plan.window_tokens,
                                           plan.max_answer_tokens, system_tokens)  # fmt: skip

    def _observe(
        self, run: MessageRun, user: User, pool: str, answer: Answer, version: str
    ) -> None:
        first, now = run.first_text_at, time.monotonic()
        ttft = None if first is None else first - run.started_at
        stream_s = 0.0 if first is None else now - first
        self._metrics.observe_answer(user.tier, pool, answer.served_by.model, ttft, stream_s,
                                     answer.usage, answer.finish.value)  # fmt: skip
        if version:
            rate = tokens_per_s(answer.usage.output_tokens, now - run.started_at)
            self._metrics.observe_version(version, user.tier, answer.finish.value, ttft, rate)
            self._versions.tally(version, user.tier, answer.finish.value, "".join(answer.shown),
                                 ttft, rate, answer.failovers > 0)  # fmt: skip

    async def _save_answer(
        self, run: MessageRun, user: User, parent_seq: int | None, answer: Answer
    ) -> None:
        await self._store.add_message(
            user.user_id,
            run.conversation_id,
            NewMessage(
                message_id=run.message_id + ANSWER_SUFFIX,
                role=Role.ASSISTANT,
                content="".join(answer.shown),
                tokens=answer.usage.output_tokens,
                parent_seq=parent_seq,
                model=answer.served_by.model,
                # The replica that finished the answer; a failover is in the gateway's log.
                replica_id=answer.served_by.node_id,
                finish=answer.finish.value,
                region=self._region,
                parent_tokens=answer.message_tokens,
            ),
        )

    # Reading ------------------------------------------------------------------------------------

    async def attach(self, user: User, message_id: str) -> MessageRun | FollowedRun:
        check_id("message id", message_id)
        run = self._runs.get(user.user_id, message_id) or await self._sharing.find(
            user.user_id, message_id, self.resume
        )
        if run is None:
            raise NotFound(f"no answer {message_id!r} is streaming or recently ended")
        return run

    async def stop(self, user: User, message_id: str) -> bool:
        check_id("message id", message_id)
        run = self._runs.get(user.user_id, message_id)
        if run is None:
            asked = await self._sharing.ask_stop(user.user_id, message_id)
            if asked is not None:
                return asked
            await self._store.get_message(user.user_id, message_id)  # NotFound if it never was
            return False
        if run.ended:
            return False
        run.stop_requested.set()
        return True

    def resume(
        self,
        run: MessageRun,
        user: User,
        plan: AnswerPlan,
        answer_parent_seq: int | None,
        answer: Answer,
    ) -> None:
        """Goes on writing a run taken over from a dead gateway, from the answer so far."""
        self._start(run, self._drive(run, user, plan, answer_parent_seq, resumed=answer))

    async def close(self, grace_s: float) -> None:
        """Lets running answers finish (and be saved), then cancels what is left."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._compactor is not None:
            await self._compactor.close()


async def _compose(
    run: MessageRun,
    model: str,
    text: str,
    finish: Finish,
    refusal: bool = False,
    version: str = "",
) -> None:
    """An answer no model wrote (a refusal, the fallback chain's "busy"): meta, text, done."""
    await run.append(Meta(run.message_id, run.conversation_id, model, "", version=version))
    await run.append(Delta(text, refusal=refusal))
    await run.append(Done(finish, Usage()))


def _fingerprint(request: SendRequest) -> str:
    parts = [request.conversation_id, request.parent_id, request.content, request.pool or ""]
    if request.instructions or request.hold_back or request.max_tokens:
        # Only then, so the fingerprints of messages sent before these fields existed hold.
        parts += [request.instructions, str(request.hold_back), str(request.max_tokens)]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
