"""One platform watched by one real Prometheus for the deploy tests: a `chatctl up` platform
(simulated engines, etcd membership) scraped through the shipped local config and, fed with
the pod metadata Kubernetes' service discovery would give, the shipped cluster job, with the
shipped rules evaluated every second."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from clients.chat_client import ChatClient, Done, new_conversation_id
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from clients.chatctl.scrape_targets import SCRAPE_TARGETS_FILE
from tests.deploy.prometheus import Prometheus, run_prometheus, wait_for
from tests.servers import Etcd
from tests.sse import read_events

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
NAMESPACE = "chat-test"
VLLM_PAGE = Path(__file__).resolve().parents[1] / "nodeagent" / "data" / "vllm_metrics_0_32.txt"


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


def cluster_job(name: str) -> dict[str, Any]:
    config = yaml.safe_load((PROMETHEUS / "prometheus-k8s.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == name]
    return dict(job)


def kubernetes_job(pods_file: Path, name: str = "chat-platform") -> dict[str, Any]:
    """A cluster config's pod job, on file discovery (Debian's Prometheus is built without the
    Kubernetes one) but with the shipped relabelling."""
    job = cluster_job(name)
    del job["kubernetes_sd_configs"]
    # The platform's job is renamed: the local config's job has its name.
    renamed = "chat-platform-k8s" if name == "chat-platform" else name
    return {**job, "job_name": renamed,
            "file_sd_configs": [{"files": [str(pods_file)], "refresh_interval": "1s"}]}  # fmt: skip


def etcd_job(endpoint: str) -> dict[str, Any]:
    """The cluster config's production etcd job, on the test's etcd (its metrics on the
    client port) instead of the example hosts; labelled apart from the local job's etcd."""
    targets = [{"targets": [endpoint], "labels": {"config": "cluster"}}]
    return {**cluster_job("etcd"), "static_configs": targets}


def vllm_pods(address: str) -> list[dict[str, Any]]:
    """A GPU pod's engine container as Kubernetes' pod discovery gives it (a native sidecar:
    an init container), and its nodeagent's metrics port, which the vllm job leaves out."""
    pod = {"__meta_kubernetes_namespace": NAMESPACE, "__meta_kubernetes_pod_name": "pool-small-0",
           "__meta_kubernetes_pod_label_app_kubernetes_io_part_of": "chat-platform",
           "__meta_kubernetes_pod_label_chat_platform_pool": "small"}  # fmt: skip
    container = "__meta_kubernetes_pod_container_"
    return [
        {"targets": [address], "labels": {**pod, container + "name": "vllm",
                                          container + "init": "true",
                                          container + "port_name": "engine"}},
        {"targets": ["127.0.0.1:4"], "labels": {**pod, container + "name": "nodeagent",
                                                container + "port_name": "metrics"}},
    ]  # fmt: skip


@asynccontextmanager
async def vllm_page() -> AsyncIterator[str]:
    """host:port serving a real vLLM 0.32 /metrics page, kept verbatim in the tests' data.

    Served from a thread of its own: a test that blocks the event loop (promtool runs as a
    blocking subprocess) must not make Prometheus see the page down."""
    body = VLLM_PAGE.read_bytes()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path.split("?")[0] == "/metrics"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body) if found else 0))
            self.end_headers()
            if found:
                self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, name="vllm-page", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        await asyncio.to_thread(server.shutdown)
        server.server_close()


