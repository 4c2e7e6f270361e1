"""The chat pipeline: one user message in, one streamed answer out.

Order (`send`, `_begin`, `_run`): validate ids and content (nothing stored yet); idempotency
(a run held here or still starting, else with shared runs the message id claimed in Redis);
an answer already stored is replayed; the user's open-stream cap; the conversation and the
message answered; the input safety check; the context parts (summary, pinned constraints,
the branch's turns, the user's memories relevant to the message); the router; the planner
(gateway/planner.py: the pick, whose ladder rung decides pool and answer cap, falling back
large -> small; token counts from the picked node; the context that fits; the bucket's
reservation); save the user turn; then generate in a task of its own (gateway/drive.py) that
keeps writing the answer when the client has gone, saves it, settles the bucket, ends the
run and asks the compactor to consider the conversation.

What it reaches outside the process (the schedulers, the nodes, the store, the daily spend,
the buckets, other gateways' runs) it reaches through the protocols of gateway/ports.py,
gateway/buckets.py and gateway/run_sharing.py; gateway/main.py hands in the real ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable

import structlog
from prometheus_client import CollectorRegistry

from domain.breaker import Breakers
from domain.errors import Conflict, NotFound, ResourceExhausted
from domain.router import RouteDecision
from domain.safety import Verdict
from domain.types import Finish, Role, Usage, User
from gateway import completions
from gateway.answers import Answer, AnswerPlan, AnswerWriter
from gateway.buckets import Buckets
from gateway.compactor import Compactor
from gateway.completions import CompleteRequest
from gateway.drive import Accounts, RunDriver
from gateway.ids import ANSWER_SUFFIX, check_id
from gateway.memories import MemoryReader, NoMemories
from gateway.metrics import GatewayMetrics
from gateway.planner import PipelinePolicy, Planner, PoolsDown
from gateway.policies import MessagePolicies
from gateway.ports import Budget, Nodes, ReplicaPicker
from gateway.prompt_capture import NoCapture, PromptCapture
from gateway.run_sharing import Claim, FollowedRun, LocalRuns, RunSharing
from gateway.runs import Delta, Done, Failed, FailureCode, MessageRun, Meta, RunRegistry
from gateway.send_request import SendRequest, validate
from gateway.serving_choice import ServingChooser
from gateway.stored_context import read_context, read_parent
from gateway.tool_messages import ToolMessageDriver, no_tool_messages
from gateway.versions import VersionBook
from store.base import ConversationStore
from store.records import ConversationRecord, MessageRecord, NewMessage, ServingRecord

# The last hop of the fallback chain: what the user reads when no pool can answer.
BUSY_MODEL = "busy"
# What the meta event names when the input check answered instead of a model.
SAFETY_MODEL = "safety"
BUSY_TEXT = (
    "Sorry, the assistant is overloaded right now and could not answer. "
    "Please send your message again in a minute."
)


class ChatPipeline:
    def __init__(
        self,
        store: ConversationStore,
        scheduler: ReplicaPicker,
        nodes: Nodes,
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
        budget: Budget,
        prompts: PromptCapture | None = None,
        tool_messages: Callable[[ChatPipeline], ToolMessageDriver] = no_tool_messages,
        memories: MemoryReader | None = None,
    ) -> None:
        # The user's memory entries a stored turn reads (gateway/memories.py).
        self._memories = memories or NoMemories()
        self._versions = versions
        self._serving = ServingChooser(versions, budget)
        # This gateway's region, named in each stored question ('' with one).
        self._region = region
        self._metrics = metrics or GatewayMetrics(CollectorRegistry())
        self._policies = policies or MessagePolicies()
        self._store = store
        self._sharing = sharing or LocalRuns()
        breakers = Breakers(policy.breaker, clock)
        self._planner = Planner(scheduler, nodes, buckets, policy, breakers, self._metrics)
        writer = AnswerWriter(scheduler, nodes, policy.streaming, self._metrics, breakers,
                              self._policies.new_output_guard)  # fmt: skip
        accounts = Accounts(buckets, budget, self._metrics, versions)
        self._driver = RunDriver(store, writer, accounts, breakers, runs, self._sharing, compactor,
                                 region, prompts or NoCapture())  # fmt: skip
        self._runs = runs
        self._buckets = buckets
        self._policy = policy
        self._starting: dict[tuple[str, str], asyncio.Future[MessageRun | FollowedRun]] = {}
        self._log = structlog.get_logger(component="pipeline")
        # Messages asking for platform tools; made from this pipeline, whose completions are
        # the tool loop's steps.
        self._tool_messages = tool_messages(self)

    # Sending ------------------------------------------------------------------------------------

    async def send(self, user: User, request: SendRequest) -> MessageRun | FollowedRun:
        validate(request, self._policy.max_message_chars)
        fingerprint = request.fingerprint()
        key = (user.user_id, request.message_id)
        existing: MessageRun | FollowedRun | None = self._runs.get(*key)
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
        if request.tools:
            self._tool_messages.check(user, request.tools)  # before anything is stored
        conversation, parent = await read_parent(
            self._store, user.user_id, request.conversation_id, request.parent_id
        )
        unsafe = self._policies.check_input(request.content)
        if unsafe is None and request.instructions:
            # The caller's own system prompt reaches the model too: blocked text must not.
            unsafe = self._policies.check_input(request.instructions)
        if unsafe is not None:
            return await self._refuse_input(user, request, fingerprint, parent, *unsafe)
        parts = await read_context(self._store, user.user_id, conversation, parent)
        memories = await self._memories.block(user, request.content)
        if memories is not None:
            parts = dataclasses.replace(parts, memories=memories)
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
        if request.tools:
            # Not published: the tool loop's answer stays with this gateway.
            tool_answer = self._tool_messages.drive(run, user, plan, user_turn.seq, request.tools)
            self._driver.start(run, tool_answer)
            return run
        await claim.publish(run, plan, user_turn.seq)
        self._driver.start(run, self._driver.drive(run, user, plan, user_turn.seq))
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
        self._driver.start(run, self._drive_completion(run, user, plan, request.resumable))
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
            await self._driver.drive(run, user, plan, answer_parent_seq=None, store_answer=False)
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
        self._driver.start(run, self._driver.drive(run, user, plan, answer_parent_seq,
                                                   resumed=answer))  # fmt: skip

    async def close(self, grace_s: float) -> None:
        """Lets running answers finish (and be saved), then cancels what is left."""
        await self._driver.close(grace_s)


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
