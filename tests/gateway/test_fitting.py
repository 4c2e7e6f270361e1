import random

from domain.context import ContextBuilder
from domain.limiter import Limit
from domain.tiers import TierPolicy
from domain.types import Role, Turn
from gateway.planner import MAX_BOUND_TOKENS, _fitted, prompt_on_bound, token_upper_bound
from gateway.stored_context import ContextParts

PLUS = TierPolicy(window_tokens=32_000, max_answer_tokens=4_000, limit=Limit(1, 1))


def test_a_model_with_a_larger_window_changes_nothing() -> None:
    assert _fitted(PLUS, 0) is PLUS
    assert _fitted(PLUS, 128_000) is PLUS


def test_a_smaller_model_window_shrinks_the_tier_window_and_the_answer_reserve() -> None:
    fitted = _fitted(PLUS, 2_048)
    assert (fitted.window_tokens, fitted.max_answer_tokens) == (2_048, 1_024)
    assert _fitted(PLUS, 16_000).max_answer_tokens == 4_000


# A message planned on its token upper bound (gateway/planner.py, prompt_on_bound) must get
# exactly the prompt an exact count would give, or be counted first.

SYSTEM = Turn(Role.SYSTEM, "Be brief.", 5)


def builder(window: int, answer: int = 100) -> ContextBuilder:
    return ContextBuilder(SYSTEM, window, answer)


def history(*tokens: int) -> list[Turn]:
    roles = [Role.USER, Role.ASSISTANT]
    return [Turn(roles[i % 2], f"turn {i}", n) for i, n in enumerate(tokens)]


def test_the_bound_is_at_least_the_count_of_any_byte_level_tokenizer() -> None:
    for text in ["hi", "Écris une phrase 🦉.", "1234567890", " ", "日本語のテキスト"]:
        # Every token holds at least one byte; two more for a word marker and a start token.
        assert token_upper_bound(text) == len(text.encode()) + 2


def test_a_short_message_with_room_to_spare_is_planned_on_its_bound() -> None:
    parts = ContextParts(Turn(Role.SYSTEM, "summary", 30), Turn(Role.USER, "pinned", 10),
                         history(50, 60, 70))  # fmt: skip
    prompt = prompt_on_bound(builder(1000), parts, "What about owls?")
    assert prompt is not None
    assert [t.text for t in prompt.turns] == [
        "Be brief.",
        "summary",
        "turn 0",
        "turn 1",
        "turn 2",
        "pinned",
        "What about owls?",
    ]
    assert prompt.turns[-1].tokens == len(b"What about owls?") + 2
    assert prompt.dropped_turns == 0


def test_where_the_bound_would_drop_a_turn_the_message_is_counted_first() -> None:
    content = "x" * 40  # bound 42; an exact count could be as low as 1
    parts = ContextParts(None, None, history(50, 60))
    # window 260: 5 system + 100 answer + 110 history leaves 45 for the message: fits.
    assert prompt_on_bound(builder(260), parts, content) is not None
    # window 250: 35 left: the bound would drop the oldest turn, an exact count might not.
    assert prompt_on_bound(builder(250), parts, content) is None


def test_where_the_bound_would_drop_the_summary_or_pinned_turn_it_is_counted_first() -> None:
    content = "y" * 40
    with_summary = ContextParts(Turn(Role.SYSTEM, "summary", 100), None, [])
    assert prompt_on_bound(builder(250), with_summary, content) is not None
    assert prompt_on_bound(builder(240), with_summary, content) is None
    with_pinned = ContextParts(None, Turn(Role.USER, "pinned", 100), [])
    assert prompt_on_bound(builder(240), with_pinned, content) is None


def test_a_long_or_oversized_message_is_counted_first() -> None:
    parts = ContextParts(None, None, [])
    assert prompt_on_bound(builder(1_000_000), parts, "z" * MAX_BOUND_TOKENS) is None
    assert prompt_on_bound(builder(1_000_000), parts, "z" * (MAX_BOUND_TOKENS - 2)) is not None
    # Its bound does not fit beside the system prompt and the answer reserve.
    assert prompt_on_bound(builder(120), parts, "z" * 40) is None


def test_a_prompt_on_the_bound_is_the_prompt_of_every_smaller_exact_count() -> None:
    rng = random.Random(7)
    for _ in range(500):
        window = rng.randrange(150, 600)
        parts = ContextParts(
            Turn(Role.SYSTEM, "s", rng.randrange(1, 80)) if rng.random() < 0.5 else None,
            Turn(Role.USER, "p", rng.randrange(1, 40)) if rng.random() < 0.5 else None,
            history(*(rng.randrange(1, 90) for _ in range(rng.randrange(0, 6)))),
        )
        content = "w" * rng.randrange(1, 120)
        planned = prompt_on_bound(builder(window), parts, content)
        if planned is None:
            continue
        exact = Turn(Role.USER, content, rng.randrange(1, token_upper_bound(content) + 1))
        counted = builder(window).build(parts.summary, parts.history, exact, parts.pinned)
        assert [t.text for t in counted.turns] == [t.text for t in planned.turns]
