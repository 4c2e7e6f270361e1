from domain.context import ContextBuilder
from domain.types import Role, Turn

SYSTEM = Turn(Role.SYSTEM, "be brief", 10)


def turns(*sizes: int) -> list[Turn]:
    roles = [Role.USER, Role.ASSISTANT]
    return [Turn(roles[i % 2], f"t{i}", size) for i, size in enumerate(sizes)]


def test_everything_fits_in_order_with_stable_parts_first() -> None:
    builder = ContextBuilder(SYSTEM, window_tokens=1000, answer_reserve_tokens=100)
    history = turns(50, 60, 70)
    new = Turn(Role.USER, "next", 5)
    prompt = builder.build(None, history, new)
    assert prompt.turns == (SYSTEM, *history, new)
    assert prompt.dropped_turns == 0
    assert prompt.tokens == 10 + 50 + 60 + 70 + 5


def test_keeps_newest_turns_and_stops_at_first_misfit() -> None:
    # Budget for history: 300 - 100 - 10 - 20 = 170.
    builder = ContextBuilder(SYSTEM, window_tokens=300, answer_reserve_tokens=100)
    history = turns(10, 500, 40, 60, 50)  # 50 + 60 + 40 = 150 fit; 500 does not
    prompt = builder.build(None, history, Turn(Role.USER, "q", 20))
    kept = prompt.turns[1:-1]
    assert [t.text for t in kept] == ["t2", "t3", "t4"]
    # The 10-token turn before the misfit would fit, but taking it would leave a hole.
    assert prompt.dropped_turns == 2


def test_summary_sits_after_system_prompt_and_counts_against_budget() -> None:
    builder = ContextBuilder(SYSTEM, window_tokens=200, answer_reserve_tokens=50)
    summary = Turn(Role.SYSTEM, "so far", 100)
    prompt = builder.build(summary, turns(30, 15), Turn(Role.USER, "q", 10))
    # Budget: 200 - 50 - 10 - 10 - 100 = 30 -> only the newest (15) fits, then 30 > 15 left.
    assert prompt.turns[:2] == (SYSTEM, summary)
    assert [t.text for t in prompt.turns[2:-1]] == ["t1"]
    assert prompt.dropped_turns == 1


def test_fits_alone_accounts_for_system_and_answer_reserve() -> None:
    builder = ContextBuilder(SYSTEM, window_tokens=100, answer_reserve_tokens=40)
    assert builder.fits_alone(Turn(Role.USER, "x", 50))
    assert not builder.fits_alone(Turn(Role.USER, "x", 51))
