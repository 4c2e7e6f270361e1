"""Where a conversation's cache is: a charged pick remembers the replica it sent the
conversation to, the next turn starts there, first turns go where they start soonest, and
waits and the price of a move use each replica's measured reading speed."""

import dataclasses
import random
from collections import Counter

from domain.homes import Homes
from domain.picker import EscapeRule, PickReason, ReplicaLoad, pick_replica
from domain.pool_index import PoolIndex
from domain.start_wait import StartWaitModel
from domain.types import NodeState


def replica(node_id: str, queued: int = 0, **more: object) -> ReplicaLoad:
    return ReplicaLoad(node_id, f"{node_id}:1", "p", "m", NodeState.READY, 100_000, queued,
                       **more)  # type: ignore[arg-type]  # fmt: skip


def test_an_escaped_conversation_stays_where_its_cache_went() -> None:
    loads = [replica(f"r{i}") for i in range(3)]
    index = PoolIndex(loads)
    favourite = index.favourite("c").node_id
    index.update(favourite, replica(favourite, queued=10_000))  # 5 s to start there
    escaped = index.pick("c", 3_000, 2_500, charge=True)
    assert escaped.reason is PickReason.ESCAPED_QUEUE and escaped.replica.node_id != favourite
    # The favourite's queue is gone by the next turn, but the newer prefix is on the other one.
    index.update(favourite, replica(favourite))
    index.update(escaped.replica.node_id, replica(escaped.replica.node_id))
    stayed = index.pick("c", 3_500, 3_100, charge=True)
    assert (
        stayed.reason is PickReason.AFFINITY and stayed.replica.node_id == escaped.replica.node_id
    )
    assert index.home("c") == stayed.replica


def test_an_opening_burst_spreads_evenly_and_each_conversation_stays_put() -> None:
    loads = [replica(f"r{i}") for i in range(3)]
    index = PoolIndex(loads)
    first = {f"c{n}": index.pick(f"c{n}", 500, 0, charge=True) for n in range(12)}
    assert {p.reason for p in first.values()} == {PickReason.COLD}
    assert Counter(p.replica.node_id for p in first.values()) == {"r0": 4, "r1": 4, "r2": 4}
    for node_id in ("r0", "r1", "r2"):  # the reports catch up: every queue read
        index.update(node_id, replica(node_id, running_requests=4))
    again = {c: index.pick(c, 700, 600, charge=True) for c in first}
    assert {c: (p.replica.node_id, p.reason) for c, p in again.items()} == {
        c: (p.replica.node_id, PickReason.AFFINITY) for c, p in first.items()
    }


def test_quiet_arrivals_spread_over_the_replicas_with_the_fewest_answers() -> None:
    # One conversation at a time, each after the reports came in: every queue is empty, and
    # the fewest answers under way decide.
    index = PoolIndex([replica(f"r{i}") for i in range(3)])
    running = Counter[str]()
    for n in range(6):
        node_id = index.pick(f"q{n}", 500, 0, charge=True).replica.node_id
        running[node_id] += 1
        index.update(node_id, replica(node_id, running_requests=running[node_id]))
    assert running == {"r0": 2, "r1": 2, "r2": 2}


def test_a_home_that_cannot_be_picked_falls_back_to_the_favourite_and_a_return_forgets() -> None:
    index = PoolIndex([replica(f"r{i}") for i in range(3)])
    favourite = index.favourite("c").node_id
    index.update(favourite, replica(favourite, queued=10_000))
    home = index.pick("c", 3_000, 2_500, charge=True).replica.node_id
    index.update(home, dataclasses.replace(replica(home), state=NodeState.DRAINING))
    index.update(favourite, replica(favourite))
    assert index.home("c") is None
    assert index.pick("c", 3_000, 2_500, charge=True).replica.node_id == favourite


def test_uncharged_cold_picks_match_the_reference_with_full_batches_and_speeds() -> None:
    rng = random.Random(5)
    for _ in range(200):
        loads = [
            replica(
                f"r{i}",
                queued=rng.choice([0, 0, 300, rng.randint(0, 20_000)]),
                running_requests=rng.randint(0, 8),
                waiting_requests=rng.randint(0, 4),
                max_running_requests=rng.choice([0, 4, 8]),
                kv_usage=rng.choice([0.1, 0.97]),
                prefill_tokens_per_s=rng.choice([0.0, 120.0, 5_000.0]),
            )
            for i in range(rng.randint(1, 6))
        ]
        conversation, prompt = f"c{rng.random()}", rng.randint(1, 4_000)
        assert PoolIndex(loads).pick(conversation, prompt, 0) == pick_replica(
            conversation, prompt, 0, loads
        )


def test_the_price_of_a_move_is_read_at_the_measured_speed_of_its_destination() -> None:
    rule = EscapeRule(StartWaitModel(2_000.0, 13.0))
    loads = [replica(f"r{i}") for i in range(2)]
    favourite = pick_replica("c", 100, 1, loads, rule).replica.node_id
    other = next(r.node_id for r in loads if r.node_id != favourite)

    def with_speeds(there: float, elsewhere: float) -> list[ReplicaLoad]:
        # 3,000 tokens queued on the favourite: 1.5 s to start at 2,000 tokens a second.
        return [replica(favourite, 3_000, prefill_tokens_per_s=there),
                replica(other, prefill_tokens_per_s=elsewhere)]  # fmt: skip

    # Re-reading 2,000 cached tokens: 1 s at the configured speed, 2 s at a measured 1,000.
    assert pick_replica("c", 2_500, 2_000, with_speeds(0, 0), rule).reason is (
        PickReason.ESCAPED_QUEUE
    )
    assert pick_replica("c", 2_500, 2_000, with_speeds(2_000, 1_000), rule).reason is (
        PickReason.AFFINITY
    )
    index = PoolIndex(with_speeds(120, 0), rule)
    assert index.start_wait_s(favourite, paid=True) == 3_000 / 120
    assert index.start_wait_s(other, paid=True) == 0.0


def test_the_memory_is_bounded_and_forgets_the_longest_unwritten_first() -> None:
    homes = Homes(2)
    homes.set(1, "a")
    homes.set(2, "b")
    homes.set(1, "c")  # rewritten: now the newest
    homes.set(3, "d")
    assert (homes.get(1), homes.get(2), homes.get(3), len(homes)) == ("c", None, "d", 2)
