"""The nodeagent's series as a scrape reads them: requests running and the GPU time held."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from nodeagent.metrics import register_node_metrics


def test_gpu_seconds_count_every_gpu_for_as_long_as_the_node_runs() -> None:
    now = [100.0]
    running = [3]
    registry = CollectorRegistry()
    register_node_metrics(registry, "large", 4, lambda: running[0], lambda: now[0])
    labels = {"pool": "large"}
    assert registry.get_sample_value("nodeagent_gpu_seconds_total", labels) == 0
    now[0] = 130.0
    assert registry.get_sample_value("nodeagent_gpu_seconds_total", labels) == 120
    assert registry.get_sample_value("nodeagent_gpus", labels) == 4
    assert registry.get_sample_value("nodeagent_running_requests") == 3
    running[0] = 0
    assert registry.get_sample_value("nodeagent_running_requests") == 0


def test_a_negative_gpu_count_is_refused() -> None:
    with pytest.raises(ValueError, match="gpus must be 0 or more, not -1"):
        register_node_metrics(CollectorRegistry(), "small", -1, lambda: 0, lambda: 0.0)
