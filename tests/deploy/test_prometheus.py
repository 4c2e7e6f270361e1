"""deploy/prometheus: promtool accepts the rules and the configs and passes the alerts' unit
tests, and a real Prometheus scraping a running platform finds every service up and every
series the rules, the alerts and the Prometheus Adapter's queries read."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import (
    NAMESPACE,
    PROMETHEUS,
    Observed,
    cluster_job,
    kubernetes_job,
    recorded_names,
)
from tests.deploy.manifests import K8S
from tests.deploy.prometheus import binary
from tests.deploy.promql import metric_names

pytestmark = pytest.mark.slow
JOBS = {"scheduler", "nodeagent", "gateway", "edge", "etcd"}


def promtool(*args: str, cwd: Path = PROMETHEUS) -> str:
    done = subprocess.run([binary("promtool"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def rule_exprs() -> dict[str, str]:
    found = {}
    for path in sorted((PROMETHEUS / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                found[rule.get("record") or rule["alert"]] = rule["expr"]
    return found


def alert_names() -> set[str]:
    rules = yaml.safe_load((PROMETHEUS / "rules" / "alerts.yml").read_text())
    return {rule["alert"] for group in rules["groups"] for rule in group["rules"]}


def adapter_rules() -> list[tuple[str, dict]]:
    values = yaml.safe_load((K8S / "prometheus-adapter" / "values.yaml").read_text())
    return [(kind, rule) for kind in ("custom", "external") for rule in values["rules"][kind]]


def adapter_series(rule: dict) -> str:
    (name,) = metric_names(rule["seriesQuery"])
    return name


def test_promtool_accepts_the_rules_and_both_configs(tmp_path: Path) -> None:
    rules = sorted(str(p) for p in (PROMETHEUS / "rules").glob("*.yml"))
    checked = promtool("check", "rules", *rules)
    assert "SUCCESS: 23 rules found" in checked and "SUCCESS: 12 rules found" in checked
    promtool("check", "config", "prometheus-local.yml")
    # Debian's build has no Kubernetes discovery: the cluster job is checked on file
    # discovery, its relabelling as shipped.
    cluster = yaml.safe_load((PROMETHEUS / "prometheus-k8s.yml").read_text())
    cluster["scrape_configs"] = [kubernetes_job(tmp_path / "pods.json"),
                                 kubernetes_job(tmp_path / "pods.json", "vllm"),
                                 cluster_job("etcd")]  # fmt: skip
    cluster["rule_files"] = rules
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cluster))
    promtool("check", "config", "prometheus.yml", cwd=tmp_path)


def test_every_alert_has_unit_tests_that_fire_it() -> None:
    out = promtool("test", "rules", "tests/alerts_test.yml")
    assert "SUCCESS" in out
    tests = yaml.safe_load((PROMETHEUS / "tests" / "alerts_test.yml").read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"]
             if case["exp_alerts"]}  # fmt: skip
    quiet = {case["alertname"] for test in tests for case in test["alert_rule_test"]
             if not case["exp_alerts"]}  # fmt: skip
    assert fired == alert_names()
    # And a case where it must stay quiet.
    assert alert_names() - quiet == set()


async def test_every_service_is_scraped_and_up(observed: Observed) -> None:
    up = sorted((s["metric"]["job"], s["metric"].get("namespace", ""),
                 s["metric"].get("config", ""), s["value"][1])
                for s in await observed.prometheus.query("up"))  # fmt: skip
    # Each service by the local config and by the cluster's pod job; by the cluster's own
    # jobs, production's etcd (outside the cluster: no namespace) and vLLM in its GPU pod.
    assert up == sorted([*((job, "", "", "1") for job in JOBS),
                         *((job, NAMESPACE, "", "1") for job in JOBS),
                         ("etcd", "", "cluster", "1"), ("vllm", NAMESPACE, "", "1")])  # fmt: skip


async def test_vllms_own_series_and_etcds_leader_changes_are_scraped(observed: Observed) -> None:
    kv = await observed.prometheus.query("vllm:kv_cache_usage_perc")
    assert [(s["metric"]["job"], s["metric"]["pool"], s["metric"]["pod"]) for s in kv] == [
        ("vllm", "small", "pool-small-0")
    ]
    assert await observed.prometheus.query('vllm:num_preemptions_total{pool="small"}')
    # The EtcdLeaderChanges alert reads it by job.
    changes = await observed.prometheus.query(
        'etcd_server_leader_changes_seen_total{job="etcd", config="cluster"}'
    )
    assert [s["value"][1] for s in changes] == ["1"]


async def test_the_cluster_job_keeps_the_platforms_pods_on_their_metrics_port(
    observed: Observed,
) -> None:
    active = (await observed.prometheus.get("/api/v1/targets", state="active"))["activeTargets"]
    cluster = {t["labels"]["job"]: t for t in active if t["scrapePool"] == "chat-platform-k8s"}
    assert set(cluster) == JOBS
    local = {t["labels"]["job"]: t for t in active if t["scrapePool"] == "chat-platform"}
    for job, target in cluster.items():
        assert target["labels"]["pod"] == observed.pods[job]
        assert target["labels"]["namespace"] == NAMESPACE
        assert target["scrapeUrl"] == local[job]["scrapeUrl"]
    dropped = (await observed.prometheus.get("/api/v1/targets", state="dropped"))["droppedTargets"]
    assert sorted(t["discoveredLabels"]["__address__"] for t in dropped) == [
        "127.0.0.1:2",
        "127.0.0.1:3",
        "127.0.0.1:4",  # the nodeagent's port, left out of the vllm job
    ]


async def test_every_series_the_rules_and_the_adapter_read_is_exported(
    observed: Observed,
) -> None:
    recorded = set(recorded_names())
    wanted = {name for expr in rule_exprs().values() for name in metric_names(expr)}
    wanted |= {adapter_series(rule) for _, rule in adapter_rules()}
    assert wanted & recorded  # the alerts read recorded series
    assert sorted(wanted - recorded - await observed.prometheus.names()) == []


async def test_every_recording_rule_has_series_and_the_answer_shows(observed: Observed) -> None:
    empty = [name for name in recorded_names() if not await observed.prometheus.query(name)]
    assert empty == []
    # The one Plus answer the fixture asked for, on the small pool's simulated node; every
    # other tier and pool reads NaN (no message), which `>= 0` leaves out.
    (p50,) = await observed.prometheus.query("tier_pool:gateway_ttft_seconds:p50_5m >= 0")
    assert p50["metric"]["tier"] == "plus"
    assert p50["metric"]["pool"] == "small" and 0 < float(p50["value"][1]) < 60
    ready = await observed.prometheus.query("pool_state:scheduler_pool_replicas:max")
    by_pool = {(s["metric"]["pool"], s["metric"]["state"]): s["value"][1] for s in ready}
    assert by_pool == {
        ("small", "ready"): "1", ("small", "draining"): "0", ("small", "dead"): "0",
        ("large", "ready"): "0", ("large", "draining"): "0", ("large", "dead"): "0",
    }  # fmt: skip
    (gpu_s,) = await observed.prometheus.query(
        'pool:gpu_seconds_per_message:ratio_rate5m{pool="small"}'
    )
    assert float(gpu_s["value"][1]) > 0


def _adapter_query(rule: dict, matchers: str, group_by: str) -> str:
    query = rule["metricsQuery"].replace("<<.Series>>", adapter_series(rule))
    return query.replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", group_by)


async def test_the_adapters_queries_answer_for_each_pod_and_pool(observed: Observed) -> None:
    """What the Prometheus Adapter asks when an autoscaler reads each metric."""
    answers = {}
    for kind, rule in adapter_rules():
        if kind == "custom":
            job = adapter_series(rule).split("_")[0]
            matchers = f'namespace="{NAMESPACE}",pod=~"{observed.pods[job]}"'
            results = await observed.prometheus.query(_adapter_query(rule, matchers, "pod"))
            answers[rule["name"]["as"]] = {r["metric"]["pod"]: r["value"][1] for r in results}
        else:
            for pool in ("large", "small"):
                matchers = f'namespace="{NAMESPACE}",pool="{pool}"'
                results = await observed.prometheus.query(_adapter_query(rule, matchers, ""))
                (result,) = results
                assert result["metric"] == {"pool": pool}
                answers[(rule["name"]["as"], pool)] = result["value"][1]
    assert answers == {
        "gateway_open_streams": {observed.pods["gateway"]: "0"},
        "edge_open_streams": {observed.pods["edge"]: "0"},
        ("chat_pool_queued_prefill_tokens", "large"): "0",
        ("chat_pool_queued_prefill_tokens", "small"): "0",
        ("chat_pool_waiting_requests", "large"): "0",
        ("chat_pool_waiting_requests", "small"): "0",
    }
    assert not math.isnan(float(answers[("chat_pool_waiting_requests", "small")]))
