from domain.limiter import Limit
from domain.tiers import TierPolicy
from gateway.planner import _fitted

PLUS = TierPolicy(window_tokens=32_000, max_answer_tokens=4_000, limit=Limit(1, 1))


def test_a_model_with_a_larger_window_changes_nothing() -> None:
    assert _fitted(PLUS, 0) is PLUS
    assert _fitted(PLUS, 128_000) is PLUS


def test_a_smaller_model_window_shrinks_the_tier_window_and_the_answer_reserve() -> None:
    fitted = _fitted(PLUS, 2_048)
    assert (fitted.window_tokens, fitted.max_answer_tokens) == (2_048, 1_024)
    assert _fitted(PLUS, 16_000).max_answer_tokens == 4_000
