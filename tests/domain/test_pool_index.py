"""PoolIndex must pick exactly what the pure reference picks: same replica object, same reason,
for any loads, states and sizes, before and after load reports and membership changes."""

import dataclasses
import random

import numpy as np
import pytest

from domain.picker import NEVER_ESCAPE, EscapeRule, Pick, PickReason, ReplicaLoad, pick_replica
from domain.pool_index import PoolIndex
from domain.types import NodeState

STATES = list(NodeState)
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-_é漢"


def random_load(rng: random.Random, node_id: str) -> ReplicaLoad:
    # Small queue ranges half the time, so that several replicas tie for the idlest.
    queue_top = rng.choice([0, 3, 50, 40_000])
    return ReplicaLoad(
        node_id,
        f"{node_id}:7000",
        "large",
        "m",
        rng.choices(STATES, weights=[2, 6, 1, 1])[0],
        rng.randint(0, 200_000),
        rng.randint(0, queue_top),
    )


def random_conversation(rng: random.Random) -> str:
    return "".join(rng.choices(ALPHABET, k=rng.randint(0, 24)))


def assert_same_pick(rng: random.Random, index: PoolIndex, model: list[ReplicaLoad]) -> Pick:
    conversation = random_conversation(rng)
    prompt = rng.choice([0, 1, rng.randint(0, 250_000)])
    reusable = rng.choice([0, prompt, rng.randint(0, 60_000)])
    got = index.pick(conversation, prompt, reusable)
    want = pick_replica(conversation, prompt, reusable, model)
    assert got == want, (conversation, prompt, reusable)
    assert got.replica is want.replica  # the very object, so the Pick carries its address
    return got


