"""The image (deploy/images/Containerfile) without a container runtime: its Python environment
built as the Containerfile builds it (tests/deploy/image.py), and each role started from it the
way the prod manifests start its container: the container's command and environment, its
volumes as folders (the ConfigMap, certificates as cert-manager would mint them), its /app
read-only and its user 10001, with only the addresses moved onto 127.0.0.1 through the
services' own CHAT_* keys. Real PostgreSQL, Redis and etcd (over mutual TLS) behind them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import tempfile
import time
import tomllib
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from infra.certs import Authority
from infra.etcd_client import TlsEtcdClient
from infra.tls import Role
from scheduler.membership import NodeRecord
from tests.deploy import image
from tests.deploy.image import IMAGES, LOCK, as_image_user, healthcheck, recipe
from tests.deploy.manifests import ROOT, Obj, container, render
from tests.deploy.pods import Files, Pod, Sources, materialize
from tests.servers import Postgres, Redis, TlsEtcd, free_port
from tests.sse import read_events
from tests.store.test_postgres import fresh_database

pytestmark = pytest.mark.slow
STARTUP_TIMEOUT_S = 180
OVERLAY = "prod"


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(d.split("==") for d in project["dependencies"])
    entries = re.findall(r"^([a-z0-9._-]+)==(\S+) \\\n((?:\s+--hash=sha256:[0-9a-f]{64}.*\n)+)",
                         LOCK.read_text(), flags=re.M)  # fmt: skip
    locked = {name: version for name, version, _ in entries}
    assert {name: locked.get(name) for name in wanted} == wanted
    assert len(entries) == LOCK.read_text().count("==")  # every pin has its hashes
    assert recipe().pip_args[:3] == ["--require-hashes", "--no-deps", "--only-binary=:all:"]


@pytest.fixture(scope="module")
def image_env() -> Path:
    return image.build_env()


@pytest.fixture
def machine() -> Iterator[Path]:
    """Where the pods' files live: a folder the image's user can reach (pytest's tmp_path is
    its owner's alone), removed after."""
    base = Path(tempfile.mkdtemp(prefix="image-roles-"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        image.make_writable(base)
        shutil.rmtree(base)


@pytest.fixture
async def store_url(postgres_server: Postgres) -> AsyncIterator[str]:
    """A database of this test's own: the chat-store Secret's URL."""
    async with fresh_database(postgres_server) as url:
        yield url


@dataclass(frozen=True)
class Started:
    """One role: its manifest's workload and container, the pod it runs as, its config
    section and the CHAT_* keys that wire it to 127.0.0.1."""

    workload: str
    container: str
    pod: str
    wiring: dict[str, str]


def roles(etcd: str, ports: Mapping[str, int]) -> list[Started]:
    def listen(name: str) -> str:
        return f"127.0.0.1:{ports[name]}"

    return [
        Started("scheduler", "scheduler", "scheduler-0", {
            "CHAT_SCHEDULER_GRPC_LISTEN": listen("scheduler"),
            "CHAT_SCHEDULER_HEALTH_LISTEN": listen("scheduler-health"),
            "CHAT_SCHEDULER_METRICS_LISTEN": "127.0.0.1:0",
            "CHAT_SCHEDULER_ETCD_ENDPOINT": etcd,
        }),
        Started("pool-small", "nodeagent", "pool-small-0", {
            "CHAT_NODEAGENT_GRPC_LISTEN": listen("node"),
            "CHAT_NODEAGENT_ADVERTISE_ADDRESS": listen("node"),
            "CHAT_NODEAGENT_HEALTH_LISTEN": listen("node-health"),
            "CHAT_NODEAGENT_METRICS_LISTEN": "127.0.0.1:0",
            "CHAT_NODEAGENT_SCHEDULER_ADDRESSES": listen("scheduler"),
            # vLLM's sidecar is not here: the simulated GPU replica stands in for it.
            "CHAT_NODEAGENT_ENGINE": "sim",
            "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
            "CHAT_NODEAGENT_SIM_SPEED": "20",
        }),
        Started("gateway", "gateway", "gateway-0", {
            "CHAT_GATEWAY_GRPC_LISTEN": listen("gateway"),
            "CHAT_GATEWAY_HEALTH_LISTEN": listen("gateway-health"),
            "CHAT_GATEWAY_METRICS_LISTEN": "127.0.0.1:0",
            "CHAT_GATEWAY_SCHEDULER_ADDRESSES": listen("scheduler"),
        }),
        Started("edge", "edge", "edge-0", {
            "CHAT_EDGE_LISTEN": listen("edge"),
            "CHAT_EDGE_METRICS_LISTEN": listen("edge-metrics"),
            "CHAT_EDGE_GATEWAY_ADDRESSES": listen("gateway"),
        }),
    ]  # fmt: skip


def probe_target(workload: Obj, started: Started) -> str:
    """The healthcheck's target for what the container's readinessProbe asks: its gRPC health
    port, or its HTTP path, at the address the role was moved to."""
    probe = container(workload, started.container)["readinessProbe"]
    if "grpc" in probe:
        (health,) = [v for k, v in started.wiring.items() if k.endswith("_HEALTH_LISTEN")]
        return f"grpc://{health}"
    (edge,) = [v for k, v in started.wiring.items() if k == "CHAT_EDGE_LISTEN"]
    return f"http://{edge}{probe['httpGet']['path']}"


def tls_files(authority: Authority, role: str, name: str) -> Files:
    """A Secret of cert-manager's for a Certificate: the holder's certificate, key and CA."""
    cert, key = authority.issue(role, name)
    return {"tls.crt": cert, "tls.key": key, "ca.crt": authority.cert_pem}


def sources(objects: list[Obj], platform: Authority, etcd: TlsEtcd) -> Sources:
    config_maps = {o["metadata"]["name"]: {k: v.encode() for k, v in o["data"].items()}
                   for o in objects if o["kind"] == "ConfigMap"}  # fmt: skip
    secrets_ = {f"chat-tls-{role}": tls_files(platform, role, role)
                for role in (Role.SCHEDULER, Role.GATEWAY, Role.EDGE)}  # fmt: skip
    secrets_["chat-etcd-client"] = tls_files(etcd.authority, Role.SCHEDULER, "scheduler")
    return Sources(config_maps, secrets_, lambda pod: tls_files(platform, Role.NODE, pod))


def hand_to_image_user(tree: Path) -> None:
    """As the kubelet does with fsGroup: the pod's files belong to the pod's user."""
    if not as_image_user():
        return
    for folder, _, files in os.walk(tree):
        for path in [folder, *(os.path.join(folder, f) for f in files)]:
            os.chown(path, image.IMAGE_UID, image.IMAGE_UID)


async def start(pod: Pod, started: Started, base_env: dict[str, str], app: Path, log: Path):
    env = {**base_env, "TMPDIR": str(pod.root / "tmp"), **pod.env, **started.wiring}
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            *as_image_user(), *pod.argv, cwd=app, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=out,
        )  # fmt: skip


def tail(log: Path) -> str:
    """The end of a role's log, for a failure's message."""
    return log.read_text()[-3000:]


async def serving(venv: Path, app: Path, env: dict[str, str], target: str,
                  process: asyncio.subprocess.Process, log: Path) -> None:  # fmt: skip
    """Until the image's healthcheck passes on target, as the kubelet's probe would."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while (await healthcheck(venv, app, env, target))[0] != 0:
        assert process.returncode is None, tail(log)
        assert time.monotonic() < deadline, f"{target} not serving\n{tail(log)}"
        await asyncio.sleep(0.2)


async def create_user(env: dict[str, str], app: Path, scheduler: str, admin: str,
                      operator: Path) -> str:  # fmt: skip
    """`chatctl users create` from the image, as an operator would: a Plus user's token."""
    process = await asyncio.create_subprocess_exec(
        *as_image_user(), "python", "-m", "clients.chatctl.main", "users", "create",
        f"u-{uuid.uuid4().hex[:8]}", "--tier", "plus", "--json", "--scheduler", scheduler,
        "--admin-token", admin, "--tls-dir", str(operator),
        cwd=app, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return str(json.loads(out)["token"])


async def first_answer(edge: str, token: str) -> tuple[list, list[dict]]:
    """The answer's events as streamed, then the conversation as the edge stores it."""
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        async with http.post(
            f"{edge}/v1/conversations/{conversation}/messages", json={"content": "Name a colour."},
            headers={**headers, "Idempotency-Key": "m1"},
        ) as response:  # fmt: skip
            assert response.status == 200, await response.text()
            events = await read_events(response)
        async with http.get(f"{edge}/v1/conversations/{conversation}/messages",
                            headers=headers) as response:  # fmt: skip
            assert response.status == 200, await response.text()
            return events, (await response.json())["messages"]


async def metrics_pages(public: int, metrics: int) -> tuple[int, int]:
    """The status of GET /metrics on the edge's public port, then on its metrics port (whose
    page must show the edge's own series)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        async with http.get(f"http://127.0.0.1:{public}/metrics") as response:
            on_public = response.status
        async with http.get(f"http://127.0.0.1:{metrics}/metrics") as response:
            assert "\nedge_open_streams 0.0\n" in await response.text()
            return on_public, response.status


async def in_etcd(etcd: TlsEtcd, key: str) -> bytes | None:
    """A key's value, read over mutual TLS as the schedulers read it."""
    server = etcd.server
    async with TlsEtcdClient(server.host, server.port, etcd.client, timeout=5) as client:
        stored = await client.get(key.encode())
    return None if stored is None else bytes(stored.value)


async def ladder_led_by(etcd: TlsEtcd, scheduler_id: str) -> None:
    """Until the ladder's leader key names the scheduler (it takes the lead within a second)."""
    deadline = time.monotonic() + 10
    while await in_etcd(etcd, "/chat/v1/ladder/leader") != scheduler_id.encode():
        assert time.monotonic() < deadline, "no scheduler took the ladder's lead in etcd"
        await asyncio.sleep(0.1)


async def test_each_role_runs_from_the_image_as_its_manifest_starts_it(
    image_env: Path,
    machine: Path,
    store_url: str,
    redis_server: Redis,
    etcd_tls_server: TlsEtcd,
) -> None:
    objects = render(OVERLAY)
    app = image.copy_app(machine / "image")
    image.make_read_only(machine / "image")
    # The image's user has no home (useradd --home-dir /nonexistent).
    env = image.environment(image_env, app, Path("/nonexistent"))
    platform = Authority.create("chat test CA")
    admin = secrets.token_hex(16)
    values = {("chat-admin", "token"): admin, ("chat-store", "url"): store_url,
              ("chat-redis", "url"): redis_server.url}  # fmt: skip
    names = ("scheduler", "scheduler-health", "node", "node-health", "gateway", "gateway-health",
             "edge", "edge-metrics")  # fmt: skip
    ports = {name: free_port() for name in names}
    operator = machine / "operator"
    platform.save(operator)
    platform.save_holder(operator, Role.OPERATOR)
    pods = []
    for started in roles(etcd_tls_server.server.endpoint, ports):
        workload = next(o for o in objects if o["kind"] in ("Deployment", "StatefulSet")
                        and o["metadata"]["name"] == started.workload)  # fmt: skip
        root = machine / "pods" / started.pod
        pod = materialize(workload, started.container, started.pod, root,
                          sources(objects, platform, etcd_tls_server), values)  # fmt: skip
        pods.append((started, pod, probe_target(workload, started)))
    hand_to_image_user(machine / "pods")
    hand_to_image_user(operator)
    (machine / "logs").mkdir()
    processes: list[asyncio.subprocess.Process] = []
    try:
        for started, pod, target in pods:
            log = machine / "logs" / f"{started.pod}.log"
            processes.append(await start(pod, started, env, app, log))
            await serving(image_env, app, env, target, processes[-1], log)
            if as_image_user():
                assert os.stat(f"/proc/{processes[-1].pid}").st_uid == image.IMAGE_UID
        token = await create_user(env, app, f"127.0.0.1:{ports['scheduler']}", admin, operator)
        events, stored = await first_answer(f"http://127.0.0.1:{ports['edge']}", token)
        assert events[0].event == "meta" and events[-1].event == "done", events
        streamed = "".join(e.data["text"] for e in events if e.event == "delta")
        assert streamed
        # Prometheus's port serves the edge's metrics; the public one does not.
        assert await metrics_pages(ports["edge"], ports["edge-metrics"]) == (404, 200)
        assert [(m["role"], m["content"], m["finish"]) for m in stored] == [
            ("user", "Name a colour.", None),
            ("assistant", streamed, events[-1].data["finish"]),
        ]
        assert stored[1]["replica"] == events[0].data["replica"] == "pool-small-0"
        # The scheduler keeps the node's membership and the ladder's lead in etcd, over
        # mutual TLS, under the id its pod's name gives it.
        record = await in_etcd(etcd_tls_server, "/chat/v1/nodes/pool-small-0")
        assert record is not None
        assert NodeRecord.from_json(record).address == f"127.0.0.1:{ports['node']}"
        await ladder_led_by(etcd_tls_server, "scheduler-0")
    finally:
        for process in reversed(processes):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        codes = [await asyncio.wait_for(p.wait(), 60) for p in processes]
    logs = {p.name: (machine / "logs" / f"{p.name}.log").read_text()[-2000:] for _, p, _ in pods}
    assert codes == [0, 0, 0, 0], logs
    gateway = f"grpc://127.0.0.1:{ports['gateway-health']}"
    assert await healthcheck(image_env, app, env, gateway) == (
        1, f"unhealthy: 127.0.0.1:{ports['gateway-health']}: UNAVAILABLE\n")  # fmt: skip


def test_the_build_context_is_only_what_the_containerfile_copies() -> None:
    lines = [line for line in (ROOT / ".containerignore").read_text().splitlines()
             if line and not line.startswith("#")]  # fmt: skip
    sources = [source for source, _ in recipe().copies] + ["deploy/images/requirements.lock"]
    assert lines == ["*", *(f"!{s}" for s in sources), "**/__pycache__", "**/*.pyc"]
    assert os.readlink(ROOT / ".dockerignore") == ".containerignore"
    # podman keeps a HEALTHCHECK only in the docker format: the build script asks for it.
    build = (ROOT / "scripts" / "build_image.sh").read_text()
    assert "podman build --format docker " in build


def test_the_image_runs_as_the_user_and_the_modules_the_manifests_name() -> None:
    from tests.deploy.manifests import pod_containers, workloads

    text = (IMAGES / "Containerfile").read_text()
    assert re.findall(r"^USER (\S+)$", text, flags=re.M) == [f"{image.IMAGE_UID}:{image.IMAGE_UID}"]
    assert "HEALTHCHECK" in text
    copied = {target for _, target in recipe().copies}
    for workload in workloads(render("prod")):
        pod = workload["spec"]["template"]["spec"]
        for c in pod_containers(workload):
            if c["image"].split("/")[-1].startswith("chat-platform"):
                assert pod["securityContext"]["runAsUser"] == image.IMAGE_UID
                module = c["command"][2].split(".")[0]
                assert f"/app/{module}" in copied, module
