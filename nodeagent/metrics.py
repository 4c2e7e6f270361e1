"""The nodeagent's Prometheus series: what it runs, and the GPU time it holds for the cost view.

GPU-seconds count the node's accelerators for as long as the nodeagent runs, busy or idle:
what a pool costs is the GPUs it keeps, so a pool's GPU-seconds per message is this counter's
rate over the pool's answered messages (deploy/prometheus/rules/recording.yml).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class NodeCollector(Collector):
    def __init__(
        self,
        pool: str,
        gpus: int,
        running: Callable[[], int],
        clock: Callable[[], float],
    ) -> None:
        self._pool = pool
        self._gpus = gpus
        self._running = running
        self._clock = clock
        self._started_at = clock()

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(
            "nodeagent_running_requests", "requests generating", value=self._running()
        )
        gpus = GaugeMetricFamily(
            "nodeagent_gpus", "accelerators the node's engine holds", labels=["pool"]
        )
        gpus.add_metric([self._pool], self._gpus)
        yield gpus
        held = CounterMetricFamily(
            "nodeagent_gpu_seconds",
            "accelerator-seconds held since the nodeagent started, busy or idle",
            labels=["pool"],
        )
        held.add_metric([self._pool], self._gpus * (self._clock() - self._started_at))
        yield held


def register_node_metrics(
    registry: CollectorRegistry,
    pool: str,
    gpus: int,
    running: Callable[[], int],
    clock: Callable[[], float],
) -> None:
    if gpus < 0:
        raise ValueError(f"gpus must be 0 or more, not {gpus}")
    registry.register(NodeCollector(pool, gpus, running, clock))
