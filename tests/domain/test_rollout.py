"""The rollout's pure policy: versions, the split by user, the holdout, conversations kept."""

from __future__ import annotations

import pytest

from domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from domain.rollout import (
    BASE_VERSION,
    GateRecord,
    RolloutState,
    Slice,
    Version,
    assign,
    bucket,
    create,
    move_holdout,
    pin_user,
    promote,
    record_gate,
    rollback,
    serving,
    split,
)
from domain.types import Tier

USERS = [f"user-{n}" for n in range(20_000)]


def with_candidate(percent: float, tier: Tier = Tier.FREE) -> RolloutState:
    state = create(RolloutState(), Version("v2", system_prompt="Be terse."), at=1.0)
    return split(state, "v2", tier, percent, at=2.0)


def test_the_bucket_is_stable_and_spread_evenly() -> None:
    assert bucket("alice", "s") == bucket("alice", "s")
    assert bucket("alice", "s") != bucket("alice", "t")
    under_ten = sum(bucket(u, "s") < 10.0 for u in USERS) / len(USERS)
    assert 0.09 < under_ten < 0.11


def test_a_ten_percent_split_puts_the_same_users_on_the_candidate_every_time() -> None:
    state = with_candidate(10.0)
    first = {u for u in USERS if assign(state, u, Tier.FREE).slice is Slice.CANDIDATE}
    again = {u for u in USERS if assign(state, u, Tier.FREE).slice is Slice.CANDIDATE}
    assert first == again
    assert 0.085 < len(first) / len(USERS) < 0.11
    # Plus was not given a share: nobody of Plus is on the candidate.
    assert not any(assign(state, u, Tier.PLUS).slice is Slice.CANDIDATE for u in USERS[:2000])


def test_widening_the_split_keeps_the_users_already_on_the_candidate() -> None:
    narrow = with_candidate(5.0)
    wide = split(narrow, "v2", Tier.FREE, 20.0, at=3.0)
    on_narrow = {u for u in USERS if assign(narrow, u, Tier.FREE).slice is Slice.CANDIDATE}
    on_wide = {u for u in USERS if assign(wide, u, Tier.FREE).slice is Slice.CANDIDATE}
    assert on_narrow < on_wide


def test_the_holdout_is_one_percent_and_stays_on_its_version_after_a_promotion() -> None:
    state = promote(with_candidate(50.0), "v2", at=3.0, force=True)
    held = [u for u in USERS if assign(state, u, Tier.FREE).slice is Slice.HOLDOUT]
    assert 0.007 < len(held) / len(USERS) < 0.013
    assert {assign(state, u, Tier.FREE).version.name for u in held} == {BASE_VERSION}
    others = {assign(state, u, Tier.FREE).version.name for u in USERS if u not in held}
    assert others == {"v2"}
    moved = move_holdout(state, "v2", at=4.0)
    assert {assign(moved, u, Tier.FREE).version.name for u in held} == {"v2"}


def test_a_conversation_keeps_its_version_across_a_split_change() -> None:
    state = with_candidate(100.0)
    user = next(u for u in USERS if assign(state, u, Tier.FREE).slice is Slice.CANDIDATE)
    rolled_back = rollback(state, at=3.0, reason="errors")
    assert serving(rolled_back, user, Tier.FREE, kept="v2").version.name == "v2"
    assert serving(rolled_back, user, Tier.FREE, kept="").version.name == BASE_VERSION


def test_a_pin_wins_over_the_split_and_over_a_kept_version() -> None:
    state = pin_user(with_candidate(0.0), "eval-user", "v2", at=3.0)
    assert serving(state, "eval-user", Tier.FREE, kept=BASE_VERSION).version.name == "v2"
    unpinned = pin_user(state, "eval-user", "", at=4.0)
    assert assign(unpinned, "eval-user", Tier.FREE).slice is not Slice.PINNED


def test_a_new_candidate_starts_a_new_rollout_with_a_new_salt() -> None:
    state = with_candidate(10.0)
    state = create(state, Version("v3", temperature=0.2), at=3.0)
    other = split(state, "v3", Tier.PLUS, 5.0, at=4.0)
    assert other.salt != state.salt
    assert dict(other.percent) == {"plus": 5.0}


