from domain.shedding import SheddingPolicy, refuse_at_door, shed
from domain.types import Tier

POLICY = SheddingPolicy()


def test_plus_gives_up_nothing_on_any_rung() -> None:
    for rung in range(4):
        assert shed(Tier.PLUS, rung, "large", 4000, POLICY) == shed(
            Tier.PLUS, 0, "large", 4000, POLICY
        )
        assert not refuse_at_door(Tier.PLUS, rung, 60.0, POLICY)


def test_free_goes_small_then_short_then_is_refused_when_the_wait_is_long() -> None:
    assert shed(Tier.FREE, 0, "large", 1000, POLICY) == shed(Tier.FREE, 0, "large", 1000, POLICY)
    assert shed(Tier.FREE, 0, "large", 1000, POLICY).pool == "large"
    assert shed(Tier.FREE, 1, "large", 1000, POLICY).pool == "small"
    assert shed(Tier.FREE, 1, "large", 1000, POLICY).max_answer_tokens == 1000
    assert shed(Tier.FREE, 2, "large", 1000, POLICY).max_answer_tokens == 300
    assert shed(Tier.FREE, 2, "large", 100, POLICY).max_answer_tokens == 100
    assert not refuse_at_door(Tier.FREE, 2, 60.0, POLICY)
    assert not refuse_at_door(Tier.FREE, 3, 2.0, POLICY)
    assert refuse_at_door(Tier.FREE, 3, 2.01, POLICY)
