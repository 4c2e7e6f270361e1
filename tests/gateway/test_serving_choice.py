"""One call decides what serves a message or a completion: the user's version (a pin, a
slice) and the daily allowance's pool, and the plan is marked with both."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry

from domain.budget import DailyAllowance
from domain.context import Prompt
from domain.rollout import RolloutState, Version, create, pin_user
from domain.router import RouteDecision, RouteReason
from domain.types import Tier, Usage, User
from gateway.answers import AnswerPlan
from gateway.daily_budget import DailyBudget, InProcessDailySpend
from gateway.metrics import GatewayMetrics
from gateway.scheduler_client import ReplicaPick
from gateway.serving_choice import ServingChooser
from gateway.versions import VersionBook

EVAL_USER = User("eval-1", Tier.PLUS)
HEAVY_USER = User("heavy-1", Tier.PLUS)


class Source:
    def __init__(self, state: RolloutState) -> None:
        self.state = state

    async def rollout(
        self, known_revision: int, tallies: dict, wait_s: float = 0.0, ratings: tuple = ()
    ) -> tuple[int, RolloutState | None]:
        return 1, self.state


def plan() -> AnswerPlan:
    return AnswerPlan(Prompt((), 0), ReplicaPick("n0", "127.0.0.1:1", "m"), 12, 1.0, "large",
                      Tier.PLUS)  # fmt: skip


async def chooser() -> ServingChooser:
    terse = Version("terse", model="smol", system_prompt="Answer tersely.", temperature=0.3)
    state = pin_user(create(RolloutState(), terse, 1.0), EVAL_USER.user_id, "terse", 2.0)
    book = VersionBook(Source(state))
    await book.refresh()
    spend = InProcessDailySpend()
    budget = DailyBudget(DailyAllowance({Tier.PLUS: 10.0}), spend,
                         GatewayMetrics(CollectorRegistry()), clock=lambda: 86_400.0)  # fmt: skip
    await budget.charge(HEAVY_USER, "large", Usage(input_tokens=100, output_tokens=100))
    return ServingChooser(book, budget)


async def test_a_pinned_user_gets_the_versions_prompt_model_and_greedy_sampling() -> None:
    chosen = await (await chooser()).choose(EVAL_USER, "large")
    assert (chosen.system_prompt(), chosen.system_prompt("My own."), chosen.pool) == (
        "Answer tersely.",
        "My own.",
        "large",
    )
    marked = chosen.applied(plan())
    assert (marked.version, marked.version_model, marked.temperature, marked.slice,
            marked.budget, marked.downgraded) == ("terse", "smol", 0.0, "pinned", "within",
                                                  "")  # fmt: skip


async def test_a_user_past_the_allowance_is_sent_down_a_tier_on_the_current_version() -> None:
    chosen = await (await chooser()).choose(HEAVY_USER, "large")
    marked = chosen.applied(plan())
    assert (chosen.pool, marked.version, marked.temperature, marked.budget,
            marked.downgraded) == ("small", "base", 0.7, "over", "daily_budget")  # fmt: skip


async def test_the_plan_says_the_allowance_moved_a_plus_pick_of_large() -> None:
    chosen = await (await chooser()).choose(HEAVY_USER, "large")
    picked = RouteDecision("large", "large", RouteReason.USER_CHOICE)
    small = dataclasses.replace(plan(), pool="small")
    assert chosen.explained(small, "large", picked).pool_reason == "allowance"
    # Where the planner moved it (the large pool had no replica), the planner's reason.
    fell = dataclasses.replace(plan(), pool="small", pool_reason="fallback")
    within = await (await chooser()).choose(EVAL_USER, "large")
    assert within.explained(fell, "large", picked).pool_reason == "fallback"
    assert within.explained(plan(), "large", picked).pool_reason == ""
