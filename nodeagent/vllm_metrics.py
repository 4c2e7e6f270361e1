"""A pure parser of vLLM's Prometheus `/metrics` page into the numbers the node's load report needs.

No I/O: the vLLM adapter scrapes the page and hands the text here. vLLM renamed its metrics
between releases (`vllm:gpu_cache_usage_perc` became `vllm:kv_cache_usage_perc`, the
`vllm:gpu_prefix_cache_*` counters lost their `gpu_` prefix) and such renames have silently broken
peer routers, so every value is read under its current name first and its old name second, and
a page that has neither is an error, never a silent zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
CACHE_CONFIG = "vllm:cache_config_info"


class MetricsParseError(ValueError):
    """The text is not a vLLM metrics page this parser can read; the message says why."""


@dataclass(frozen=True, slots=True)
class VllmMetrics:
    # Share of the KV cache in use, 0-1 (vLLM reports a fraction despite the name "perc").
    kv_usage: float
    # num_gpu_blocks x block_size from vllm:cache_config_info; 0 when the page lacks it.
    kv_capacity_tokens: int
    running_requests: int
    waiting_requests: int
    # Counters since the server started: tokens looked up in / found in the prefix cache.
    prefix_cache_queries: float
    prefix_cache_hits: float

    @property
    def free_kv_tokens(self) -> int:
        return max(0, round(self.kv_capacity_tokens * (1.0 - self.kv_usage)))


def parse_vllm_metrics(text: str) -> VllmMetrics:
    """Parses one scrape. Raises MetricsParseError for text that is malformed or not vLLM's."""
    samples = _samples_by_name(text)
    kv_usage = _mean(samples, KV_USAGE)
    if kv_usage is None:
        raise MetricsParseError(f"no KV usage metric ({' or '.join(KV_USAGE)}) in the page")
    if not 0.0 <= kv_usage <= 1.0:
        raise MetricsParseError(f"KV usage {kv_usage} is outside 0-1")
    return VllmMetrics(
        kv_usage=kv_usage,
        kv_capacity_tokens=_kv_capacity_tokens(samples.get(CACHE_CONFIG, [])),
        running_requests=round(_required_sum(samples, RUNNING)),
        waiting_requests=round(_required_sum(samples, WAITING)),
        prefix_cache_queries=_sum(samples, PREFIX_QUERIES) or 0.0,
        prefix_cache_hits=_sum(samples, PREFIX_HITS) or 0.0,
    )


def prefix_hit_rate(previous: VllmMetrics | None, current: VllmMetrics) -> float | None:
    """Hits over queries between two scrapes (recent behaviour, not the server's lifetime).

    None when no tokens were looked up in between, so the caller keeps its last rate; a counter
    that went down means vLLM restarted, and then the current totals are the whole window.
    """
    queries = current.prefix_cache_queries
    hits = current.prefix_cache_hits
    if previous is not None and previous.prefix_cache_queries <= queries:
        queries -= previous.prefix_cache_queries
        hits -= previous.prefix_cache_hits
    if queries <= 0:
        return None
    return min(1.0, max(0.0, hits / queries))


def _samples_by_name(text: str) -> dict[str, list[Sample]]:
    by_name: dict[str, list[Sample]] = {}
    try:
        # The parser is lazy: errors surface while iterating, so iterate inside the try.
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                by_name.setdefault(sample.name, []).append(sample)
    except ValueError as exc:
        raise MetricsParseError(f"malformed Prometheus text: {exc}") from exc
    return by_name


def _first_present(samples: dict[str, list[Sample]], names: Iterable[str]) -> list[Sample] | None:
    """The samples of the first name the page has: the current name wins over the old one."""
    for name in names:
        if name in samples:
            return samples[name]
    return None


def _sum(samples: dict[str, list[Sample]], names: tuple[str, ...]) -> float | None:
    """Sums over label sets: one vLLM process can serve several engines (data parallel) or
    model names, each reported as its own series."""
    found = _first_present(samples, names)
    return None if found is None else sum(sample.value for sample in found)


def _required_sum(samples: dict[str, list[Sample]], names: tuple[str, ...]) -> float:
    total = _sum(samples, names)
    if total is None:
        raise MetricsParseError(f"no {' or '.join(names)} in the page")
    return total


def _mean(samples: dict[str, list[Sample]], names: tuple[str, ...]) -> float | None:
    """A fraction per engine is averaged, not summed: two half-full engines are half full."""
    found = _first_present(samples, names)
    if not found:
        return None
    return sum(sample.value for sample in found) / len(found)


def _kv_capacity_tokens(config_samples: list[Sample]) -> int:
    """KV capacity in tokens: blocks x tokens per block, summed over engines. vLLM's CPU build
    also calls its KV blocks num_gpu_blocks (they live in host memory there)."""
    total = 0
    for sample in config_samples:
        blocks = _int_label(sample, "num_gpu_blocks")
        block_size = _int_label(sample, "block_size")
        total += blocks * block_size
    return total


def _int_label(sample: Sample, label: str) -> int:
    raw = sample.labels.get(label, "")
    # vLLM writes "None" for a value not known yet (before the KV cache is profiled).
    if raw in ("", "None"):
        return 0
    try:
        return int(raw)
    except ValueError as exc:
        raise MetricsParseError(f"{CACHE_CONFIG} label {label}={raw!r} is not a number") from exc
