"""Planning one message before it runs: the ladder's decision (pool, answer cap, refusal at
the door), the fallback chain past failing pools, token counts from the serving model, the
prompt that fits the window, the bucket reservation, and the replica."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace

import structlog

from domain import limiter
from domain.breaker import BreakerPolicy, Breakers, fallback_chain
from domain.context import ContextBuilder, Prompt
from domain.errors import MessageTooLarge, NoReplica, ResourceExhausted, Unavailable
from domain.pool_reason import PoolReason
from domain.pools import SMALL_POOL
from domain.shedding import SheddingPolicy, refuse_at_door, shed
from domain.tiers import TierPolicy
from domain.types import Role, Tier, Turn, User
from gateway import completions
from gateway.answers import AnswerPlan, StreamTimeouts
from gateway.buckets import Buckets
from gateway.completions import CompleteRequest
from gateway.metrics import GatewayMetrics
from gateway.ports import Nodes, ReplicaPick, ReplicaPicker
from gateway.stored_context import ContextParts


class PoolsDown(Unavailable):
    """Every pool of a message's fallback chain is unavailable."""


@dataclass(frozen=True, slots=True)
class PipelinePolicy:
    system_prompt: str
    tiers: dict[Tier, TierPolicy]
    default_pool: str = SMALL_POOL
    shedding: SheddingPolicy = field(default_factory=SheddingPolicy)
    streaming: StreamTimeouts = field(default_factory=StreamTimeouts)
    max_message_chars: int = 32_000
    # A stored conversation's new message, counted (0: only the window limits it).
    max_message_tokens: int = 0
    max_open_streams_per_user: int = 4
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)


