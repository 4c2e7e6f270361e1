"""The scheduler's series, read from its registry as a scrape would: every configured pool
from the start, each pool's replicas, load and busy share, each node's, and the ladder."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from domain.ladder import LadderPolicy, LadderState
from domain.picker import ReplicaLoad
from domain.types import NodeState
from scheduler.ladder import InProcessLadderStore, LadderKeeper
from scheduler.metrics import register_scheduler_metrics
from scheduler.table import LoadTable


def node(node_id: str, pool: str) -> ReplicaLoad:
    return ReplicaLoad(node_id, f"{node_id}:1", pool, "m", NodeState.STARTING, 1000, 0)


def scraped(table: LoadTable, ladder: LadderKeeper) -> CollectorRegistry:
    registry = CollectorRegistry()
    register_scheduler_metrics(registry, table, ladder, ["large", "small"], 4000.0)
    return registry


def make(now: list[float]) -> tuple[LoadTable, LadderKeeper]:
    table = LoadTable(lambda: now[0], report_timeout_s=2.0)
    ladder = LadderKeeper(InProcessLadderStore(), table, "large", LadderPolicy(), lambda: now[0])
    return table, ladder


def test_every_configured_pool_has_its_series_at_zero_before_any_node() -> None:
    now = [0.0]
    table, ladder = make(now)
    text = generate_latest(scraped(table, ladder)).decode()
    for pool in ("large", "small"):
        for state in ("ready", "draining", "dead"):
            assert f'scheduler_pool_replicas{{pool="{pool}",state="{state}"}} 0.0' in text
        assert f'scheduler_pool_queued_prefill_tokens{{pool="{pool}"}} 0.0' in text
        assert f'scheduler_pool_waiting_requests{{pool="{pool}"}} 0.0' in text
        assert f'scheduler_pool_busy_share{{pool="{pool}"}} 0.0' in text
    assert "scheduler_ladder_rung 0.0" in text
    assert "scheduler_ladder_leader 0.0" in text
    assert "scheduler_node_kv_usage{" not in text
    assert 'scheduler_load_reports_total{pool="large"} 0.0' in text


def test_pools_nodes_and_the_ladder_read_as_the_table_holds_them() -> None:
    now = [0.0]
    table, ladder = make(now)
    for node_id, pool in (("l0", "large"), ("l1", "large"), ("s0", "small")):
        table.join(node(node_id, pool), 4096, 8192)
    table.report("l0", state=NodeState.READY, queued_prefill_tokens=5000, waiting_requests=2,
                 running_requests=8, kv_usage=0.5, prefix_hit_rate=0.9)  # fmt: skip
    table.report("l1", state=NodeState.READY, queued_prefill_tokens=100, kv_usage=0.25)
    now[0] = 1.5
    table.report("s0", state=NodeState.READY)
    now[0] = 2.5
    assert table.expire() == ["l0", "l1"]
    table.report("l1", state=NodeState.READY, queued_prefill_tokens=100, kv_usage=0.25)
    ladder.state = LadderState(rung=1, pinned=2)
    ladder.leading = True
    registry = scraped(table, ladder)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("scheduler_pool_replicas", pool="large", state="ready") == 1
    assert value("scheduler_pool_replicas", pool="large", state="dead") == 1
    assert value("scheduler_pool_replicas", pool="small", state="ready") == 1
    # A dead node's queue is nobody's to serve: only l1's counts.
    assert value("scheduler_pool_queued_prefill_tokens", pool="large") == 100
    assert value("scheduler_pool_waiting_requests", pool="large") == 0
    assert value("scheduler_pool_busy_share", pool="large") == 0.25
    assert value("scheduler_node_queued_prefill_tokens", pool="large", node="l0") == 5000
    assert value("scheduler_node_prefix_hit_rate", pool="large", node="l0") == 0.9
    assert value("scheduler_node_kv_usage", pool="large", node="l1") == 0.25
    assert value("scheduler_node_report_age_seconds", pool="small", node="s0") == 1.0
    assert value("scheduler_ladder_rung") == 2  # the pin's
    assert value("scheduler_ladder_pinned") == 1
    assert value("scheduler_ladder_leader") == 1
    assert value("scheduler_load_reports_total", pool="large") == 3
    assert value("scheduler_load_reports_total", pool="small") == 1
