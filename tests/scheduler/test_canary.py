"""The canary watch on the in-process rollout store: the gateways' tallies within the window
decide, a breach rolls the candidate back with its reason, old tallies age out."""

from __future__ import annotations

from domain import rollout
from domain.feedback import RatedAnswer, Rating
from domain.guardrails import Guardrails, Tally
from domain.rollout import Version
from domain.types import Tier
from scheduler.canary import CanaryPolicy, CanaryWatch
from scheduler.main import SchedulerConfig, _canary_policy
from scheduler.rollout import InProcessRolloutStore, RolloutKeeper


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def with_candidate() -> RolloutKeeper:
    keeper = RolloutKeeper(InProcessRolloutStore(), lambda: 50.0)
    await keeper.change(lambda s, at: rollout.create(s, Version("v2"), at))
    await keeper.change(lambda s, at: rollout.split(s, "v2", Tier.FREE, 10.0, at))
    return keeper


def watch(keeper: RolloutKeeper, clock: Clock, rollbacks: list[int]) -> CanaryWatch:
    policy = CanaryPolicy(Guardrails(min_answers=4), window_s=60.0)
    return CanaryWatch(keeper, policy, clock, lambda: rollbacks.append(1))


async def test_a_breach_within_the_window_rolls_the_candidate_back_with_its_reason() -> None:
    keeper, clock, rollbacks = await with_candidate(), Clock(), []
    canary = watch(keeper, clock, rollbacks)
    canary.told({("v2", Tier.FREE): Tally(answers=4, errors=2)})
    canary.told({("base", Tier.FREE): Tally(answers=40, errors=0)})
    await canary.check()
    state, _ = await keeper.read()
    change = state.history[-1]
    assert (change.action, change.version, dict(state.percent), rollbacks) == (
        "rollback",
        "v2",
        {"free": 0.0},
        [1],
    )
    assert change.detail == (
        "automatic: error share 0.50 > 0.00 + 0.05 (4 answers) against base over 60 s"
    )
    await canary.check()  # nothing left to roll back: no second entry
    assert (len((await keeper.read())[0].history), rollbacks) == (len(state.history), [1])


async def test_a_hallucinated_citation_share_rolls_the_candidate_back_with_its_reason() -> None:
    keeper, clock, rollbacks = await with_candidate(), Clock(), []
    rails = Guardrails(min_answers=4, citation_margin=0.02, min_citations=10)
    canary = CanaryWatch(keeper, CanaryPolicy(rails, window_s=60.0), clock,
                         lambda: rollbacks.append(1))  # fmt: skip
    # Answers as good as the current version's; 2 of 6 cited passages made up: too few yet.
    canary.told({("v2", Tier.FREE): Tally(answers=4, citations=6, bad_citations=2)})
    canary.told({("base", Tier.FREE): Tally(answers=40, citations=50, bad_citations=1)})
    await canary.check()
    assert (dict((await keeper.read())[0].percent), rollbacks) == ({"free": 10.0}, [])
    clock.now += 10
    # The gateway's citation check comes after the answer's tally, in a report of its own.
    canary.told({("v2", Tier.FREE): Tally(citations=4, bad_citations=1)})
    await canary.check()
    state, _ = await keeper.read()
    change = state.history[-1]
    assert (change.action, change.version, dict(state.percent), rollbacks) == (
        "rollback",
        "v2",
        {"free": 0.0},
        [1],
    )
    assert change.detail == (
        "automatic: hallucinated citation share 0.30 > 0.02 + 0.02 (10 citations) "
        "against base over 60 s"
    )


def test_the_schedulers_settings_are_the_citation_guardrails() -> None:
    config = SchedulerConfig(canary_citation_margin=0.1, canary_min_citations=7)
    assert _canary_policy(config).rails == Guardrails(citation_margin=0.1, min_citations=7)


async def test_tallies_older_than_the_window_and_too_few_answers_decide_nothing() -> None:
    keeper, clock, rollbacks = await with_candidate(), Clock(), []
    canary = watch(keeper, clock, rollbacks)
    canary.told({("v2", Tier.FREE): Tally(answers=10, errors=10)})
    clock.now += 61
    canary.told({("v2", Tier.FREE): Tally(answers=3, errors=3)})
    await canary.check()
    state, _ = await keeper.read()
    assert (state.history[-1].action, dict(state.percent), rollbacks) == (
        "split",
        {"free": 10.0},
        [],
    )


async def test_the_scores_are_each_versions_tallies_per_tier_within_the_window() -> None:
    keeper, clock, rollbacks = await with_candidate(), Clock(), []
    canary = watch(keeper, clock, rollbacks)
    canary.told({("v2", Tier.FREE): Tally(answers=3, thumbs_up=1, ttft=(1, 0, 2))})
    clock.now += 30
    canary.told({("v2", Tier.FREE): Tally(answers=1, thumbs_down=2, ttft=(0, 1))})
    canary.told({("v2", Tier.PLUS): Tally(answers=5), ("base", Tier.FREE): Tally(answers=9)})
    assert canary.by_tier("v2") == {
        ("v2", Tier.FREE): Tally(answers=4, thumbs_up=1, thumbs_down=2, ttft=(1, 1, 2)),
        ("v2", Tier.PLUS): Tally(answers=5),
    }
    clock.now += 31  # the first tally ages out of the 60 s window
    assert canary.by_tier() == {
        ("v2", Tier.FREE): Tally(answers=1, thumbs_down=2, ttft=(0, 1)),
        ("v2", Tier.PLUS): Tally(answers=5),
        ("base", Tier.FREE): Tally(answers=9),
    }


async def test_the_scores_count_each_rated_answer_once_by_its_newest_rating() -> None:
    keeper, clock, rollbacks = await with_candidate(), Clock(), []
    canary = watch(keeper, clock, rollbacks)
    canary.told({("v2", Tier.FREE): Tally(answers=2, thumbs_up=1)})  # an older gateway's count
    canary.rated([RatedAnswer("u1", "a.answer", "v2", Tier.FREE, Rating.UP),
                  RatedAnswer("u2", "a.answer", "v2", Tier.FREE, Rating.UP)])  # fmt: skip
    clock.now += 30
    # u1 changes their mind: one answer, one rating, now down (and counted from now).
    canary.rated([RatedAnswer("u1", "a.answer", "v2", Tier.FREE, Rating.DOWN)])
    assert canary.by_tier("v2") == {("v2", Tier.FREE): Tally(answers=2, thumbs_up=2, thumbs_down=1)}
    clock.now += 31  # the first report and u2's rating age out; u1's change does not
    assert canary.by_tier() == {("v2", Tier.FREE): Tally(thumbs_down=1)}
