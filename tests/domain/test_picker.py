import dataclasses
from collections import Counter

from domain.picker import NEVER_ESCAPE, PickReason, ReplicaLoad, fnv1a64, pick_replica
from domain.types import NodeState


def replica(node_id: str, queued: int = 0, free_kv: int = 100_000, state=NodeState.READY):
    return ReplicaLoad(node_id, f"{node_id}:1", "large", "m", state, free_kv, queued)


def test_fnv1a64_matches_reference_vectors() -> None:
    # Published FNV-1a 64-bit test vectors.
    assert fnv1a64("") == 0xCBF29CE484222325
    assert fnv1a64("a") == 0xAF63DC4C8601EC8C
    assert fnv1a64("foobar") == 0x85944171F73967E8


def test_same_conversation_gets_the_same_replica_every_time() -> None:
    replicas = [replica(f"r{i}") for i in range(8)]
    picks = {pick_replica("conv-42", 500, 400, replicas).replica.node_id for _ in range(20)}
    assert len(picks) == 1
    # ...and in another order of the table.
    again = pick_replica("conv-42", 500, 400, list(reversed(replicas)))
    assert again.replica.node_id in picks
    assert again.reason is PickReason.AFFINITY


def test_conversations_spread_over_replicas() -> None:
    replicas = [replica(f"r{i}") for i in range(4)]
    counts = Counter(pick_replica(f"c{i}", 10, 0, replicas).replica.node_id for i in range(4000))
    assert set(counts) == {"r0", "r1", "r2", "r3"}
    assert min(counts.values()) > 800  # 1,000 each on average


def test_a_leaving_replica_moves_only_its_own_conversations() -> None:
    replicas = [replica(f"r{i}") for i in range(10)]
    before = {f"c{i}": pick_replica(f"c{i}", 10, 10, replicas).replica.node_id for i in range(3000)}
    remaining = [r for r in replicas if r.node_id != "r3"]
    after = {c: pick_replica(c, 10, 10, remaining).replica.node_id for c in before}
    moved = [c for c in before if before[c] != after[c]]
    assert all(before[c] == "r3" for c in moved)
    assert 0.05 < len(moved) / len(before) < 0.15  # about 1/10


def test_escapes_a_favourite_without_kv_room() -> None:
    replicas = [replica(f"r{i}") for i in range(4)]
    favourite = pick_replica("c1", 100, 90, replicas).replica.node_id
    crowded = [
        replica(r.node_id, free_kv=50 if r.node_id == favourite else 100_000) for r in replicas
    ]
    pick = pick_replica("c1", 100, 90, crowded)
    assert pick.reason is PickReason.ESCAPED_KV_ROOM
    assert pick.replica.node_id != favourite


def test_escapes_only_when_extra_queue_exceeds_the_saved_prefill() -> None:
    replicas = [replica(f"r{i}") for i in range(4)]
    favourite = pick_replica("c1", 3000, 2600, replicas).replica.node_id

    def with_queue(queued: int) -> list[ReplicaLoad]:
        return [
            replica(r.node_id, queued=queued if r.node_id == favourite else 0) for r in replicas
        ]

    assert pick_replica("c1", 3000, 2600, with_queue(2600)).replica.node_id == favourite
    escaped = pick_replica("c1", 3000, 2600, with_queue(2601))
    assert escaped.reason is PickReason.ESCAPED_QUEUE
    assert escaped.replica.node_id != favourite


def test_draining_and_starting_replicas_are_never_picked() -> None:
    replicas = [
        replica("a", state=NodeState.DRAINING),
        replica("b", state=NodeState.STARTING),
        replica("c"),
    ]
    for i in range(50):
        assert pick_replica(f"c{i}", 10, 0, replicas).replica.node_id == "c"
    none = pick_replica("c1", 10, 0, replicas[:2])
    assert none.replica is None and none.reason is PickReason.NO_REPLICA


def test_a_favourite_that_starts_within_a_second_keeps_its_conversation() -> None:
    """The default rule reads 2,000 prompt tokens a second and leaves a favourite only past a
    1 s wait: a short queue is not worth re-reading any history elsewhere."""
    replicas = [replica(f"r{i}") for i in range(4)]
    favourite = pick_replica("c1", 300, 0, replicas).replica.node_id

    def with_queue(queued: int) -> list[ReplicaLoad]:
        return [
            replica(r.node_id, queued=queued if r.node_id == favourite else 0) for r in replicas
        ]

    # A later turn (1 token cached: a first turn is placed cold, where it starts soonest).
    assert pick_replica("c1", 300, 1, with_queue(1_900)).reason is PickReason.AFFINITY
    assert pick_replica("c1", 300, 1, with_queue(2_100)).reason is PickReason.ESCAPED_QUEUE


