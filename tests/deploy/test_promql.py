"""The PromQL name extraction the rule, panel and adapter checks rely on."""

from __future__ import annotations

import pytest

from tests.deploy.promql import metric_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        (
            'max by (pool) (scheduler_pool_replicas{state="ready"}) == 0',
            {"scheduler_pool_replicas"},
        ),
        (
            "histogram_quantile(0.95, sum by (tier, pool, le) (rate(gateway_ttft_seconds_bucket"
            '{tier=~"$tier"}[$__rate_interval])))',
            {"gateway_ttft_seconds_bucket"},
        ),
        (
            "sum by (pool) (rate(gateway_routes_total[5m])) / ignoring (pool) group_left () "
            "sum (rate(gateway_routes_total[5m] offset 1h))",
            {"gateway_routes_total"},
        ),
        (
            'tier:gateway_ttft_over_goal:ratio_rate1h{tier="plus"} > (14.4 * 0.05) and '
            "tier:gateway_ttft_over_goal:ratio_rate5m > 1e-3",
            {
                "tier:gateway_ttft_over_goal:ratio_rate1h",
                "tier:gateway_ttft_over_goal:ratio_rate5m",
            },
        ),
        ('label_replace(edge_open_streams, "x", "$1", "pod", "(.*)")', {"edge_open_streams"}),
        ("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)", set()),
    ],
)
def test_the_names_an_expression_reads(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
