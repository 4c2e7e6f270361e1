import pytest

from domain.ladder import LadderPolicy, LadderState, busy_share, ladder_busy, pin, tick
from domain.picker import ReplicaLoad
from domain.types import NodeState

POLICY = LadderPolicy()


def run(shares: list[float], state: LadderState | None = None) -> list[int]:
    state = state or LadderState()
    rungs = []
    for i, share in enumerate(shares):
        state = tick(state, share, float(i * 10), POLICY)
        rungs.append(state.rung)
    return rungs


def test_climbs_one_rung_per_tick_at_the_lines() -> None:
    assert run([0.84, 0.85, 0.86, 0.92, 0.97, 0.99, 1.0]) == [0, 1, 1, 2, 3, 3, 3]
    assert run([1.0, 1.0, 1.0, 1.0]) == [1, 2, 3, 3]


def test_comes_down_only_seven_points_below_the_line_it_went_up_at() -> None:
    # Up at 85 %: stays at rung 1 from 78 % to 85 %, goes down below 78 %.
    assert run([0.90, 0.80, 0.78, 0.7799]) == [1, 1, 1, 0]
    # From rung 3 (line 97 %) down to 2 below 90 %, then to 1 below 85 %.
    rungs = run([1.0, 1.0, 1.0, 0.91, 0.899, 0.86, 0.849, 0.5, 0.5])
    assert rungs == [1, 2, 3, 3, 2, 2, 1, 0, 0]


def test_history_records_each_move_with_its_reason() -> None:
    state = LadderState()
    for i, share in enumerate([0.9, 0.95, 0.5]):
        state = tick(state, share, float(i), POLICY)
    assert [(c.from_rung, c.to_rung) for c in state.history] == [(0, 1), (1, 2), (2, 1)]
    assert "busy 90%" in state.history[0].reason


def test_a_pin_holds_the_rung_until_unpinned() -> None:
    state = pin(LadderState(rung=1), 3, busy=0.2, now=0.0)
    assert state.effective_rung == 3
    state = tick(state, 0.1, 10.0, POLICY)
    assert state.effective_rung == 3 and state.rung == 1
    state = pin(state, None, busy=0.1, now=20.0)
    assert state.effective_rung == 1
    assert tick(state, 0.1, 30.0, POLICY).rung == 0
    with pytest.raises(ValueError, match=r"0\.\.3"):
        pin(state, 4, 0.0, 0.0)


def test_policy_lines_must_rise() -> None:
    with pytest.raises(ValueError):
        LadderPolicy(up_at=(0.9, 0.8, 0.95))


def replica(kv: float, waiting: int = 0, state=NodeState.READY) -> ReplicaLoad:
    return ReplicaLoad("r", "a", "large", "m", state, 0, 0, 1, waiting, kv_usage=kv)


def test_busy_share_is_kv_fill_or_saturated_when_requests_wait() -> None:
    assert busy_share([replica(0.5), replica(0.7)]) == pytest.approx(0.6)
    assert busy_share([replica(0.5), replica(0.3, waiting=2)]) == pytest.approx(0.75)
    assert busy_share([replica(0.5), replica(0.9, state=NodeState.DEAD)]) == pytest.approx(0.5)
    assert busy_share([replica(0.2, state=NodeState.DEAD)]) == 1.0
    assert busy_share([]) == 0.0


def test_at_rung_0_a_hot_small_pool_does_not_move_the_ladder() -> None:
    # Rung 1 would send Free to the small pool: climbing because it is hot would make it worse.
    assert ladder_busy({"large": 0.5, "small": 0.99}, 0, "large", "small") == 0.5


def test_once_free_is_shed_the_hotter_pool_decides() -> None:
    pools = {"large": 0.80, "small": 0.95}
    assert ladder_busy(pools, 1, "large", "small") == 0.95
    assert ladder_busy({"large": 0.98, "small": 0.3}, 2, "large", "small") == 0.98
    # The ladder then climbs past rung 1 though the large pool alone reads calm.
    state = LadderState(rung=1)
    state = tick(state, ladder_busy(pools, state.rung, "large", "small"), 10.0, LadderPolicy())
    assert state.rung == 2


def test_without_a_shed_to_pool_only_the_watched_pool_counts() -> None:
    assert ladder_busy({"large": 0.6}, 2, "large", "small") == 0.6


def test_a_replica_with_seconds_of_prompts_to_read_counts_as_saturated() -> None:
    reading = ReplicaLoad("r", "a", "p", "m", NodeState.READY, 10, 9_000, kv_usage=0.4)
    light = ReplicaLoad("q", "a", "p", "m", NodeState.READY, 10, 100, kv_usage=0.4)
    assert busy_share([reading, light]) == pytest.approx(0.4)  # no limit: KV use only
    assert busy_share([reading, light], saturated_queue_tokens=4_000) == pytest.approx(0.7)


def test_a_batch_full_by_its_places_counts_as_busy_whatever_its_kv() -> None:
    capped = ReplicaLoad(
        "r", "a", "p", "m", NodeState.READY, 10, 0, 100, 0, kv_usage=0.6, max_running_requests=100
    )
    half = ReplicaLoad(
        "q", "a", "p", "m", NodeState.READY, 10, 0, 50, 0, kv_usage=0.3, max_running_requests=100
    )
    unknown = ReplicaLoad("s", "a", "p", "m", NodeState.READY, 10, 0, 100, 0, kv_usage=0.6)
    assert busy_share([capped]) == 1.0
    assert busy_share([half]) == pytest.approx(0.5)
    assert busy_share([unknown]) == pytest.approx(0.6)  # no limit reported: memory alone
