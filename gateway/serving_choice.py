"""Which model version serves one answer, and on which pool: the user's slice of the rollout
(gateway/versions.py) and the daily allowance (gateway/daily_budget.py), decided in one call
that the chat path and the OpenAI-compatible completions both make, so a user is served
alike whichever API they use."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from domain.budget import BudgetDecision
from domain.pool_reason import PoolReason, route_reason, served_reason
from domain.rollout import Assignment, Version
from domain.router import RouteDecision
from domain.types import User
from gateway.answers import AnswerPlan
from gateway.ports import Budget
from gateway.versions import VersionBook, temperature_of


@dataclass(frozen=True, slots=True)
class ServingChoice:
    assignment: Assignment
    budget: BudgetDecision

    @property
    def version(self) -> Version:
        return self.assignment.version

    @property
    def pool(self) -> str:
        """The router's pool, or the small one when the user is past the day's allowance."""
        return self.budget.pool

    def system_prompt(self, own: str = "") -> str:
        """The caller's own system prompt (the Responses API's instructions, a completion's
        system message) replaces the version's; '' leaves the gateway's configured one."""
        return own or self.version.system_prompt

    def applied(self, plan: AnswerPlan) -> AnswerPlan:
        """The plan, marked with the version that serves it, its sampling and the budget's
        outcome: the meta event, the logs and the per-version metrics read them from there."""
        return dataclasses.replace(
            plan,
            version=self.version.name,
            version_model=self.version.model,
            temperature=temperature_of(self.assignment),
            slice=self.assignment.slice.value,
            budget=self.budget.outcome.value,
            downgraded=self.budget.downgraded,
        )

    def explained(self, plan: AnswerPlan, asked: str | None, route: RouteDecision) -> AnswerPlan:
        """The plan, marked with why the pool that serves it is not the one asked for (None:
        auto): the router's move, the allowance's, then the planner's, which the plan holds."""
        moves = [(route.pool, route_reason(asked, route)),
                 (self.pool, PoolReason.ALLOWANCE),
                 (plan.pool, PoolReason(plan.pool_reason))]  # fmt: skip
        return dataclasses.replace(plan, pool_reason=served_reason(asked, moves))


class ServingChooser:
    def __init__(self, versions: VersionBook, budget: Budget) -> None:
        self._versions = versions
        self._budget = budget

    async def choose(self, user: User, routed_pool: str, kept: str = "") -> ServingChoice:
        """kept: the version a conversation started on ('' for a new one, or a completion,
        which has no stored conversation and so follows the user's slice every call)."""
        assignment = self._versions.serving(user, kept)
        return ServingChoice(assignment, await self._budget.decide(user, routed_pool))