def prometheus_config(
    state_dir: Path, pods_file: Path, vllm_file: Path, etcd_endpoint: str
) -> dict[str, Any]:
    config = yaml.safe_load((PROMETHEUS / "prometheus-local.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(PROMETHEUS / "rules" / "*.yml")]
    (local,) = config["scrape_configs"]
    local["file_sd_configs"][0].update(
        files=[str(state_dir / SCRAPE_TARGETS_FILE)], refresh_interval="1s"
    )
    config["scrape_configs"] += [kubernetes_job(pods_file), kubernetes_job(vllm_file, "vllm"),
                                 etcd_job(etcd_endpoint)]  # fmt: skip
    return config


async def one_answer(platform: LocalPlatform) -> None:
    async with ChatClient(
        platform.gateway_address, platform.tokens["plus"], tls=platform.tls("client")
    ) as chat:
        events = [e async for e in chat.send(new_conversation_id(), "Name a colour.")]
    assert isinstance(events[-1], Done), events[-1]


async def one_remembered(platform: LocalPlatform) -> None:
    """A message that lets the model save to memory: the simulated model calls `remember`,
    so the harness's tool and memory series have a sample."""
    url = f"{platform.edge_url}/v1/conversations/{new_conversation_id()}/messages"
    body = {"content": "Please remember my favourite colour.", "tools": [{"type": "remember"}]}
    headers = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as sent:
        assert sent.status == 200, await sent.text()
        events = await read_events(sent)
    assert [e.event for e in events][:4] == ["meta", "toolsListed", "toolCall", "toolResult"]


async def one_cited(platform: LocalPlatform) -> None:
    """A file uploaded and a message that searches it: the simulated model cites the passage
    it read, so the citation series have a sample."""
    headers = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    form = aiohttp.FormData()
    form.add_field("purpose", "user_data")
    form.add_field("file", b"The gateway ships in May.", filename="notes.txt")
    url = f"{platform.edge_url}/v1/conversations/{new_conversation_id()}/messages"
    body = {"content": "When does the gateway ship, according to my notes?",
            "tools": [{"type": "file_search"}]}  # fmt: skip
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{platform.edge_url}/v1/files", data=form, headers=headers) as kept:
            assert kept.status == 200, await kept.text()
            file_id = (await kept.json())["id"]
        async with http.post(url, json=body, headers=headers) as sent:
            assert sent.status == 200, await sent.text()
            events = await read_events(sent)
    assert f"[[cite:{file_id}#0]]" in "".join(e.data.get("text", "") for e in events
                                               if e.event == "delta")  # fmt: skip


@pytest.fixture(scope="session")
async def observed(
    tmp_path_factory: pytest.TempPathFactory, etcd_server: Etcd
) -> AsyncIterator[Observed]:
    state = tmp_path_factory.mktemp("observed")
    stack = AsyncExitStack()
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
        vllm = await stack.enter_async_context(vllm_page())
        await platform.start()
        targets = json.loads((state / SCRAPE_TARGETS_FILE).read_text())
        groups, pods = kubernetes_pods(targets)
        pods_file = state / "kubernetes-pods.json"
        pods_file.write_text(json.dumps(groups))
        vllm_file = state / "kubernetes-vllm-pods.json"
        vllm_file.write_text(json.dumps(vllm_pods(vllm)))
        config = state / "prometheus.yml"
        config.write_text(yaml.safe_dump(
            prometheus_config(state, pods_file, vllm_file, etcd_server.endpoint)))  # fmt: skip
        async with run_prometheus(config, state) as prometheus:
            # Local and cluster job for each service, vLLM's page, the production etcd job.
            expected = 2 * sum(len(g["targets"]) for g in targets) + 2

            async def all_up() -> bool:
                found = await prometheus.get("/api/v1/targets", state="active")
                active = found["activeTargets"]
                return len(active) == expected and all(t["health"] == "up" for t in active)

            await wait_for(all_up, "every target scraped and up")
            # After the first scrapes: the answer shows as a rate, not a constant.
            await one_answer(platform)
            await one_remembered(platform)
            await one_cited(platform)
            await wait_for(
                lambda: prometheus.query("rate(gateway_memory_writes_total[5m]) >= 0"),
                "the remembered entry as a rate",
            )
            await wait_for(
                lambda: prometheus.query("rate(gateway_citations_total[5m]) >= 0"),
                "the cited passage as a rate",
            )
            await wait_for(
                lambda: prometheus.query("tier_pool:gateway_ttft_seconds:p50_5m >= 0"),
                "the answer's time to first text in the recorded p50",
            )
            for name in recorded_names():
                await wait_for(lambda name=name: prometheus.query(name), f"a series for {name}")
            yield Observed(platform, prometheus, pods)
    finally:
        await platform.stop()
        await stack.aclose()
