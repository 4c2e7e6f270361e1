"""bench/race_picks.py reads picks by reason from an exposition that prometheus_client wrote:
any counter of picks with a reason label, summed over its other labels, a reason it has never
heard of included; nothing when the scheduler exports no such counter."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from bench.race_picks import describe, load_reports, picks_between, picks_by_reason


def exposition(picks: dict[tuple[str, str], int]) -> str:
    registry = CollectorRegistry()
    counter = Counter("scheduler_picks", "picks", ["pool", "reason"], registry=registry)
    Gauge("scheduler_pool_busy_share", "busy", ["pool"], registry=registry).labels("small").set(1)
    for (pool, reason), n in picks.items():
        counter.labels(pool, reason).inc(n)
    return generate_latest(registry).decode()


def test_picks_are_summed_by_reason_whatever_the_reasons() -> None:
    before = picks_by_reason(exposition({("small", "affinity"): 5}))
    after = picks_by_reason(exposition({("small", "affinity"): 12, ("large", "affinity"): 3,
                                        ("small", "escaped-wait-spread"): 2}))  # fmt: skip
    assert after == {"affinity": 15.0, "escaped-wait-spread": 2.0}
    run = picks_between(before, after)
    assert run == {"affinity": 10.0, "escaped-wait-spread": 2.0}
    assert describe(run) == "affinity 10, escaped-wait-spread 2 (of 12 picks, 17% not by affinity)"


def test_a_scheduler_without_a_picks_counter_says_so() -> None:
    registry = CollectorRegistry()
    Gauge("scheduler_ladder_rung", "rung", registry=registry).set(0)
    found = picks_by_reason(generate_latest(registry).decode())
    assert found == {}
    assert describe(picks_between(None, found or None)) == (
        "the scheduler's /metrics has no picks counter by reason"
    )


def test_the_load_reports_are_read_from_their_counter_alone() -> None:
    registry = CollectorRegistry()
    reports = Counter("scheduler_load_reports", "reports", ["pool"], registry=registry)
    reports.labels("small").inc(7)
    reports.labels("large").inc(3)
    Counter("scheduler_picks", "picks", ["pool", "reason"], registry=registry).labels(
        "small", "cold"
    ).inc(5)
    assert load_reports(generate_latest(registry).decode()) == 10
    assert load_reports(exposition({})) is None
