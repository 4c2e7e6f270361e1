import json
from pathlib import Path

import pytest

from domain.pools import LARGE_POOL, SMALL_POOL
from domain.router import (
    RouteDecision,
    Router,
    RouteReason,
    RouteRequest,
    ladder_pool,
)
from domain.types import Tier

ROUTER = Router(threshold=0.5, fallback_max_words=40)
EASY, HARD = 0.1, 0.9


def route(
    *,
    score: float | None = EASY,
    current: str | None = None,
    picked: str | None = None,
    tier: Tier = Tier.FREE,
    shed_to: str | None = None,
    text: str = "hi",
) -> RouteDecision:
    return ROUTER.route(RouteRequest(text, tier, current, picked, score, shed_to))


def test_a_new_conversation_goes_where_the_score_says() -> None:
    assert route(score=EASY) == RouteDecision(SMALL_POOL, SMALL_POOL, RouteReason.CLASSIFIER)
    assert route(score=HARD) == RouteDecision(LARGE_POOL, LARGE_POOL, RouteReason.CLASSIFIER)
    # The threshold itself is hard: "below the threshold goes small".
    assert route(score=0.5).pool == LARGE_POOL


def test_without_a_score_short_plain_messages_go_small_and_the_rest_large() -> None:
    short = route(score=None, text="what's the capital of peru?")
    assert short == RouteDecision(SMALL_POOL, SMALL_POOL, RouteReason.FALLBACK_SHORT)
    long = route(score=None, text="word " * 41)
    assert long == RouteDecision(LARGE_POOL, LARGE_POOL, RouteReason.FALLBACK_LONG)
    assert route(score=None, text="word " * 40).pool == SMALL_POOL
    code = route(score=None, text="fix it\n```python\nprint(x\n```")
    assert code == RouteDecision(LARGE_POOL, LARGE_POOL, RouteReason.FALLBACK_LONG)


def test_a_plus_users_pick_wins_every_time() -> None:
    for current in (None, SMALL_POOL, LARGE_POOL):
        for score in (EASY, HARD, None):
            for picked in (SMALL_POOL, LARGE_POOL):
                decision = route(score=score, current=current, picked=picked, tier=Tier.PLUS)
                assert decision == RouteDecision(picked, picked, RouteReason.USER_CHOICE)


def test_a_free_users_pick_is_routed_as_auto() -> None:
    assert route(score=EASY, picked=LARGE_POOL) == route(score=EASY)
    assert route(score=HARD, current=LARGE_POOL, picked=SMALL_POOL).pool == LARGE_POOL


def test_a_small_conversation_escalates_once_then_stays_large() -> None:
    first = route(score=EASY)
    assert first.conversation_pool == SMALL_POOL
    assert route(score=EASY, current=first.conversation_pool).reason is RouteReason.STICKY
    escalated = route(score=HARD, current=first.conversation_pool)
    assert escalated == RouteDecision(LARGE_POOL, LARGE_POOL, RouteReason.ESCALATED)
    # Once large, a hard message is no escalation and an easy one no way back.
    for score in (HARD, EASY, None):
        after = route(score=score, current=escalated.conversation_pool)
        assert after == RouteDecision(LARGE_POOL, LARGE_POOL, RouteReason.STICKY)


def test_a_large_conversation_never_comes_down() -> None:
    for score in (0.0, EASY, None):
        for text in ("ok", "thanks!"):
            decision = route(score=score, current=LARGE_POOL, text=text)
            assert decision == RouteDecision(LARGE_POOL, LARGE_POOL, RouteReason.STICKY)


def test_without_a_score_a_small_conversation_does_not_spend_its_escalation() -> None:
    long_code = "please debug\n```c\nint main() { return 1 }\n```\n" + "context " * 100
    decision = route(score=None, current=SMALL_POOL, text=long_code)
    assert decision == RouteDecision(SMALL_POOL, SMALL_POOL, RouteReason.STICKY)


def test_rung_one_sheds_free_to_small_without_moving_the_conversation() -> None:
    shed_to = ladder_pool(Tier.FREE, 1)
    assert shed_to == SMALL_POOL
    on_rung = route(score=HARD, current=LARGE_POOL, shed_to=shed_to)
    assert on_rung == RouteDecision(SMALL_POOL, LARGE_POOL, RouteReason.SHED)
    # A new hard conversation is stored large while it runs small, so it is large afterwards.
    new = route(score=HARD, shed_to=shed_to)
    assert new == RouteDecision(SMALL_POOL, LARGE_POOL, RouteReason.SHED)
    # The rung drops: the conversation is where it was.
    after = route(score=EASY, current=on_rung.conversation_pool, shed_to=ladder_pool(Tier.FREE, 0))
    assert after == RouteDecision(LARGE_POOL, LARGE_POOL, RouteReason.STICKY)


def test_shedding_a_message_already_small_is_not_counted_as_shed() -> None:
    decision = route(score=EASY, current=SMALL_POOL, shed_to=SMALL_POOL)
    assert decision == RouteDecision(SMALL_POOL, SMALL_POOL, RouteReason.STICKY)


def test_an_escalation_while_shed_is_kept_for_when_the_rung_drops() -> None:
    decision = route(score=HARD, current=SMALL_POOL, shed_to=SMALL_POOL)
    assert decision == RouteDecision(SMALL_POOL, LARGE_POOL, RouteReason.SHED)


def test_plus_is_never_shed() -> None:
    for rung in range(4):
        assert ladder_pool(Tier.PLUS, rung) is None
    # Even when a caller passes a forced pool for Plus, it is ignored.
    plus = route(score=HARD, current=LARGE_POOL, tier=Tier.PLUS, shed_to=SMALL_POOL)
    assert plus == RouteDecision(LARGE_POOL, LARGE_POOL, RouteReason.STICKY)
    picked = route(score=EASY, picked=LARGE_POOL, tier=Tier.PLUS, shed_to=SMALL_POOL)
    assert picked.pool == LARGE_POOL


def test_ladder_pool_follows_the_rungs() -> None:
    assert ladder_pool(Tier.FREE, 0) is None
    assert [ladder_pool(Tier.FREE, rung) for rung in (1, 2, 3)] == [SMALL_POOL] * 3


def test_unknown_pools_and_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown pool"):
        route(current="medium")
    with pytest.raises(ValueError, match="unknown pool"):
        route(picked="gpt-9", tier=Tier.PLUS)
    with pytest.raises(ValueError, match="probability"):
        Router(threshold=1.5)
    with pytest.raises(ValueError, match="negative"):
        Router(threshold=0.5, fallback_max_words=-1)


def test_the_default_fallback_keeps_most_hard_messages_off_small() -> None:
    root = Path(__file__).resolve().parents[2]
    lines = (root / "data" / "router" / "messages.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    router = Router(threshold=0.5)

    def small_share(label: str) -> float:
        texts = [r["text"] for r in rows if r["label"] == label]
        decisions = [router.route(RouteRequest(t, Tier.FREE, None, None, None)) for t in texts]
        return sum(d.pool == SMALL_POOL for d in decisions) / len(texts)

    assert small_share("hard") < 0.15
    assert small_share("easy") > 0.7