def test_the_history_names_each_change() -> None:
    state = rollback(with_candidate(10.0), at=3.0, reason="error share 0.31 > 0.05")
    assert [(c.action, c.version, c.detail) for c in state.history] == [
        ("create", "v2", "the pool's model, its own prompt, temperature 0.7"),
        ("split", "v2", "free 10 %"),
        ("rollback", "v2", "error share 0.31 > 0.05"),
    ]
    assert dict(state.percent) == {"free": 0.0}


def test_bad_changes_are_refused_with_their_reason() -> None:
    state = with_candidate(10.0)
    with pytest.raises(AlreadyExists):
        create(state, Version("v2"), at=3.0)
    with pytest.raises(InvalidArgument):
        create(state, Version("Bad Name"), at=3.0)
    with pytest.raises(InvalidArgument):
        create(state, Version("hot", temperature=3.0), at=3.0)
    with pytest.raises(InvalidArgument):
        split(state, "v2", Tier.FREE, 101.0, at=3.0)
    with pytest.raises(NotFound):
        split(state, "nope", Tier.FREE, 1.0, at=3.0)
    with pytest.raises(FailedPrecondition):
        split(state, BASE_VERSION, Tier.FREE, 1.0, at=3.0)
    with pytest.raises(FailedPrecondition):
        rollback(RolloutState(), at=3.0, reason="x")


def test_promotion_needs_a_gate_passed_against_the_current_version_unless_forced() -> None:
    state = with_candidate(10.0)
    with pytest.raises(FailedPrecondition, match="has no gate result"):
        promote(state, "v2", at=3.0)
    failed = record_gate(state, GateRecord("v2", BASE_VERSION, False, 3.0, "win rate 40 %"))
    with pytest.raises(FailedPrecondition, match="its gate against 'base' failed"):
        promote(failed, "v2", at=4.0)
    passed = record_gate(failed, GateRecord("v2", BASE_VERSION, True, 5.0, "all rules",
                                            100, 105, 103, 100))  # fmt: skip
    assert passed.history[-1].detail == (
        "passed against base over 100 golden pairs, 105 harmful and 103 harmless prompts "
        "(minimum 100 a set): all rules"
    )
    promoted = promote(passed, "v2", at=6.0)
    assert (promoted.current, promoted.candidate, promoted.history[-1].detail) == (
        "v2",
        "",
        "gate passed",
    )
    forced = promote(failed, "v2", at=7.0, force=True)
    assert forced.history[-1].detail == "FORCED without a passing gate"


def test_a_gate_is_refused_against_itself_an_unknown_version_or_below_its_minimum() -> None:
    state = with_candidate(10.0)
    sizes = (100, 105, 103, 100)
    with pytest.raises(InvalidArgument, match="'v2' against itself passes whatever it answers"):
        record_gate(state, GateRecord("v2", "v2", True, 3.0, "all rules", *sizes))
    with pytest.raises(NotFound, match="no version 'gone'"):
        record_gate(state, GateRecord("v2", "gone", True, 3.0, "all rules", *sizes))
    below = GateRecord("v2", BASE_VERSION, True, 3.0, "all rules", 4, 2, 2, 100)
    with pytest.raises(InvalidArgument) as refused:
        record_gate(state, below)
    assert str(refused.value) == (
        "a gate passes only on sets of its minimum size or more: 4 golden pairs, 2 harmful "
        "and 2 harmless prompts (minimum 100 a set)"
    )
    # A pass that says nothing of its sizes (a client from before they were sent) is refused;
    # a failure is recorded whatever it stood on.
    with pytest.raises(InvalidArgument):
        record_gate(state, GateRecord("v2", BASE_VERSION, True, 3.0, "all rules"))
    failed = record_gate(state, GateRecord("v2", BASE_VERSION, False, 3.0, "win rate 40 %"))
    assert failed.gates[-1].passed is False
