import random

from domain.context import ContextBuilder, segment_text
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


def test_pinned_goes_right_before_the_new_message_and_counts_in_the_fixed_part() -> None:
    builder = ContextBuilder(SYSTEM, window_tokens=300, answer_reserve_tokens=100)
    summary = Turn(Role.SYSTEM, "so far", 40)
    pinned = Turn(Role.SYSTEM, "- I am vegetarian.", 20)
    new = Turn(Role.USER, "q", 10)
    # Budget for history: 300 - 100 - 10 - 40 - 20 - 10 = 120 -> 60 + 50 fit, 30 does not.
    prompt = builder.build(summary, turns(30, 60, 50), new, pinned=pinned)
    assert prompt.turns == (SYSTEM, summary, *turns(30, 60, 50)[1:], pinned, new)
    assert prompt.dropped_turns == 1
    assert prompt.tokens == 190


def test_pinned_is_kept_verbatim_when_all_history_is_dropped() -> None:
    builder = ContextBuilder(SYSTEM, window_tokens=200, answer_reserve_tokens=100)
    pinned = Turn(Role.SYSTEM, "Constraints:\n- Never use semicolons.", 25)
    prompt = builder.build(None, turns(500, 400, 300), Turn(Role.USER, "q", 10), pinned)
    assert prompt.turns == (SYSTEM, pinned, Turn(Role.USER, "q", 10))
    assert prompt.turns[1].text == "Constraints:\n- Never use semicolons."
    assert prompt.dropped_turns == 3


def test_a_summary_too_big_to_fit_beside_the_message_goes_before_the_pinned_turn() -> None:
    builder = ContextBuilder(SYSTEM, window_tokens=200, answer_reserve_tokens=50)
    summary = Turn(Role.SYSTEM, "long digest", 100)
    pinned = Turn(Role.SYSTEM, "rules", 30)
    new = Turn(Role.USER, "q", 100)  # room beside it: 200 - 50 - 10 - 100 = 40
    prompt = builder.build(summary, turns(5), new, pinned)
    assert prompt.turns == (SYSTEM, *turns(5), pinned, new)
    tight = builder.build(summary, [], Turn(Role.USER, "q", 130), pinned)  # room: 10
    assert tight.turns == (SYSTEM, Turn(Role.USER, "q", 130))


def test_without_pinned_existing_callers_get_the_same_prompt() -> None:
    builder = ContextBuilder(SYSTEM, window_tokens=500, answer_reserve_tokens=100)
    history, new = turns(50, 60), Turn(Role.USER, "q", 5)
    assert builder.build(None, history, new) == builder.build(None, history, new, pinned=None)


def test_the_prompt_never_exceeds_the_window_less_the_answer_reserve() -> None:
    """Property-style: random windows, reserves, summaries, pinned turns and histories."""
    rng = random.Random(2024)
    for _ in range(3000):
        window = rng.randint(50, 4000)
        reserve = rng.randint(0, window // 2)
        system = Turn(Role.SYSTEM, "s", rng.randint(1, 200))
        builder = ContextBuilder(system, window, reserve)
        new = Turn(Role.USER, "q", rng.randint(1, 800))
        if not builder.fits_alone(new):
            continue  # the gateway refuses such a message before building anything
        summary = Turn(Role.SYSTEM, "sum", rng.randint(1, 600)) if rng.random() < 0.7 else None
        pinned = Turn(Role.SYSTEM, "pin", rng.randint(1, 150)) if rng.random() < 0.7 else None
        history = turns(*(rng.randint(1, 400) for _ in range(rng.randint(0, 30))))
        prompt = builder.build(summary, history, new, pinned)
        assert prompt.tokens <= window - reserve
        assert prompt.turns[0] == system and prompt.turns[-1] == new
        kept = [t for t in prompt.turns if t in history]
        # The newest turns, contiguous: no hole in the conversation.
        assert kept == history[len(history) - len(kept) :]
        assert prompt.dropped_turns == len(history) - len(kept)
        if pinned is not None and system.tokens + new.tokens + pinned.tokens <= window - reserve:
            assert prompt.turns[-2] == pinned  # it survives whatever history is dropped


def test_memories_sit_after_the_system_prompt_and_before_the_summary() -> None:
    builder = ContextBuilder(SYSTEM, window_tokens=1000, answer_reserve_tokens=100)
    memories = Turn(Role.SYSTEM, "remembered", 40)
    summary = Turn(Role.SYSTEM, "so far", 30)
    pinned = Turn(Role.SYSTEM, "rules", 5)
    history = turns(20, 20)
    new = Turn(Role.USER, "q", 5)
    prompt = builder.build(summary, history, new, pinned, memories)
    assert prompt.turns == (SYSTEM, memories, summary, *history, pinned, new)
    assert builder.build(None, history, new, None, memories).turns == (
        SYSTEM, memories, *history, new)  # fmt: skip


def test_memories_are_the_first_extra_left_out_of_a_full_window() -> None:
    # Room beside the system prompt, the answer reserve and the message: 200 - 50 - 10 - 10.
    builder = ContextBuilder(SYSTEM, window_tokens=200, answer_reserve_tokens=50)
    memories = Turn(Role.SYSTEM, "remembered", 60)
    summary = Turn(Role.SYSTEM, "so far", 100)
    pinned = Turn(Role.SYSTEM, "rules", 20)
    new = Turn(Role.USER, "q", 10)
    prompt = builder.build(summary, [], new, pinned, memories)
    assert prompt.turns == (SYSTEM, summary, pinned, new)
    # With no summary the memories fit.
    assert builder.build(None, [], new, pinned, memories).turns == (SYSTEM, memories, pinned, new)


def test_the_segment_turn_follows_the_system_prompt_and_is_always_kept() -> None:
    text = segment_text("  Warm and brief. ", ["Pays for Plus", "  "])
    assert text == "How to answer:\nWarm and brief.\n\nAbout the user:\n- Pays for Plus"
    assert segment_text("", []) == "" and segment_text("", ["x"]) == "About the user:\n- x"
    segment = Turn(Role.SYSTEM, text, 30)
    builder = ContextBuilder(SYSTEM, window_tokens=200, answer_reserve_tokens=50, segment=segment)
    memories = Turn(Role.SYSTEM, "remembered", 20)
    new = Turn(Role.USER, "q", 10)
    history = turns(40, 40, 40)
    prompt = builder.build(None, history, new, None, memories)
    # Budget for history: 200 - 50 - 10 - 30 - 20 - 10 = 80: the two newest turns.
    assert prompt.turns == (SYSTEM, segment, memories, *history[1:], new)
    # The segment counts where the system prompt does: a message that fits beside the system
    # prompt alone may not fit beside both.
    big = Turn(Role.USER, "big", 115)
    assert ContextBuilder(SYSTEM, 200, 50).fits_alone(big) and not builder.fits_alone(big)
