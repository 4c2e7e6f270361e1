from dataclasses import replace

from domain.picker import ReplicaLoad
from domain.types import NodeState
from scheduler.table import LoadTable


def load(node_id: str, pool: str = "large") -> ReplicaLoad:
    return ReplicaLoad(node_id, f"{node_id}:1", pool, "m", NodeState.STARTING, 1000, 0)


def test_reports_update_and_silence_makes_a_node_dead_until_it_reports_again() -> None:
    now = [0.0]
    table = LoadTable(lambda: now[0], report_timeout_s=2.0)
    table.join(load("a"), 4096, 8192)
    table.join(load("b", pool="small"), 4096, 8192)
    now[0] = 1.5
    table.report("a", state=NodeState.READY, queued_prefill_tokens=300)
    assert table.pool("large")[0].queued_prefill_tokens == 300
    now[0] = 2.5
    assert table.expire() == ["b"]
    assert table.pool("small")[0].state is NodeState.DEAD
    assert table.expire() == []  # reported once
    now[0] = 3.6
    assert table.expire() == ["a"]
    table.report("a", state=NodeState.READY)
    assert table.pool("large")[0].state is NodeState.READY


def test_an_operator_drain_survives_the_nodes_own_ready_reports() -> None:
    table = LoadTable(lambda: 0.0)
    table.join(load("a"), 4096, 8192)
    table.set_drained("a", True)
    table.report("a", state=NodeState.READY)
    assert table.pool("large")[0].state is NodeState.DRAINING
    table.set_drained("a", False)
    table.report("a", state=NodeState.READY)
    assert table.pool("large")[0].state is NodeState.READY
    assert table.set_drained("unknown", True) is None


def test_only_the_stream_that_owns_an_entry_removes_it() -> None:
    table = LoadTable(lambda: 0.0)
    old = table.join(load("a"), 4096, 8192)
    table.join(load("a"), 4096, 8192)  # the node reconnected
    table.leave("a", old)
    assert [n for n, _ in table.entries()] == ["a"]


def test_picks_follow_reports_drains_and_departures() -> None:
    table = LoadTable(lambda: 0.0)
    entries = {f"r{i}": table.join(load(f"r{i}"), 4096, 8192) for i in range(5)}
    for node_id in entries:
        table.report(node_id, state=NodeState.READY, free_kv_tokens=10_000)
    favourite = table.pick("large", "conv", 100, 100).replica.node_id
    table.set_drained(favourite, True)
    moved = table.pick("large", "conv", 100, 100).replica.node_id
    assert moved != favourite
    table.set_drained(favourite, False)
    assert table.pick("large", "conv", 100, 100).replica.node_id == favourite
    retried = table.pick("large", "conv", 100, 100, excluded={favourite}).replica.node_id
    assert retried != favourite
    table.leave(favourite, entries[favourite])
    # The retry's answer is cached where it ran: the conversation stays there.
    assert table.pick("large", "conv", 100, 100).replica.node_id == retried
    assert table.pick("small", "conv", 100, 100).replica is None


def test_picks_are_counted_by_pool_and_reason() -> None:
    table = LoadTable(lambda: 0.0)
    for node_id in ("r0", "r1"):
        table.join(load(node_id), 4096, 8192)
        table.report(node_id, state=NodeState.READY, free_kv_tokens=10_000)
    first = table.pick("large", "conv", 100, 0).replica.node_id  # nothing cached yet
    table.pick("large", "conv", 200, 150)  # its next turn stays with its cache
    table.pick("large", "conv", 200, 150, excluded={first})  # its replica failed it
    table.pick("small", "conv", 100, 0)
    assert dict(table.pick_counts) == {
        ("large", "cold"): 1,
        ("large", "affinity"): 1,
        ("large", "moved"): 1,
        ("small", "no-replica"): 1,
    }


def test_a_reports_measured_speeds_reach_the_pick() -> None:
    table = LoadTable(lambda: 0.0)
    table.join(load("a"), 4096, 8192)
    table.report("a", state=NodeState.READY, queued_prefill_tokens=600, prefill_tokens_per_s=120.0,
                 decode_step_s=0.02)  # fmt: skip
    assert table.pool("large")[0].decode_step_s == 0.02
    assert table.start_wait_s("large", "a", paid=True) == 5.0  # 600 tokens at 120 a second


def test_a_versions_picks_keep_their_cache_among_the_nodes_of_its_model() -> None:
    """During a rollout the pool serves two models; a version's picks leave out the other's
    nodes and still stay where the conversation's cache is, rather than move every turn."""
    table = LoadTable(lambda: 0.0)
    for i in range(6):
        table.join(replace(load(f"r{i}"), model="new" if i < 3 else "old"), 4096, 8192)
        table.report(f"r{i}", state=NodeState.READY, free_kv_tokens=10_000)
    old = table.other_models("large", "new")
    assert old == {"r3", "r4", "r5"}
    first = table.pick("large", "conv", 100, 0, set_aside=old)
    turns = [
        table.pick("large", "conv", 300 + 100 * t, 200 + 100 * t, set_aside=old) for t in range(4)
    ]
    assert first.replica.node_id not in old
    assert [(p.replica.node_id, p.reason.value) for p in turns] == [
        (first.replica.node_id, "affinity")
    ] * 4
    # A failed node's retry still moves, and never to the other model's nodes.
    retried = table.pick("large", "conv", 800, 700, excluded={first.replica.node_id}, set_aside=old)
    assert retried.reason.value == "moved"
    assert retried.replica.node_id not in old | {first.replica.node_id}
    # Set aside for one pick only: the other model's picks still reach its nodes.
    assert (
        table.pick("large", "conv-old", 100, 50, set_aside={"r0", "r1", "r2"}).replica.node_id
        in old
    )
