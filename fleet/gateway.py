"""The gateway's decisions for one simulated message, made by the platform's own policy code:
router, ladder rung (domain.shedding), context builder (domain.context), token bucket
(domain.limiter) and refuse-at-door. The picking itself is the pool's (fleet.replicas).

The platform's gateway learns the rung from its pick, so it picks first (gateway/pipeline.py);
the simulation reads the region's rung directly, so the order here is: shed by rung, build the
prompt inside the tier's window, reserve the worst case, then (fleet.engine) pick, refuse at
the door if the pick's wait is too long, and settle with the real usage at the end. What the
simulation leaves out: safety checks, tokenizing (the workload draws token counts), the
difficulty classifier (the workload marks each conversation easy or hard, standing for the
classifier's verdict, and `route` sends easy ones small), escalation, the breaker's fallback
chain, and compaction (UNFINISHED: the simulated gateway writes no summaries, so a
conversation past its window drops its oldest turns every message, which changes its prefix
and re-reads it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from domain import limiter
from domain.context import ContextBuilder, Prompt
from domain.shedding import SMALL_POOL, SheddingPolicy, shed
from domain.types import Role, Tier, Turn

LARGE_POOL: Final = "large"


@dataclass(frozen=True, slots=True)
class TierRules:
    window_tokens: int
    max_answer_tokens: int
    limit: limiter.Limit


# gateway/main.py's defaults: 8,000 / 32,000-token windows and 25,000 / 250,000
# buckets refilling in three hours.
DEFAULT_TIERS = {
    Tier.FREE: TierRules(8_000, 1_000, limiter.Limit.refilling_in(25_000, 3 * 3600)),
    Tier.PLUS: TierRules(32_000, 4_000, limiter.Limit.refilling_in(250_000, 3 * 3600)),
}


def route(easy: bool, pools: frozenset[str]) -> str:
    """The router, at a conversation's start: easy messages to the small model when there is
    one. The platform scores each message with its difficulty classifier (domain/difficulty.py,
    domain/router.py); the simulation does not run it: the workload says which conversations
    it would call easy, in the share the workload sets (fleet.workload)."""
    return SMALL_POOL if easy and SMALL_POOL in pools else LARGE_POOL


@dataclass(slots=True)
class Conversation:
    """One conversation as the gateway and the store know it."""

    conversation_id: str
    user_id: str
    tier: Tier
    pool: str  # routed at the start; never de-escalated
    turns_left: int
    history: list[Turn] = field(default_factory=list)
    dropped: int = 0  # oldest turns the last prompt left out
    prompt_version: int = -1  # the system prompt its last request was read with


class Plan(NamedTuple):
    """What the gateway sends for one message, before a replica is picked. (A NamedTuple:
    a region makes thousands a second.)"""

    pool: str
    prompt: Prompt
    prompt_tokens: int  # counted once: Prompt.tokens sums the turns on every read
    new_tokens: int
    max_answer_tokens: int
    reusable_tokens: int  # leading prompt tokens the conversation's last request also read
    reserved: float  # taken from the user's bucket


class SimGateway:
    """Builds prompts and keeps the users' buckets; one instance for the whole region, as the
    buckets in Redis are one for all gateways."""

    def __init__(
        self,
        pools: frozenset[str],
        system_tokens: int,
        shedding: SheddingPolicy,
        tiers: dict[Tier, TierRules] | None = None,
    ) -> None:
        self.pools = pools
        self.tiers = tiers or DEFAULT_TIERS
        self.shedding = shedding
        self.system = Turn(Role.SYSTEM, "", system_tokens)
        self.prompt_version = 0  # bumped when the system prompt changes
        self._buckets: dict[str, limiter.Bucket] = {}
        self._builders: dict[tuple[Tier, int], ContextBuilder] = {}
        # One shared Turn per length, by role: the simulation's turns carry no text, and a
        # region holds millions of them (a frozen dataclass costs a microsecond or two to make).
        self._questions: dict[int, Turn] = {}
        self._answers: dict[int, Turn] = {}

    def plan(
        self, conversation: Conversation, new_tokens: int, rung: int, now: float
    ) -> Plan | None:
        """The rung's pool and answer cap, the prompt, and the bucket's reservation; None when
        the bucket cannot afford the worst case."""
        tier = conversation.tier
        rules = self.tiers[tier]
        decided = shed(tier, rung, conversation.pool, rules.max_answer_tokens, self.shedding)
        pool = decided.pool if decided.pool in self.pools else conversation.pool
        cap = decided.max_answer_tokens
        new = self._question(new_tokens)
        prompt = self._builder(tier, cap).build(None, conversation.history, new)
        tokens = prompt.tokens
        reserved = limiter.worst_case_cost(tokens, cap)
        decision = limiter.reserve(
            self._buckets.get(conversation.user_id), rules.limit, now, reserved
        )
        self._buckets[conversation.user_id] = decision.bucket
        if not decision.admitted:
            return None
        reusable = self._reusable(conversation, prompt, tokens)
        return Plan(pool, prompt, tokens, new_tokens, cap, reusable, reserved)

    def _builder(self, tier: Tier, max_answer: int) -> ContextBuilder:
        key = (tier, max_answer)
        builder = self._builders.get(key)
        if builder is None:
            window = self.tiers[tier].window_tokens
            builder = self._builders[key] = ContextBuilder(self.system, window, max_answer)
        return builder

    def _reusable(self, conversation: Conversation, prompt: Prompt, tokens: int) -> int:
        """How much of this prompt starts the way the conversation's last request did: all
        but the new message while turns only append; the system prompt alone once the builder
        drops an old turn (what follows it moved); nothing after the system prompt changed."""
        if conversation.prompt_version != self.prompt_version:
            return 0
        if prompt.dropped_turns != conversation.dropped:
            return self.system.tokens
        return tokens - prompt.turns[-1].tokens

    def settle(
        self, conversation: Conversation, reserved: float, usage_cost: float, now: float
    ) -> None:
        """Gives back what the message did not use (all of it when it never ran)."""
        limit = self.tiers[conversation.tier].limit
        bucket = self._buckets.get(conversation.user_id)
        self._buckets[conversation.user_id] = limiter.settle(
            bucket, limit, now, reserved, usage_cost
        )

    @property
    def system_prefix(self) -> tuple[int, int]:
        """Every prompt opens with the system prompt: (its version, its tokens), the key a
        replica keeps one shared copy of it under."""
        return self.prompt_version, self.system.tokens

    def change_system_prompt(self) -> None:
        """One word changed at the head of every prompt: no cached prefix matches any more."""
        self.prompt_version += 1

    def answered(self, conversation: Conversation, plan: Plan, answer_tokens: int) -> None:
        """The turn is saved: its question and answer join the history."""
        self.remember(conversation, ((plan.new_tokens, answer_tokens),))

    def remember(self, conversation: Conversation, turns: Iterable[tuple[int, int]]) -> None:
        """Question and answer lengths of saved turns join the history, oldest first."""
        for question_tokens, answer_tokens in turns:
            conversation.history += (self._question(question_tokens), self._answer(answer_tokens))

    def _question(self, tokens: int) -> Turn:
        turn = self._questions.get(tokens)
        if turn is None:
            turn = self._questions[tokens] = Turn(Role.USER, "", tokens)
        return turn

    def _answer(self, tokens: int) -> Turn:
        turn = self._answers.get(tokens)
        if turn is None:
            turn = self._answers[tokens] = Turn(Role.ASSISTANT, "", tokens)
        return turn

    def sent(self, conversation: Conversation, plan: Plan) -> None:
        """The request is on a replica: its cache now holds this prompt's version."""
        conversation.prompt_version = self.prompt_version
        conversation.dropped = plan.prompt.dropped_turns