def _fitted(tier: TierPolicy, context_tokens: int) -> TierPolicy:
    """The tier's window, shrunk to what the serving model can hold: an engine given more
    would cut the prompt itself, oldest first, system prompt included."""
    if not context_tokens or context_tokens >= tier.window_tokens:
        return tier
    answer = min(tier.max_answer_tokens, context_tokens // 2)
    return dataclasses.replace(tier, window_tokens=context_tokens, max_answer_tokens=answer)


@dataclass(frozen=True, slots=True)
class PromptSize:
    """A prompt's size before the serving model counted it, for the replica pick: the stored
    turns' counts are exact, the new text is estimated."""

    tokens: int
    reusable_tokens: int


def token_upper_bound(text: str) -> int:
    """At most this many tokens: every token of a byte-level or byte-fallback tokenizer (the
    GPT, Llama 3, Qwen, SmolLM and Mistral families) holds at least one byte of the text, and
    a SentencePiece tokenizer may add one word marker in front; one more for a start token."""
    return len(text.encode()) + 2


# Past this a message is counted before it is planned: its bound (about four times its
# count in English) would reserve far more of the bucket than it will spend.
MAX_BOUND_TOKENS = 2048


def segment_turn(tier: TierPolicy) -> Turn | None:
    """The tier's segment turn, counted at its upper bound: a few lines of the operator's,
    the same on every turn, where an exact count would cost a tokenize call per model."""
    if not tier.segment:
        return None
    return Turn(Role.SYSTEM, tier.segment, token_upper_bound(tier.segment))


def prompt_on_bound(builder: ContextBuilder, parts: ContextParts, content: str) -> Prompt | None:
    """The prompt with the message counted at its upper bound, where that is the prompt an
    exact count would build too: it keeps every stored part (an exact count, never larger,
    would keep them all as well). None where the bound could change what is kept."""
    bound = token_upper_bound(content)
    if bound > MAX_BOUND_TOKENS:
        return None
    new = Turn(Role.USER, content, bound)
    if not builder.fits_alone(new):
        return None
    prompt = builder.build(parts.summary, parts.history, new, parts.pinned, parts.memories)
    extras = (parts.summary, parts.pinned, parts.memories, builder.segment)
    stored = len(parts.history) + sum(extra is not None for extra in extras)
    # The system prompt, every stored part, the message.
    return prompt if len(prompt.turns) == stored + 2 else None


def estimate_tokens(text: str) -> int:
    # About four characters a token in English; the pick only weighs prefill against cache.
    return len(text) // 4 + 1


class Planner:
    def __init__(
        self,
        scheduler: ReplicaPicker,
        nodes: Nodes,
        buckets: Buckets,
        policy: PipelinePolicy,
        breakers: Breakers,
        metrics: GatewayMetrics,
    ) -> None:
        self._scheduler = scheduler
        self._nodes = nodes
        self._buckets = buckets
        self._policy = policy
        self._breakers = breakers
        self._metrics = metrics
        # The system prompt's token count per model and prompt (each version may have its
        # own): counted once, never per message.
        self._system_tokens: dict[tuple[str, str], int] = {}
        self._log = structlog.get_logger(component="planner")

    async def plan(
        self,
        user: User,
        conversation_id: str,
        content: str,
        parts: ContextParts,
        pool: str,
        system_prompt: str = "",
        model: str = "",
        counted_once: bool = True,
    ) -> AnswerPlan:
        """The ladder's decision, the prompt that fits the window, the reservation and the
        replica for one message of a stored conversation. The system prompt is the serving
        version's, or a request's own instructions ('' for the configured one), and so is the
        engine model ('' for any). A request's own system prompt is counted every time
        (counted_once false): keeping each one's count would grow without bound."""
        system = system_prompt or self._policy.system_prompt
        # The pinned turn moves with every message, so it is never in the prefix cache.
        stable = [turn for turn in (parts.memories, parts.summary) if turn]
        reusable = sum(turn.tokens for turn in [*stable, *parts.history])
        size = PromptSize(reusable + estimate_tokens(content), reusable)
        pick, tier, pool, moved = await self.shed(user, conversation_id, pool, size, model)
        known = self._system_tokens.get((pick.model, system)) if counted_once else None
        if known is not None:
            builder = ContextBuilder(Turn(Role.SYSTEM, system, known), tier.window_tokens,
                                     tier.max_answer_tokens, segment_turn(tier))  # fmt: skip
            bounded = await self._plan_on_bound(user, pick, pool, tier, builder, parts, content)
            if bounded is not None:
                return dataclasses.replace(bounded, version_model=model, pool_reason=moved)
        if counted_once:
            system_tokens, message_tokens = await self._count(pick, content, system)
        else:
            system_tokens, message_tokens = await self.tokenize(pick, [system, content])
        builder = ContextBuilder(
            Turn(Role.SYSTEM, system, system_tokens),
            tier.window_tokens,
            tier.max_answer_tokens,
            segment_turn(tier),
        )
        cap = self._policy.max_message_tokens
        if cap and message_tokens > cap:
            raise MessageTooLarge(
                f"the message has {message_tokens} tokens; at most {cap} are taken in one "
                "message: send it in parts"
            )
        new = Turn(Role.USER, content, message_tokens)
        if not builder.fits_alone(new):
            raise MessageTooLarge(
                f"the message has {message_tokens} tokens; with the answer reserve the "
                f"{user.tier.value} tier's window of {tier.window_tokens} tokens cannot hold it"
            )
        prompt = builder.build(parts.summary, parts.history, new, parts.pinned, parts.memories)
        plan = await self.admit(user, pick, pool, tier, prompt)
        return dataclasses.replace(plan, version_model=model, pool_reason=moved)

    async def _plan_on_bound(
        self,
        user: User,
        pick: ReplicaPick,
        pool: str,
        tier: TierPolicy,
        builder: ContextBuilder,
        parts: ContextParts,
        content: str,
    ) -> AnswerPlan | None:
        """The plan an exact count would make, from an upper bound of the message's tokens,
        without a Tokenize call before the answer (docs/decisions.md, "Counting a message").
        Only where the bound changes nothing: the prompt keeps every stored part and the
        bucket admits the bound. None: count first."""
        cap = self._policy.max_message_tokens
        if cap and token_upper_bound(content) > cap:
            return None  # the exact count decides whether the message is taken
        prompt = prompt_on_bound(builder, parts, content)
        if prompt is None:
            return None
        reserved = limiter.worst_case_cost(prompt.tokens, tier.max_answer_tokens)
        decision = await self._buckets.reserve(user.user_id, user.tier, reserved)
        if not decision.admitted:
            return None  # a refused reservation takes nothing: the exact count decides
        return self._admitted(user, pick, pool, tier, prompt, reserved, message_bound=True)

    async def plan_completion(
        self,
        user: User,
        affinity_key: str,
        request: CompleteRequest,
        pool: str,
        system_prompt: str = "",
        model: str = "",
    ) -> AnswerPlan:
        """The same for a stateless completion: the caller sent the whole history. Without a
        system message of the caller's, the serving version's system prompt leads ('' for the
        configured one); the version's engine model is picked ('' for any)."""
        # The client resends its history each turn: all but the newest turn is what the
        # replica that served the last one caches, exactly as for a stored conversation. The
        # system prompt is not the conversation's (every replica caches it), as there: a
        # first turn reuses nothing, and the scheduler places it where it starts soonest.
        earlier = request.turns[:-1]
        system_n = sum(estimate_tokens(t.counted_text()) for t in earlier if t.role is Role.SYSTEM)
        history = sum(estimate_tokens(t.counted_text()) for t in earlier) - system_n
        newest = estimate_tokens(request.turns[-1].counted_text())
        size = PromptSize(system_n + history + newest, history)
        pick, tier, pool, moved = await self.shed(user, affinity_key, pool, size, model)
        answer = completions.answer_cap(tier.max_answer_tokens, request.max_tokens)
        default_system = system_prompt or self._policy.system_prompt
        system, turns = completions.split_system(request, default_system)
        # The tools' definitions ride in the system part of the prompt, and are counted there.
        tools = completions.tools_text(request.options)
        system_text = f"{system.text}\n{tools}" if tools else system.text
        counts = await self.tokenize(pick, [system_text, *(t.counted_text() for t in turns)])
        prompt = completions.fit(
            Turn(system.role, system.text, counts[0]),
            [t.as_turn(n) for t, n in zip(turns, counts[1:], strict=True)],
            tier.window_tokens,
            answer,
        )
        capped = dataclasses.replace(tier, max_answer_tokens=answer)
        plan = await self.admit(user, pick, pool, capped, prompt)
        return replace(plan, options=request.options, version_model=model, pool_reason=moved)

    async def shed(
        self, user: User, conversation_id: str, pool: str, size: PromptSize, model: str = ""
    ) -> tuple[ReplicaPick, TierPolicy, str, PoolReason]:
        """Picks the replica, and the ladder's rung that came with it decides the pool and
        the answer cap; rung 3 may refuse at once. One pick serves the whole message: the
        prompt's size is estimated before the serving model's tokenizer has counted it.
        Also says why the pool is not the one given (fallback, ladder), or NONE."""
        pick, picked = await self._first_pick(conversation_id, pool, user.tier, size, model)
        moved = PoolReason.NONE if picked == pool else PoolReason.FALLBACK
        tier = self._policy.tiers[user.tier]
        decided = shed(user.tier, pick.ladder_rung, picked, tier.max_answer_tokens,
                       self._policy.shedding)  # fmt: skip
        self._refuse_if_busy(user, pick)
        if decided.pool != picked:
            moved = PoolReason.LADDER
            self._metrics.sheds.labels(user.tier.value, "small_pool").inc()
            pick = await self._pick(conversation_id, decided.pool, user.tier, size, model)
            self._refuse_if_busy(user, pick)
        if decided.max_answer_tokens < tier.max_answer_tokens:
            self._metrics.sheds.labels(user.tier.value, "capped_answer").inc()
        capped = dataclasses.replace(tier, max_answer_tokens=decided.max_answer_tokens)
        return pick, _fitted(capped, pick.context_tokens), decided.pool, moved

    async def _first_pick(
        self, conversation_id: str, pool: str, tier: Tier, size: PromptSize, model: str
    ) -> tuple[ReplicaPick, str]:
        """The first pool of the fallback chain that has a replica: large falls to small."""
        chain = fallback_chain(pool)
        for index, candidate in enumerate(chain):
            try:
                return await self._pick(conversation_id, candidate, tier, size, model), candidate
            except NoReplica as error:
                to = chain[index + 1] if index + 1 < len(chain) else "busy"
                self._metrics.fallbacks.labels(candidate, to).inc()
                self._log.warning("pool unavailable; falling back", pool=candidate, to=to,
                                  reason=error.reason)  # fmt: skip
        raise PoolsDown(f"no replica can answer: {', '.join(chain)} unavailable")

    def _refuse_if_busy(self, user: User, pick: ReplicaPick) -> None:
        wait = pick.expected_wait_s
        if refuse_at_door(user.tier, pick.ladder_rung, wait, self._policy.shedding):
            self._metrics.refusals.labels(user.tier.value, "busy").inc()
            raise ResourceExhausted(
                f"busy: the {user.tier.value} tier would wait about {wait:.0f} s to start",
                max(1.0, wait),
            )

    async def admit(
        self,
        user: User,
        pick: ReplicaPick,
        pool: str,
        tier: TierPolicy,
        prompt: Prompt,
    ) -> AnswerPlan:
        """Reserves the worst case (prompt + the answer cap) from the user's bucket."""
        reserved = limiter.worst_case_cost(prompt.tokens, tier.max_answer_tokens)
        decision = await self._buckets.reserve(user.user_id, user.tier, reserved)
        if math.isinf(decision.retry_after_s):
            raise MessageTooLarge(
                f"this message and its answer would cost more than the {user.tier.value} tier's "
                "whole token budget"
            )
        if not decision.admitted:
            self._metrics.limiter_refusals.labels(user.tier.value).inc()
            raise ResourceExhausted(
                f"the {user.tier.value} tier's token budget is spent for now",
                decision.retry_after_s,
            )
        return self._admitted(user, pick, pool, tier, prompt, reserved)

    def _admitted(
        self,
        user: User,
        pick: ReplicaPick,
        pool: str,
        tier: TierPolicy,
        prompt: Prompt,
        reserved: float,
        message_bound: bool = False,
    ) -> AnswerPlan:
        self._metrics.queue_wait.labels(user.tier.value, pool).observe(pick.expected_wait_s)
        return AnswerPlan(prompt, pick, tier.max_answer_tokens, reserved, pool, user.tier,
                          tier.window_tokens, message_bound=message_bound)  # fmt: skip

    async def _pick(
        self, conversation_id: str, pool: str, tier: Tier, size: PromptSize, model: str = ""
    ) -> ReplicaPick:
        breaker = self._breakers.of(pool)
        if not breaker.allows():
            raise NoReplica(f"pool {pool!r} failed repeatedly; cooling down")
        try:
            return await self._scheduler.pick(conversation_id, pool, tier, size.tokens,
                                              size.reusable_tokens, model=model)  # fmt: skip
        except NoReplica:
            # A version whose model no node of the pool serves says nothing of the pool's
            # health: the pool's other versions must not be cut off by its breaker.
            if not model:
                breaker.record_failure()
            raise

    async def _count(self, pick: ReplicaPick, content: str, system: str) -> tuple[int, int]:
        """Token counts from the serving model's own tokenizer: (system prompt, message)."""
        key = (pick.model, system)
        known = self._system_tokens.get(key)
        texts = [content] if known is not None else [content, system]
        counts = await self.tokenize(pick, texts)
        if known is None:
            known = self._system_tokens[key] = counts[1]
        return known, counts[0]

    async def tokenize(self, pick: ReplicaPick, texts: list[str]) -> list[int]:
        return await self._nodes.tokenize(pick.address, texts, pick.model)
