import pytest

from domain.compaction import (
    FIRST_MESSAGE_HEADER,
    PINNED_HEADER,
    SUMMARY_SECTIONS,
    TASK_HEADER,
    TURN_OVERHEAD_TOKENS,
    CompactionPolicy,
    fold_fitting,
    is_durable_constraint,
    parse_pinned,
    pinned_constraints,
    render_anchor,
    render_pinned,
    render_summary,
    summary_body,
    summary_request,
    tidy_summary,
)
from domain.types import Role, Turn

POLICY = CompactionPolicy()


def turns(*sizes: int) -> list[Turn]:
    roles = [Role.USER, Role.ASSISTANT]
    return [Turn(roles[i % 2], f"t{i}", size) for i, size in enumerate(sizes)]


def needs(since: list[Turn], compacted: bool, window: int = 10_000, summary: int = 0) -> bool:
    return POLICY.needs_compaction(
        window_tokens=window,
        answer_reserve_tokens=1000,
        system_tokens=100,
        summary_tokens=summary,
        pinned_tokens=0,
        since_summary=since,
        compacted=compacted,
    )


# When ----------------------------------------------------------------------------------------


def test_defaults_are_the_specs() -> None:
    assert (POLICY.threshold_share, POLICY.keep_last_turns) == (0.7, 6)
    assert (POLICY.min_tokens_between, POLICY.summary_max_tokens) == (3000, 400)


def test_compacts_once_the_prompt_reaches_70_percent_of_the_budget() -> None:
    # Budget 10,000 - 1,000 = 9,000; 70 % = 6,300; the system prompt has 100 of it.
    assert not needs(turns(*[620] * 9, 619), compacted=False)  # 6,299 in all
    assert needs(turns(*[620] * 10), compacted=False)  # 6,300: reached
    # The summary and the pinned turn count too.
    assert needs(turns(*[620] * 10), compacted=True, summary=3200)


def test_a_short_conversation_has_nothing_to_fold_whatever_its_size() -> None:
    # The first message and the last 6 turns stay: 7 turns fold nothing.
    assert not needs(turns(*[2000] * 7), compacted=False)
    assert needs(turns(*[2000] * 8), compacted=False)
    # After a compaction the summary point is past the first message: 6 turns fold nothing.
    assert not needs(turns(*[2000] * 6), compacted=True)


def test_a_new_summary_waits_for_min_tokens_between() -> None:
    # After a compaction the first 6 turns since the summary were kept, not added.
    kept = turns(*[900] * 6)  # 5,400 + 100 system + 500 summary = 6,000
    assert not needs([*kept, *turns(150, 150)], compacted=True, summary=500)  # 6,300: 300 new
    big = [*kept, *turns(1500, 1400)]  # 2,900 added, load 8,900 <= 9,000
    assert not needs(big, compacted=True, summary=500)
    assert needs([*kept, *turns(1500, 1500)], compacted=True, summary=500)  # 3,000 added


def test_past_the_whole_budget_compaction_does_not_wait() -> None:
    # The builder would drop a turn per message: re-prefilling every turn costs more.
    kept = turns(*[1300] * 6)  # 7,800 + 100 + 500 = 8,400
    assert needs([*kept, *turns(400, 400)], compacted=True, summary=500)  # 9,200 > 9,000
    assert not needs([*kept, *turns(300, 200)], compacted=True, summary=500)  # 8,900


# What --------------------------------------------------------------------------------------


def test_split_keeps_the_first_message_and_the_last_six_turns() -> None:
    branch = turns(*range(10, 22))  # 12 turns
    split = POLICY.split(branch)
    assert split.first == branch[0]
    assert split.folded == tuple(branch[1:6])
    assert split.kept == tuple(branch[6:])
    assert split.fold_end == 6


def test_split_after_a_summary_folds_only_what_the_summary_lacks() -> None:
    branch = turns(*range(10, 30))  # 20 turns; the summary holds the first 8
    split = POLICY.split(branch, already_folded=8)
    assert split.first == branch[0]
    assert split.folded == tuple(branch[8:14])
    assert split.kept == tuple(branch[14:])


