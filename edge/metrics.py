"""The edge's Prometheus metrics: what an operator watches to see load and errors."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class EdgeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.responses = Counter(
            "edge_responses", "HTTP responses by status", ["status"], registry=registry
        )
        self.open_streams = Gauge("edge_open_streams", "SSE streams open", registry=registry)
        # A counter, so events/s is rate(edge_sse_events_total[1m]).
        self.events = Counter("edge_sse_events", "SSE events written", registry=registry)
        self.open_requests = Gauge(
            "edge_open_requests", "requests being served, streams included", registry=registry
        )
        self.refused_per_ip = Counter(
            "edge_refused_per_ip_limit",
            "requests refused because their address had too many open",
            registry=registry,
        )
        self.reattaches = Counter(
            "edge_stream_reattaches",
            "streams whose gateway went away mid-answer, by whether another gateway carried on",
            ["outcome"],
            registry=registry,
        )
        # At zero from the start: a rate over them reads 0, not "no data", before the first.
        for outcome in ("ok", "failed"):
            self.reattaches.labels(outcome)