def test_a_full_batch_is_a_wait_the_prompt_queue_does_not_show() -> None:
    replicas = [replica(f"r{i}") for i in range(4)]
    favourite = pick_replica("c1", 3000, 2600, replicas).replica.node_id

    def full(r: ReplicaLoad) -> ReplicaLoad:
        # All 10 places taken and 20 waiting: places open about every 1.3 s.
        return dataclasses.replace(
            r, running_requests=10, waiting_requests=20, max_running_requests=10
        )

    hot = [full(r) if r.node_id == favourite else r for r in replicas]
    escaped = pick_replica("c1", 3000, 2600, hot)
    assert escaped.reason is PickReason.ESCAPED_QUEUE and escaped.replica.node_id != favourite
    # Every replica as full: nowhere starts sooner, so the cache wins.
    assert pick_replica("c1", 3000, 2600, [full(r) for r in replicas]).replica.node_id == favourite


def test_a_full_batch_of_short_answers_keeps_its_conversation() -> None:
    """Two places, both taken, one waiting: with the configured answers of 13 s the wait is
    worth re-reading 1,400 tokens elsewhere (0.7 s at 2,000 a second); with the answers the
    replica measured, 0.5 s each, it is not. The race's CPU engines answer in a few seconds,
    and the configured figure sent one turn in five away from its cache."""
    replicas = [replica(f"r{i}") for i in range(3)]
    favourite = pick_replica("c1", 1500, 1400, replicas).replica.node_id

    def busy(answer_s: float) -> list[ReplicaLoad]:
        return [
            dataclasses.replace(
                r, running_requests=2, waiting_requests=1, max_running_requests=2, answer_s=answer_s
            )
            if r.node_id == favourite
            else r
            for r in replicas
        ]

    assert pick_replica("c1", 1500, 1400, busy(0.0)).reason is PickReason.ESCAPED_QUEUE
    kept = pick_replica("c1", 1500, 1400, busy(0.5))
    assert (kept.reason, kept.replica.node_id) == (PickReason.AFFINITY, favourite)


def test_a_queue_one_answer_longer_than_the_idlest_is_priced_at_its_mean_wait() -> None:
    """Every replica's two places taken, answers of 6 s (a place opens every 3 s on average):
    the favourite has one more request waiting than the idlest. On average it starts 3 s
    later; at 9 in 10, 11.6 s against 6.8. Re-reading 480 cached tokens elsewhere at 120 a
    second takes 4 s, more than the 3 s saved: the conversation stays. 240 tokens (2 s) are
    worth leaving."""
    replicas = [replica(f"r{i}") for i in range(3)]
    favourite = pick_replica("c1", 600, 480, replicas).replica.node_id

    def busy(r: ReplicaLoad) -> ReplicaLoad:
        return dataclasses.replace(
            r, running_requests=2, max_running_requests=2, answer_s=6.0,
            prefill_tokens_per_s=120.0, waiting_requests=1 if r.node_id == favourite else 0,
        )  # fmt: skip

    loaded = [busy(r) for r in replicas]
    kept = pick_replica("c1", 600, 480, loaded)
    assert (kept.reason, kept.replica.node_id) == (PickReason.AFFINITY, favourite)
    moved = pick_replica("c1", 600, 240, loaded)
    assert moved.reason is PickReason.ESCAPED_QUEUE and moved.replica.node_id != favourite


def test_never_escape_keeps_the_favourite_unless_the_prompt_cannot_fit() -> None:
    replicas = [replica(f"r{i}") for i in range(4)]
    favourite = pick_replica("c1", 100, 0, replicas).replica.node_id
    swamped = [replica(r.node_id, queued=10**9 if r.node_id == favourite else 0) for r in replicas]
    assert pick_replica("c1", 100, 0, swamped, NEVER_ESCAPE).replica.node_id == favourite
    no_room = [
        replica(r.node_id, free_kv=10 if r.node_id == favourite else 10**6) for r in replicas
    ]
    assert pick_replica("c1", 100, 0, no_room, NEVER_ESCAPE).reason is PickReason.ESCAPED_KV_ROOM