def test_split_of_a_short_conversation_folds_nothing() -> None:
    for size in range(8):
        split = POLICY.split(turns(*[5] * size))
        assert split.folded == ()
        assert len(split.kept) == max(0, size - 1)


def test_split_pins_durable_constraints_of_the_folded_user_turns() -> None:
    branch = [
        Turn(Role.USER, "Help me plan meals for a week.", 9),
        Turn(Role.ASSISTANT, "Sure. Never skip breakfast.", 7),  # the assistant's: not pinned
        Turn(Role.USER, "Quick note: I'm vegetarian and can't have dairy. Monday first.", 14),
        *turns(*[5] * 7),
    ]
    split = POLICY.split(branch)
    assert split.pinned == ("Quick note: I'm vegetarian and can't have dairy.",)


def test_fold_only_moves_the_rest_back_to_verbatim() -> None:
    branch = [
        Turn(Role.USER, "task", 5),
        Turn(Role.USER, "Always use metric units.", 5),
        Turn(Role.USER, "Answer in French.", 5),
        *turns(*[5] * 6),
    ]
    split = POLICY.split(branch)
    assert split.pinned == ("Always use metric units.", "Answer in French.")
    partial = split.fold_only(1)
    assert partial.folded == (branch[1],)
    assert partial.kept == tuple(branch[2:])
    assert partial.pinned == ("Always use metric units.",)
    assert partial.fold_end == 2


def test_fold_fitting_takes_the_oldest_turns_within_the_budget() -> None:
    folded = turns(100, 100, 100)
    per_turn = 100 + TURN_OVERHEAD_TOKENS
    assert fold_fitting(folded, 3 * per_turn) == 3
    assert fold_fitting(folded, 3 * per_turn - 1) == 2
    assert fold_fitting(folded, per_turn - 1) == 0


def test_merge_pinned_keeps_each_once_and_the_newest_when_over_the_cap() -> None:
    policy = CompactionPolicy(max_pinned=3)
    merged = policy.merge_pinned(["Never use X.", "I am vegan."], ["never use x.", "Call me Jo."])
    assert merged == ("I am vegan.", "never use x.", "Call me Jo.")
    assert policy.merge_pinned(merged, ["Answer in German."]) == (
        "never use x.",
        "Call me Jo.",
        "Answer in German.",
    )


# Durable constraints -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "sentence",
    [
        "Always answer in bullet points.",
        "Please never use emojis.",
        "You should always cite a source.",
        "From now on, reply in Spanish.",
        "Can you keep it short from now on?",
        "Going forward, assume I use Linux.",
        "Remember that my deadline is Friday.",
        "Keep in mind I have two kids.",
        "Quick note: I'm vegetarian and can't have dairy.",
        "I am allergic to peanuts.",
        "I'm severely allergic to shellfish.",
        "I'm lactose intolerant.",
        "I can't eat gluten.",
        "My allergies are pollen and cats.",
        "Don't use semicolons in the code.",
        "Do not mention my employer.",
        "Avoid using jargon.",
        "Answer in French.",
        "Only reply in German.",
        "Keep answers under 100 words.",
        "Keep your responses short.",
        "My name is Priya.",
        "Call me Sam.",
        "I prefer metric units.",
    ],
)
def test_durable_constraints_are_recognised(sentence: str) -> None:
    assert is_durable_constraint(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "It always rains in London in November.",
        "Why do cats never land on their backs?",
        "Do you always answer this fast?",
        "I remember that trip fondly.",
        "I was a vegetarian for two years in college.",
        "My brother is allergic to peanuts.",
        "Is it true that I can't divide by zero?",
        "The answer in French is bonjour.",
        "Write a poem in under 50 words.",
        "Keep the change.",
        "I don't use Windows much.",
        "What is the capital of Peru?",
        "Translate 'never again' into German.",
    ],
)
def test_ordinary_sentences_are_not_pinned(sentence: str) -> None:
    assert not is_durable_constraint(sentence)


