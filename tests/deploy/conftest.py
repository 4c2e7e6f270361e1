"""One platform watched by one real Prometheus for the deploy tests: a `chatctl up` platform
(simulated engines, etcd membership) scraped through the shipped local config and, fed with
the pod metadata Kubernetes' service discovery would give, the shipped cluster job, with the
shipped rules evaluated every second."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from clients.chat_client import ChatClient, Done, new_conversation_id
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from clients.chatctl.scrape_targets import SCRAPE_TARGETS_FILE
from tests.deploy.prometheus import Prometheus, run_prometheus, wait_for
from tests.servers import Etcd

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
NAMESPACE = "chat-test"


@dataclass(frozen=True)
class Observed:
    platform: LocalPlatform
    prometheus: Prometheus
    # The pod each job's simulated Kubernetes target carries.
    pods: dict[str, str]


def recorded_names() -> list[str]:
    rules = yaml.safe_load((PROMETHEUS / "rules" / "recording.yml").read_text())
    return [rule["record"] for group in rules["groups"] for rule in group["rules"]]


def kubernetes_pods(targets: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """file_sd groups shaped as Kubernetes' pod discovery gives them: one per service, on a
    container port other than the metrics one, plus two pods the job must leave out."""
    groups, pods = [], {}
    for group in targets:
        job = group["labels"]["job"]
        for index, address in enumerate(group["targets"]):
            host, port = address.rsplit(":", 1)
            pod = f"{job}-{index}"
            pods[job] = pod
            groups.append({"targets": [f"{host}:1"], "labels": {
                "__meta_kubernetes_namespace": NAMESPACE,
                "__meta_kubernetes_pod_name": pod,
                "__meta_kubernetes_pod_label_app_kubernetes_io_name": job,
                "__meta_kubernetes_pod_label_app_kubernetes_io_part_of": "chat-platform",
                "__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
                "__meta_kubernetes_pod_annotation_prometheus_io_port": port,
                "__meta_kubernetes_pod_annotation_prometheus_io_path": "/metrics",
            }})  # fmt: skip
    decoy = {"__meta_kubernetes_namespace": NAMESPACE, "__meta_kubernetes_pod_name": "decoy"}
    part_of = "__meta_kubernetes_pod_label_app_kubernetes_io_part_of"
    annotation = "__meta_kubernetes_pod_annotation_prometheus_io_"
    # Ours but not asking to be scraped; asking, but not ours.
    groups.append({"targets": ["127.0.0.1:2"], "labels": {**decoy, part_of: "chat-platform"}})
    asking = {annotation + "scrape": "true", annotation + "port": "3"}
    groups.append({"targets": ["127.0.0.1:3"], "labels": {**decoy, **asking}})
    return groups, pods


def kubernetes_job(pods_file: Path) -> dict[str, Any]:
    """The cluster config's job, on file discovery (Debian's Prometheus is built without the
    Kubernetes one) but with the shipped relabelling."""
    config = yaml.safe_load((PROMETHEUS / "prometheus-k8s.yml").read_text())
    (job,) = config["scrape_configs"]
    del job["kubernetes_sd_configs"]
    return {**job, "job_name": "chat-platform-k8s",
            "file_sd_configs": [{"files": [str(pods_file)], "refresh_interval": "1s"}]}  # fmt: skip


def prometheus_config(state_dir: Path, pods_file: Path) -> dict[str, Any]:
    config = yaml.safe_load((PROMETHEUS / "prometheus-local.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(PROMETHEUS / "rules" / "*.yml")]
    (local,) = config["scrape_configs"]
    local["file_sd_configs"][0].update(
        files=[str(state_dir / SCRAPE_TARGETS_FILE)], refresh_interval="1s"
    )
    config["scrape_configs"].append(kubernetes_job(pods_file))
    return config


async def one_answer(platform: LocalPlatform) -> None:
    async with ChatClient(
        platform.gateway_address, platform.tokens["plus"], tls=platform.tls("client")
    ) as chat:
        events = [e async for e in chat.send(new_conversation_id(), "Name a colour.")]
    assert isinstance(events[-1], Done), events[-1]


@pytest.fixture(scope="session")
async def observed(
    tmp_path_factory: pytest.TempPathFactory, etcd_server: Etcd
) -> AsyncIterator[Observed]:
    state = tmp_path_factory.mktemp("observed")
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=state,
            edge_listen="127.0.0.1:0",
            etcd_endpoint=etcd_server.endpoint,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_SPEED": "20",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
            },
        )
    )
    try:
        await platform.start()
        targets = json.loads((state / SCRAPE_TARGETS_FILE).read_text())
        groups, pods = kubernetes_pods(targets)
        pods_file = state / "kubernetes-pods.json"
        pods_file.write_text(json.dumps(groups))
        config = state / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(state, pods_file)))
        async with run_prometheus(config, state) as prometheus:
            expected = 2 * sum(len(g["targets"]) for g in targets)

            async def all_up() -> bool:
                found = await prometheus.get("/api/v1/targets", state="active")
                active = found["activeTargets"]
                return len(active) == expected and all(t["health"] == "up" for t in active)

            await wait_for(all_up, "every target scraped and up")
            # After the first scrapes: the answer shows as a rate, not a constant.
            await one_answer(platform)
            await wait_for(
                lambda: prometheus.query("tier_pool:gateway_ttft_seconds:p50_5m >= 0"),
                "the answer's time to first text in the recorded p50",
            )
            for name in recorded_names():
                await wait_for(lambda name=name: prometheus.query(name), f"a series for {name}")
            yield Observed(platform, prometheus, pods)
    finally:
        await platform.stop()
