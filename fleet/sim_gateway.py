"""The gateway's decisions for one simulated message, made by the platform's own policy code:
the router (domain.router, on a difficulty score the workload draws), the ladder's rung
(domain.shedding), the context builder (domain.context), the token bucket (domain.limiter) and
refuse-at-door. The picking itself is the pool's (fleet.replicas), walking the fallback chain
(domain.breaker.fallback_chain) when a pool has no replica left (fleet.region).

The platform's gateway learns the rung from its pick, so it picks first (gateway/planner.py);
the simulation reads the region's rung directly, so the order here is: route, shed by rung,
build the prompt inside the tier's window, reserve the worst case, then (fleet.region) pick,
refuse at the door if the pick's wait is too long, and settle with the real usage at the end.

What the simulation leaves out:
- safety checks, and tokenizing (the workload draws token counts);
- the circuit breakers (domain.breaker.Breakers). A breaker is a gateway's own, opened by five
  failures in a row on that gateway, and a replica's death fails over each of its answers at
  once: whether a gateway's breaker opens then depends on how many of the dead replica's
  answers it held, that is on how many gateways share the region. This one SimGateway stands
  for all of them, and a breaker of its own would open the large pool for its whole cooldown
  on any replica's death;
- compaction (UNFINISHED: the simulated gateway writes no summaries, so a conversation past its
  window drops its oldest turns every message, which changes its prefix and re-reads it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from domain import limiter
from domain.context import ContextBuilder, Prompt
from domain.pools import LARGE_POOL, SMALL_POOL
from domain.router import RouteDecision, Router, RouteReason, RouteRequest
from domain.shedding import SheddingPolicy, shed
from domain.tiers import TierPolicy, default_tiers
from domain.types import Role, Tier, Turn


@dataclass(slots=True)
class Conversation:
    """One conversation as the gateway and the store know it."""

    conversation_id: str
    user_id: str
    tier: Tier
    easy: bool  # what the router should decide: the workload draws its messages' scores
    turns_left: int
    # Routed at its first message, escalated at most once, never de-escalated (domain.router);
    # None until a message of it was sent.
    pool: str | None = None
    history: list[Turn] = field(default_factory=list)
    dropped: int = 0  # oldest turns the last prompt left out
    prompt_version: int = -1  # the system prompt its last request was read with
    # With several regions (fleet/regions.py): the user's home region, whether data residency
    # keeps the user there, and how its next message reached the region that handles it
    # (fleet.recorder's PLACED_* codes). A region alone leaves them at home.
    home: int = 0
    pinned: bool = False
    placed: int = 0


class Plan(NamedTuple):
    """What the gateway sends for one message, before a replica is picked. (A NamedTuple:
    a region makes thousands a second.)"""

    pool: str
    conversation_pool: str  # the conversation's pool once this message is sent (domain.router)
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
        tiers: dict[Tier, TierPolicy] | None = None,
        score_threshold: float = 0.5,
    ) -> None:
        self.pools = pools
        self.tiers = tiers or default_tiers()
        self.shedding = shedding
        # A fleet of the large model alone runs no router, as a gateway with `router: false`
        # and the large pool as its default: every message goes large.
        self.router = Router(score_threshold) if SMALL_POOL in pools else None
        self.system = Turn(Role.SYSTEM, "", system_tokens)
        self.prompt_version = 0  # bumped when the system prompt changes
        self._buckets: dict[str, limiter.Bucket] = {}
        self._builders: dict[tuple[Tier, int], ContextBuilder] = {}
        # One shared Turn per length, by role: the simulation's turns carry no text, and a
        # region holds millions of them (a frozen dataclass costs a microsecond or two to make).
        self._questions: dict[int, Turn] = {}
        self._answers: dict[int, Turn] = {}

    def route(self, conversation: Conversation, score: float) -> RouteDecision:
        """The router's decision for the conversation's next message, scored `score`. No user
        picks a model here: every message is "auto"."""
        if self.router is None:
            return RouteDecision(LARGE_POOL, LARGE_POOL, RouteReason.STICKY)
        request = RouteRequest("", conversation.tier, conversation.pool, None, score)
        return self.router.route(request)

    def plan(
        self,
        conversation: Conversation,
        routed: RouteDecision,
        new_tokens: int,
        rung: int,
        now: float,
    ) -> Plan | None:
        """The rung's pool and answer cap, the prompt, and the bucket's reservation; None when
        the bucket cannot afford the worst case."""
        tier = conversation.tier
        rules = self.tiers[tier]
        decided = shed(tier, rung, routed.pool, rules.max_answer_tokens, self.shedding)
        pool = decided.pool if decided.pool in self.pools else routed.pool
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
        return Plan(
            pool, routed.conversation_pool, prompt, tokens, new_tokens, cap, reusable, reserved
        )

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
        """The request is on a replica: its cache now holds this prompt's version, and the
        conversation is where the router put it."""
        conversation.pool = plan.conversation_pool
        conversation.prompt_version = self.prompt_version
        conversation.dropped = plan.prompt.dropped_turns