def test_pinned_constraints_are_verbatim_sentences_of_user_turns_each_once() -> None:
    pinned = pinned_constraints(
        [
            Turn(Role.USER, "Hi!  Always use metric units. What is 5 miles in km?", 20),
            Turn(Role.ASSISTANT, "Always happy to help. I am allergic to nothing.", 10),
            Turn(Role.USER, "always use metric units.\nAnd I'm vegan.", 10),
        ]
    )
    assert pinned == ("Always use metric units.", "And I'm vegan.")


# Words ---------------------------------------------------------------------------------------


def test_the_summary_turn_holds_the_first_message_verbatim_then_the_summary() -> None:
    first = "Plan a 3-day trip to Kyoto.\nBudget: 900 EUR."
    rendered = render_summary(first, "\nFacts:\n- likes temples\n")
    assert rendered.startswith(f"{FIRST_MESSAGE_HEADER}\n{first}\n")
    assert rendered.endswith("Facts:\n- likes temples")
    assert first in rendered
    assert summary_body(rendered, first) == "Facts:\n- likes temples"
    # Another first message: nothing to strip, the whole text is the previous summary.
    assert summary_body(rendered, "other") == rendered


def test_pinned_turn_renders_and_parses_back() -> None:
    constraints = ("I am allergic to peanuts.", "Answer in French.")
    rendered = render_pinned(constraints)
    assert rendered.splitlines()[0] == PINNED_HEADER
    assert "- I am allergic to peanuts." in rendered
    assert parse_pinned(rendered) == constraints
    assert render_pinned(()) == "" and parse_pinned("") == ()


def test_the_task_is_re_anchored_before_the_constraints_and_cut_at_a_word() -> None:
    constraints = ("Answer in French.",)
    anchored = render_anchor("Plan a trip\nto Kyoto in May.", constraints, task_chars=400)
    assert anchored == (f"{TASK_HEADER}\nPlan a trip to Kyoto in May.\n{PINNED_HEADER}\n"
                        "- Answer in French.")  # fmt: skip
    assert parse_pinned(anchored) == constraints
    # A task alone parses to no constraints, even where its own lines look like them.
    alone = render_anchor("My list:\n- eggs\n- milk", (), task_chars=400)
    assert alone == f"{TASK_HEADER}\nMy list: - eggs - milk" and parse_pinned(alone) == ()
    cut = render_anchor("word " * 200, (), task_chars=23)
    assert cut == f"{TASK_HEADER}\nword word word word …"
    # A pinned turn written before the task was anchored still parses.
    assert parse_pinned(render_pinned(constraints)) == constraints


def test_the_summary_request_asks_for_structure_and_no_invention() -> None:
    folded = [Turn(Role.USER, "I use Postgres 16.", 6), Turn(Role.ASSISTANT, "Noted.", 2)]
    request = summary_request(POLICY, folded, previous_summary="Facts:\n- runs Linux")
    for section in SUMMARY_SECTIONS:
        assert f"{section}:" in request.instruction
    assert "never add, guess or invent" in request.instruction
    assert "300 words" in request.instruction  # 3/4 of the 400-token cap
    assert "Earlier summary:\nFacts:\n- runs Linux" in request.material
    assert "User: I use Postgres 16.\nAssistant: Noted." in request.material
    assert "Earlier summary" not in summary_request(POLICY, folded, "").material


def test_a_summary_cut_at_its_length_loses_the_unfinished_line() -> None:
    assert tidy_summary("  Facts:\n- a\n- b is hal", cut_at_length=True) == "Facts:\n- a"
    assert tidy_summary("  Facts:\n- a\n- b\n", cut_at_length=False) == "Facts:\n- a\n- b"
    assert tidy_summary("one line cut", cut_at_length=True) == "one line cut"
