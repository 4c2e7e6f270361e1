"""The per-message policies the pipeline consults before a message is queued: the input
safety check and the model router. Plain objects composed in main; each may be switched off."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from domain.difficulty import DifficultyModel
from domain.pools import POOLS
from domain.router import RouteDecision, Router, RouteReason, RouteRequest
from domain.safety import InputGuard, OutputGuard, OutputMode, Verdict
from domain.types import Tier


@dataclass(frozen=True, slots=True)
class MessagePolicies:
    # None: no router; a message runs on the pool it names, else the default pool.
    router: Router | None = None
    # None: the router's fallback rule (short messages without code go small).
    difficulty: DifficultyModel | None = None
    # None: no safety checks on this gateway.
    input_guard: InputGuard | None = None
    new_output_guard: Callable[[OutputMode], OutputGuard] | None = None
    # How each tier's answers meet the output check; a tier not named holds back.
    output_modes: Mapping[Tier, OutputMode] = field(default_factory=dict)

    def output_mode(self, tier: Tier) -> OutputMode:
        return self.output_modes.get(tier, OutputMode.HOLDBACK)

    def check_input(self, content: str) -> tuple[Verdict, str] | None:
        """None when the message may go on; else why not and the text to answer with."""
        if self.input_guard is None:
            return None
        decision = self.input_guard.check(content)
        return None if decision.allowed else (decision.verdict, decision.refusal_text)

    def check_text(self, text: str) -> Verdict | None:
        """The output check over one whole text that no stream carries (a tool call's
        arguments, a tool's result): why it is flagged, or None when it passes or no check
        runs on this gateway."""
        if self.new_output_guard is None:
            return None
        guard = self.new_output_guard(OutputMode.HOLDBACK)
        guard.feed(text)
        guard.finish()
        return guard.verdict if guard.violated else None

    def route(
        self,
        content: str,
        tier: Tier,
        conversation_pool: str,
        picked_pool: str | None,
        default_pool: str,
    ) -> RouteDecision:
        if self.router is None:
            pool = picked_pool or default_pool
            return RouteDecision(pool, "", RouteReason.USER_CHOICE)
        current = conversation_pool if conversation_pool in POOLS else None
        return self.router.route(
            RouteRequest(content, tier, current, picked_pool, self._score(content))
        )

    def _score(self, content: str) -> float | None:
        if self.difficulty is None:
            return None
        try:
            return self.difficulty.score(content)
        except (ValueError, ArithmeticError) as error:
            # The router's fallback rule decides instead; a classifier bug never fails a message.
            structlog.get_logger(component="router").warning("scoring failed", error=str(error))
            return None
