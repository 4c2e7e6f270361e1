"""The live load table: which replicas exist, how loaded they are, and how to reach them.

Only the scheduler's event loop mutates it; readers get immutable ReplicaLoad snapshots. Each
pool keeps a PoolIndex beside the entries, updated in place with every report, so a pick
costs a few numpy calls instead of a loop over the pool.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace

from domain.picker import DEFAULT_ESCAPE, EscapeRule, Pick, ReplicaLoad
from domain.pool_index import PoolIndex
from domain.types import NodeState


@dataclass(slots=True)
class NodeEntry:
    load: ReplicaLoad
    context_tokens: int
    kv_capacity_tokens: int
    last_report_at: float
    # What the node is told over its stream: True to drain, False to take answers again.
    commands: asyncio.Queue[bool] = field(default_factory=asyncio.Queue)
    drained_by_operator: bool = False


class LoadTable:
    def __init__(
        self,
        clock: Callable[[], float],
        report_timeout_s: float = 2.0,
        escape: EscapeRule = DEFAULT_ESCAPE,
    ) -> None:
        self._clock = clock
        self._escape = escape
        self._report_timeout_s = report_timeout_s
        self._nodes: dict[str, NodeEntry] = {}
        self._indexes: dict[str, PoolIndex] = {}
        # Picks made so far by (pool, reason): how a race reads decision by decision.
        self.pick_counts: Counter[tuple[str, str]] = Counter()
        # Load reports taken, by pool: each is a message at both ends of a node's stream.
        self.report_counts: Counter[str] = Counter()

    def join(self, load: ReplicaLoad, context_tokens: int, kv_capacity_tokens: int) -> NodeEntry:
        previous = self._nodes.get(load.node_id)
        entry = NodeEntry(load, context_tokens, kv_capacity_tokens, self._clock())
        if previous is not None:
            entry.drained_by_operator = previous.drained_by_operator
            self._unindex(previous.load)
        self._nodes[load.node_id] = entry
        self._indexes.setdefault(load.pool, PoolIndex(rule=self._escape)).add(load)
        return entry

    def _set_load(self, entry: NodeEntry, load: ReplicaLoad) -> None:
        entry.load = load
        self._indexes[load.pool].update(load.node_id, load)

    def _unindex(self, load: ReplicaLoad) -> None:
        index = self._indexes[load.pool]
        index.remove(load.node_id)
        if not len(index):
            del self._indexes[load.pool]

    def pick(
        self,
        pool: str,
        conversation_id: str,
        prompt_tokens: int,
        reusable_prefix_tokens: int,
        excluded: Collection[str] = (),
        set_aside: Collection[str] = (),
    ) -> Pick:
        """`excluded`: replicas that failed this answer; `set_aside`: replicas that may not
        serve it (another model), among which the usual pick is made."""
        index = self._indexes.get(pool) or PoolIndex()
        if not excluded:
            pick = index.pick(conversation_id, prompt_tokens, reusable_prefix_tokens,
                              charge=True, set_aside=set_aside)  # fmt: skip
        else:
            # A retry away from replicas that failed: the answer moves, and spreads (PoolIndex).
            pick = index.pick_move(prompt_tokens, {*excluded, *set_aside}, conversation_id)
        self.pick_counts[pool, pick.reason.value] += 1
        return pick

    def other_models(self, pool: str, model: str) -> frozenset[str]:
        """The pool's nodes that serve another model than `model` ('' : none)."""
        if not model:
            return frozenset()
        return frozenset(n.node_id for n in self.pool(pool) if n.model != model)

    def start_wait_s(self, pool: str, node_id: str, paid: bool) -> float:
        """The wait of a request just picked for the node (PoolIndex.start_wait_s, with the
        escape rule's model); 0 for a node no longer in the pool."""
        index = self._indexes.get(pool)
        return index.start_wait_s(node_id, paid) if index and node_id in index else 0.0

    def report(self, node_id: str, **fields: object) -> None:
        entry = self._nodes.get(node_id)
        if entry is None:
            return
        # The reporter names ReplicaLoad's fields with their own types; **fields cannot say so.
        load = replace(entry.load, **fields)  # type: ignore[arg-type]
        if entry.drained_by_operator and load.state is NodeState.READY:
            load = replace(load, state=NodeState.DRAINING)
        self._set_load(entry, load)
        entry.last_report_at = self._clock()
        self.report_counts[load.pool] += 1

    def leave(self, node_id: str, entry: NodeEntry) -> None:
        # A reconnect may already have replaced the entry; only the stream that owns it removes it.
        if self._nodes.get(node_id) is entry:
            del self._nodes[node_id]
            self._unindex(entry.load)

    def expire(self) -> list[str]:
        """Marks nodes whose reports stopped as dead (never picked); returns their ids.

        The entry stays while its stream is open, so a node that was only slow comes back with
        its next report; the stream's end removes it.
        """
        cutoff = self._clock() - self._report_timeout_s
        dead = []
        for node_id, entry in self._nodes.items():
            if entry.last_report_at < cutoff and entry.load.state is not NodeState.DEAD:
                self._set_load(entry, replace(entry.load, state=NodeState.DEAD))
                dead.append(node_id)
        return dead

    def set_drained(self, node_id: str, drained: bool) -> NodeEntry | None:
        entry = self._nodes.get(node_id)
        if entry is None:
            return None
        entry.drained_by_operator = drained
        state = NodeState.DRAINING if drained else NodeState.READY
        self._set_load(entry, replace(entry.load, state=state))
        return entry

    def report_age_s(self, entry: NodeEntry) -> float:
        return max(0.0, self._clock() - entry.last_report_at)

    def context_tokens(self, node_id: str) -> int:
        entry = self._nodes.get(node_id)
        return entry.context_tokens if entry else 0

    def entries(self) -> list[tuple[str, NodeEntry]]:
        return sorted(self._nodes.items())

    def pool(self, pool: str) -> list[ReplicaLoad]:
        index = self._indexes.get(pool)
        return list(index.replicas) if index else []

    def pools(self) -> set[str]:
        return set(self._indexes)
