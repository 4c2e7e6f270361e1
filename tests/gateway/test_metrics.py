"""The gateway's labelled series exist at zero from the start, for every tier, pool and reason."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from domain.rollout import RolloutState, Version
from domain.types import Tier, Usage
from gateway.metrics import CurrentVersion, GatewayMetrics


def test_known_label_values_start_at_zero() -> None:
    registry = CollectorRegistry()
    GatewayMetrics(registry)
    zero = {
        ("gateway_ttft_seconds_count", (("tier", "plus"), ("pool", "large"))),
        ("gateway_ttft_seconds_count", (("tier", "free"), ("pool", "small"))),
        ("gateway_refusals_total", (("tier", "free"), ("reason", "busy"))),
        ("gateway_refusals_total", (("tier", "plus"), ("reason", "safety_output"))),
        ("gateway_sheds_total", (("tier", "free"), ("what", "capped_answer"))),
        ("gateway_limiter_refusals_total", (("tier", "free"),)),
        ("gateway_failovers_total", (("tier", "plus"), ("pool", "large"))),
        ("gateway_routes_total", (("reason", "classifier"), ("pool", "small"))),
        ("gateway_fallbacks_total", (("from_pool", "large"), ("to", "small"))),
        ("gateway_bucket_store_unavailable_total", (("tier", "plus"), ("outcome", "admitted"))),
        ("gateway_takeovers_total", ()),
    }
    found = {(name, labels): registry.get_sample_value(name, dict(labels)) for name, labels in zero}
    assert found == dict.fromkeys(zero, 0.0)


def test_time_to_first_text_is_recorded_by_tier_and_pool() -> None:
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    metrics.observe_answer(Tier.PLUS, "large", "llama-70b", 0.7, 2.0, Usage(100, 0, 41), "stop")
    labels = {"tier": "plus", "pool": "large"}
    assert registry.get_sample_value("gateway_ttft_seconds_count", labels) == 1
    assert registry.get_sample_value("gateway_ttft_seconds_bucket", {**labels, "le": "0.5"}) == 0
    assert registry.get_sample_value("gateway_ttft_seconds_bucket", {**labels, "le": "1.0"}) == 1
    answers = {"tier": "plus", "model": "llama-70b", "finish": "stop"}
    assert registry.get_sample_value("gateway_answers_total", answers) == 1


def test_the_current_version_is_named_at_each_scrape() -> None:
    """gateway_version_current follows the rollout the gateway holds, read when scraped."""
    registry = CollectorRegistry()
    versions = (Version("base"), Version("v2"))
    held = [RolloutState(versions=versions, current="base", candidate="v2")]
    registry.register(CurrentVersion(lambda: held[-1]))

    def current() -> dict[str, float | None]:
        return {v: registry.get_sample_value("gateway_version_current", {"version": v})
                for v in ("base", "v2")}  # fmt: skip

    assert current() == {"base": 1.0, "v2": 0.0}
    held.append(RolloutState(versions=versions, current="v2"))  # v2 promoted
    assert current() == {"base": 0.0, "v2": 1.0}
