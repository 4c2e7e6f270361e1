"""The scheduler's Prometheus series: the ladder, each pool's capacity and load, each node's.

Read from the load table and the ladder keeper at scrape time (a collector, not gauges set as
things change), so a node that left has no series left behind and nothing is ever stale.
Every configured pool has its series from the first scrape, zero while it has no node: an
alert on "no ready replica" or a scaler reading a pool's queue finds the series at 0 rather
than nothing. Labels are pool, node, state and pick reason: bounded by the fleet, never by
traffic.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from domain.ladder import busy_share
from domain.picker import PickReason, ReplicaLoad
from domain.types import NodeState
from scheduler.ladder import LadderKeeper
from scheduler.table import LoadTable

# What a pool's replicas are counted by; STARTING never reaches the table.
COUNTED_STATES = (NodeState.READY, NodeState.DRAINING, NodeState.DEAD)
# One series per node, labelled pool and node, in the order _node_families fills them.
NODE_SERIES = (
    ("scheduler_node_kv_usage", "share of the node's KV cache in use"),
    ("scheduler_node_queued_prefill_tokens", "prompt tokens admitted but not yet read"),
    ("scheduler_node_waiting_requests", "requests waiting for a place in the batch"),
    ("scheduler_node_prefix_hit_rate", "share of prompt tokens found in the prefix cache"),
    ("scheduler_node_report_age_seconds", "since the node's last load report"),
    (
        "scheduler_node_prefill_tokens_per_second",
        "uncached prompt tokens the node's engine reads a second, as it measured (0: not yet)",
    ),
    ("scheduler_node_decode_step_seconds", "one decode step of the node's engine (0: not yet)"),
    (
        "scheduler_node_answer_seconds",
        "how long the node's answers hold their places in its batch, a mean (0: not yet)",
    ),
)


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """One pool's sums over the replicas that serve (ready or draining)."""

    queued_prefill_tokens: int
    waiting_requests: int
    running_requests: int

    @classmethod
    def of(cls, replicas: list[ReplicaLoad]) -> PoolLoad:
        serving = [r for r in replicas if r.state in (NodeState.READY, NodeState.DRAINING)]
        return cls(
            sum(r.queued_prefill_tokens for r in serving),
            sum(r.waiting_requests for r in serving),
            sum(r.running_requests for r in serving),
        )


class SchedulerCollector(Collector):
    def __init__(
        self,
        table: LoadTable,
        ladder: LadderKeeper,
        pools: Collection[str],
        saturated_queue_tokens: float,
    ) -> None:
        self._table = table
        self._ladder = ladder
        self._pools = sorted(pools)
        self._saturated_queue_tokens = saturated_queue_tokens

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from self._ladder_families()
        yield from self._pool_families()
        yield from self._node_families()
        yield self._pick_family()
        yield self._report_family()

    def _report_family(self) -> CounterMetricFamily:
        reports = CounterMetricFamily(
            "scheduler_load_reports",
            "load reports taken from the pool's nodes (changes a pick reads, and heartbeats)",
            labels=["pool"],
        )
        counts = self._table.report_counts
        for pool in sorted({*self._pools, *counts}):
            reports.add_metric([pool], counts[pool])
        return reports

    def _pick_family(self) -> CounterMetricFamily:
        """Picks by pool and reason (docs/decisions.md, "Where a conversation's cache is"):
        every reason of every configured pool from the first scrape, 0 until it happens."""
        picks = CounterMetricFamily(
            "scheduler_picks",
            "replica picks by why: affinity (stayed with its cache), escaped-queue, "
            "escaped-kv-room, cold (nothing cached: soonest start), moved (off failed replicas), "
            "no-replica",
            labels=["pool", "reason"],
        )
        counts = self._table.pick_counts
        pools = sorted({*self._pools, *(pool for pool, _ in counts)})
        for pool in pools:
            for reason in PickReason:
                picks.add_metric([pool, reason.value], counts[pool, reason.value])
        return picks

    def _ladder_families(self) -> Iterator[GaugeMetricFamily]:
        state = self._ladder.state
        yield GaugeMetricFamily(
            "scheduler_ladder_rung",
            "the shedding ladder's rung in force (a pin's, when pinned): 0 normal .. 3",
            value=state.effective_rung,
        )
        yield GaugeMetricFamily(
            "scheduler_ladder_pinned", "1 while an operator's pin holds the rung",
            value=int(state.pinned is not None),
        )  # fmt: skip
        yield GaugeMetricFamily(
            "scheduler_ladder_busy_share",
            "the busy share the ladder ticks on (the watched pool's, with the shed-to pool's)",
            value=self._ladder.busy_share(),
        )
        yield GaugeMetricFamily(
            "scheduler_ladder_leader", "1 on the scheduler that moves the ladder",
            value=int(self._ladder.leading),
        )  # fmt: skip

    def _pool_families(self) -> Iterator[GaugeMetricFamily]:
        replicas = GaugeMetricFamily(
            "scheduler_pool_replicas", "replicas in the load table by state",
            labels=["pool", "state"],
        )  # fmt: skip
        busy = GaugeMetricFamily(
            "scheduler_pool_busy_share",
            "how full the pool's batches are, 0..1 (1 with no serving replica)",
            labels=["pool"],
        )
        queued = GaugeMetricFamily(
            "scheduler_pool_queued_prefill_tokens",
            "prompt tokens admitted but not yet read, summed over the pool",
            labels=["pool"],
        )
        waiting = GaugeMetricFamily(
            "scheduler_pool_waiting_requests",
            "requests waiting for a place in a batch, summed over the pool",
            labels=["pool"],
        )
        running = GaugeMetricFamily(
            "scheduler_pool_running_requests", "answers being generated in the pool",
            labels=["pool"],
        )  # fmt: skip
        for pool in sorted({*self._pools, *self._table.pools()}):
            members = self._table.pool(pool)
            for state in COUNTED_STATES:
                replicas.add_metric([pool, state.value], sum(r.state is state for r in members))
            load = PoolLoad.of(members)
            busy.add_metric([pool], busy_share(members, self._saturated_queue_tokens))
            queued.add_metric([pool], load.queued_prefill_tokens)
            waiting.add_metric([pool], load.waiting_requests)
            running.add_metric([pool], load.running_requests)
        yield from (replicas, busy, queued, waiting, running)

    def _node_families(self) -> Iterator[GaugeMetricFamily]:
        kv, queued, waiting, hits, age, speed, step, answer = (
            GaugeMetricFamily(name, help_text, labels=["pool", "node"])
            for name, help_text in NODE_SERIES
        )
        for node_id, entry in self._table.entries():
            load = entry.load
            values = [load.pool, node_id]
            kv.add_metric(values, load.kv_usage)
            queued.add_metric(values, load.queued_prefill_tokens)
            waiting.add_metric(values, load.waiting_requests)
            hits.add_metric(values, load.prefix_hit_rate)
            age.add_metric(values, self._table.report_age_s(entry))
            speed.add_metric(values, load.prefill_tokens_per_s)
            step.add_metric(values, load.decode_step_s)
            answer.add_metric(values, load.answer_s)
        yield from (kv, queued, waiting, hits, age, speed, step, answer)


def register_scheduler_metrics(
    registry: CollectorRegistry,
    table: LoadTable,
    ladder: LadderKeeper,
    pools: Collection[str],
    saturated_queue_tokens: float,
) -> None:
    registry.register(SchedulerCollector(table, ladder, pools, saturated_queue_tokens))