@pytest.mark.parametrize(("size", "picks"), [(1, 2000), (2, 2000), (7, 3000), (100, 3000)])
def test_picks_like_the_reference(size: int, picks: int) -> None:
    rng = random.Random(size)
    reasons = set()
    for _ in range(picks // 100):  # a fresh pool now and then: more mixes of states and loads
        model = [random_load(rng, f"node-{i}") for i in range(size)]
        index = PoolIndex(model)
        reasons |= {assert_same_pick(rng, index, model).reason for _ in range(100)}
    if size > 1:  # the random inputs reach every branch of a pool with a pickable replica
        assert reasons >= set(PickReason) - {PickReason.NO_REPLICA, PickReason.MOVED}


def test_picks_like_the_reference_at_fleet_size() -> None:
    rng = random.Random(1000)
    model = [random_load(rng, f"gpu-{i:05d}") for i in range(1000)]
    index = PoolIndex(model)
    for _ in range(1000):
        assert_same_pick(rng, index, model)


@pytest.mark.parametrize("size", [1, 2, 7, 100, 1000])
def test_picks_like_the_reference_through_reports_and_membership_changes(size: int) -> None:
    rng = random.Random(size + 1)
    model = [random_load(rng, f"node-{i}") for i in range(size)]
    index = PoolIndex(model)
    joined = size
    for step in range(600 if size < 1000 else 300):
        roll = rng.random()
        if roll < 0.03 and model:
            leaving = model.pop(rng.randrange(len(model)))
            index.remove(leaving.node_id)
        elif roll < 0.06 or not model:
            model.append(random_load(rng, f"node-{joined}"))
            joined += 1
            index.add(model[-1])
        else:
            i = rng.randrange(len(model))
            model[i] = random_load(rng, model[i].node_id)
            index.update(model[i].node_id, model[i])
        assert index.replicas == tuple(model), step
        for _ in range(3):
            assert_same_pick(rng, index, model)


@pytest.mark.parametrize("remembered", [3, 65_536])
def test_returning_conversations_pick_like_the_reference_as_pickability_changes(
    remembered: int,
) -> None:
    # The index remembers each conversation's favourite; a replica turning (un)pickable or a
    # membership change must never leave a conversation on a stale one.
    rng = random.Random(remembered)
    model = [random_load(rng, f"node-{i}") for i in range(30)]
    index = PoolIndex(model, remembered_favourites=remembered)
    conversations = [random_conversation(rng) for _ in range(12)]
    for step in range(1500):
        roll = rng.random()
        if roll < 0.02:
            leaving = model.pop(rng.randrange(len(model)))
            index.remove(leaving.node_id)
            model.append(random_load(rng, f"new-{step}"))
            index.add(model[-1])
        elif roll < 0.3:
            i = rng.randrange(len(model))
            model[i] = random_load(rng, model[i].node_id)
            index.update(model[i].node_id, model[i])
        conversation = rng.choice(conversations)
        got = index.pick(conversation, 10, 0)
        assert got == pick_replica(conversation, 10, 0, model), step


@pytest.mark.parametrize("size", [1, 7, 566])
def test_favourites_scored_in_blocks_are_the_ones_a_pick_finds(size: int) -> None:
    rng = random.Random(size + 2)
    model = [random_load(rng, f"node-{i}") for i in range(size)]
    model[0] = ReplicaLoad("c", "c", "p", "m", NodeState.READY, 1000, 0)  # scores 0 for "c"
    conversations = ["c", *(random_conversation(rng) for _ in range(2500))]
    index = PoolIndex(model)
    index.remember_favourites(conversations, chunk=300)
    for conversation in conversations:
        want = pick_replica(conversation, 0, 0, model, rule=NEVER_ESCAPE).replica
        assert index.favourite(conversation) is want
        assert index.pick(conversation, 10, 0) == pick_replica(conversation, 10, 0, model)
    dead = dataclasses.replace(model[0], state=NodeState.DEAD)
    assert PoolIndex([dead]).favourite("c") is None


def test_no_replica_when_none_is_pickable() -> None:
    assert PoolIndex().pick("c1", 10, 0) == Pick(None, PickReason.NO_REPLICA)
    rng = random.Random(7)
    states = [NodeState.STARTING, NodeState.DRAINING, NodeState.DEAD] * 3
    model = [ReplicaLoad(f"n{i}", "a", "p", "m", state, 1000, 0) for i, state in enumerate(states)]
    index = PoolIndex(model)
    for _ in range(50):
        assert assert_same_pick(rng, index, model).reason is PickReason.NO_REPLICA
    ready = ReplicaLoad("n4", "a", "p", "m", NodeState.READY, 1000, 0)
    index.update("n4", ready)
    assert index.pick("c1", 10, 0).replica is ready
    index.update("n4", model[4])
    assert index.pick("c1", 10, 0) == Pick(None, PickReason.NO_REPLICA)


def test_a_pickable_replica_scoring_zero_still_wins_alone() -> None:
    # A conversation id equal to a node id hashes the same: that replica's score is mix64(0),
    # 0, the score the index gives replicas it cannot pick.
    model = [
        ReplicaLoad("a", "a", "p", "m", NodeState.DEAD, 1000, 5),
        ReplicaLoad("b", "b", "p", "m", NodeState.DRAINING, 1000, 0),
        ReplicaLoad("c", "c", "p", "m", NodeState.READY, 1000, 9),
    ]
    # A later turn (something cached): a first turn would be placed cold, not by score.
    pick = PoolIndex(model).pick("c", 10, 5)
    assert pick == pick_replica("c", 10, 5, model)
    assert pick.replica is model[2] and pick.reason is PickReason.AFFINITY


def test_a_queue_at_the_int64_limit_is_still_the_idlest() -> None:
    # The index keys unpickable replicas with the int64 maximum; a pickable one there must win.
    top = 2**63 - 1
    model = [
        ReplicaLoad("a", "a", "p", "m", NodeState.DEAD, 1000, 0),
        ReplicaLoad("b", "b", "p", "m", NodeState.READY, 0, top),
        ReplicaLoad("c", "c", "p", "m", NodeState.READY, 0, top),
    ]
    pick = PoolIndex(model).pick("c1", 10, 5)  # a later turn: a first one is placed cold
    assert pick == pick_replica("c1", 10, 5, model)
    assert pick.replica is model[1] and pick.reason is PickReason.ESCAPED_KV_ROOM


def test_update_changes_one_row_in_place() -> None:
    rng = random.Random(3)
    model = [random_load(rng, f"node-{i}") for i in range(100)]
    index = PoolIndex(model)
    hashes, columns = index.hashes, index.columns
    for _ in range(200):
        i = rng.randrange(len(model))
        model[i] = random_load(rng, model[i].node_id)
        index.update(model[i].node_id, model[i])
    assert index.hashes is hashes  # not rebuilt
    for name, column in index.columns.items():
        assert np.shares_memory(column, columns[name]), name
    assert list(columns["pickable"]) == [r.pickable for r in model]
    assert list(columns["free_kv_tokens"]) == [r.free_kv_tokens for r in model]
    assert list(columns["queued_prefill_tokens"]) == [r.queued_prefill_tokens for r in model]
    assert not hashes.flags.writeable and not columns["pickable"].flags.writeable


def test_membership_changes_rebuild_and_keep_order() -> None:
    loads = [ReplicaLoad(f"n{i}", "a", "p", "m", NodeState.READY, 1000, 0) for i in range(4)]
    index = PoolIndex(loads)
    hashes = index.hashes
    index.remove("n1")
    assert index.hashes is not hashes and len(index) == 3 and "n1" not in index
    index.add(loads[1])
    assert [r.node_id for r in index.replicas] == ["n0", "n2", "n3", "n1"]
    assert list(index.hashes) == [hashes[0], hashes[2], hashes[3], hashes[1]]


def test_rejects_what_would_corrupt_the_index() -> None:
    load = ReplicaLoad("n0", "a", "p", "m", NodeState.READY, 1000, 0)
    with pytest.raises(ValueError, match="once"):
        PoolIndex([load, load])
    index = PoolIndex([load])
    with pytest.raises(ValueError, match="already"):
        index.add(load)
    with pytest.raises(ValueError, match="reported as"):
        index.update("n9", load)
    with pytest.raises(KeyError):
        index.update("n9", ReplicaLoad("n9", "a", "p", "m", NodeState.READY, 1000, 0))
    with pytest.raises(KeyError):
        index.remove("n9")


def test_a_report_past_int64_raises_and_leaves_the_index_whole() -> None:
    load = ReplicaLoad("n0", "a", "p", "m", NodeState.READY, 1000, 7)
    index = PoolIndex([load])
    too_big = ReplicaLoad("n0", "a", "p", "m", NodeState.DEAD, 5, 2**64)
    with pytest.raises(OverflowError):
        index.update("n0", too_big)
    with pytest.raises(OverflowError):
        index.add(ReplicaLoad("n1", "a", "p", "m", NodeState.READY, 2**63, 0))
    assert index.replicas == (load,) and index.pick("c1", 10, 0).replica is load
    assert list(index.columns["queued_prefill_tokens"]) == [7]


def _busy_pool() -> list[ReplicaLoad]:
    # Replica r0 is everyone's favourite-to-escape-from: its queue dwarfs any cached prefix.
    loads = [ReplicaLoad("r0", "a:1", "large", "m", NodeState.READY, 10**6, 50_000)]
    loads += [
        ReplicaLoad(f"r{i}", f"a:{i}", "large", "m", NodeState.READY, 10**6, 1_000)
        for i in range(1, 8)
    ]
    return loads


def test_charged_picks_spread_escapes_until_the_next_report() -> None:
    """Between two load reports, escapes must not all herd onto the one replica that looked
    idlest at the last report: each charged pick adds its prefill to its replica's queue."""
    loads = _busy_pool()
    conversations = [f"c{n}" for n in range(4000)]
    escaping = [
        c for c in conversations if PoolIndex(loads).pick(c, 2_000, 500).replica.node_id == "r1"
    ]

    herded = PoolIndex(loads)
    uncharged = {herded.pick(c, 2_000, 500).replica.node_id for c in escaping[:40]}
    charged_index = PoolIndex(loads)
    charged = [charged_index.pick(c, 2_000, 500, charge=True) for c in escaping[:40]]
    assert uncharged == {"r1"}  # the stale view sends every escape to one replica
    assert len({p.replica.node_id for p in charged}) >= 4  # charged picks spread out
    # A report overwrites the charges: the replica's own figure now includes those messages.
    charged_index.update("r1", loads[1])
    assert int(charged_index.columns["queued_prefill_tokens"][1]) == 1_000


def test_a_charged_pick_that_stays_charges_nothing() -> None:
    loads = [ReplicaLoad("only", "a:1", "large", "m", NodeState.READY, 10**6, 0)]
    index = PoolIndex(loads)
    pick = index.pick("c", 3_000, 2_500, charge=True)
    assert pick.reason is PickReason.AFFINITY
    assert int(index.columns["queued_prefill_tokens"][0]) == 0


def test_charged_picks_count_as_sent_until_their_replica_reports() -> None:
    loads = _busy_pool()
    index = PoolIndex(loads)
    picks = [index.pick(f"c{n}", 2_000, 500, charge=True) for n in range(300)]
    index.pick("uncharged", 2_000, 500)  # a pick that is not charged is not counted
    for load in loads:
        landed = sum(p.replica is not None and p.replica.node_id == load.node_id for p in picks)
        assert index.sent_since_report(load.node_id) == landed
    assert sum(index.sent_since_report(load.node_id) for load in loads) == 300
    index.update("r1", loads[1])  # its report now counts what reached it
    assert index.sent_since_report("r1") == 0
    with pytest.raises(KeyError):
        index.sent_since_report("nobody")


def test_the_wait_of_a_pick_counts_the_picks_before_it_not_itself() -> None:
    from domain.start_wait import StartWaitModel, gamma_quantile

    model = StartWaitModel(prefill_tokens_per_s=1_000, answer_s=10.0)
    full = ReplicaLoad(
        "only", "a:1", "large", "m", NodeState.READY, 10**6, 0, 4, 0, max_running_requests=4
    )
    index = PoolIndex([full], EscapeRule(model))
    index.pick("c1", 100, 100, charge=True)
    # Four places, all taken, nobody waiting: the request just picked is first in line.
    first = index.start_wait_s("only", paid=True)
    assert first == pytest.approx(gamma_quantile(1, 0.9) / 0.4)
    index.pick("c2", 100, 100, charge=True)
    assert index.start_wait_s("only", paid=True) == pytest.approx(gamma_quantile(2, 0.9) / 0.4)
    index.update("only", full)  # the report now counts what reached it: nobody waits in it
    assert index.start_wait_s("only", paid=True) == pytest.approx(first)


def test_moved_answers_spread_over_the_shortest_queues_not_their_favourites() -> None:
    """A dead replica's answers move at once; each goes where its prompt starts soonest and
    is charged there, so they fill the survivors' queues evenly instead of piling up."""
    queues = [9_000, 0, 2_000, 4_000, 0, 6_000, 1_000, 3_000]
    loads = [
        ReplicaLoad(f"r{i}", f"a:{i}", "large", "m", NodeState.READY, 10**6, queued)
        for i, queued in enumerate(queues)
    ]
    index = PoolIndex(loads)
    moves = [index.pick_move(3_000, excluded=["r4"]) for _ in range(12)]
    assert {m.reason for m in moves} == {PickReason.MOVED}
    chosen = [m.replica.node_id for m in moves]
    assert "r4" not in chosen and chosen[0] == "r1"
    # Water-filling: after the moves no survivor's queue is more than one prompt over another's
    # among those that took any, and the fullest queue took none.
    after = index.columns["queued_prefill_tokens"]
    took = [i for i in range(8) if f"r{i}" in chosen]
    assert max(after[took]) - min(after[took]) <= 3_000 and "r0" not in chosen
    assert int(after[4]) == 0  # the excluded replica was charged nothing
    # Its next report overwrites the charges, as with any charged pick.
    index.update("r1", loads[1])
    assert int(index.columns["queued_prefill_tokens"][1]) == 0


def test_a_move_with_every_replica_excluded_or_down_finds_none() -> None:
    loads = [
        ReplicaLoad("r0", "a:0", "large", "m", NodeState.READY, 10**6, 0),
        ReplicaLoad("r1", "a:1", "large", "m", NodeState.DEAD, 10**6, 0),
    ]
    index = PoolIndex(loads)
    assert index.pick_move(100, excluded=["r0"]) == Pick(None, PickReason.NO_REPLICA)
    assert index.pick_move(100, excluded=["r9"]).replica.node_id == "r0"  # unknown ids ignored
    full = PoolIndex([ReplicaLoad("r0", "a:0", "large", "m", NodeState.READY, 10**6, 2**63 - 1)])
    assert full.pick_move(100).replica.node_id == "r0"  # a queue at the int64 limit still counts
