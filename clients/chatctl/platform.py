"""The whole platform on one machine: scheduler, nodeagents, gateway and edge as child processes.

Used by `chatctl up` and by the end-to-end tests, so both start the same thing the same way.

With TLS (the default) it first makes a throwaway CA under <state dir>/tls and a certificate for
each service and for the operator and client roles (infra.certs); platform.json names that
folder as `tls_dir` for whoever calls the platform afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from clients.chatctl.placement import OneHost, Placement
from clients.chatctl.scrape_targets import SCRAPE_TARGETS_FILE, scrape_targets, write_scrape_targets
from infra.bearer import new_token
from infra.certs import LOCAL_HOSTS, Authority
from infra.process import dies_with_parent
from infra.tls import Role, TlsConfig
from infra.tls_channel import open_channel

# Written into the state dir once the platform is up; removed when it stops.
PLATFORM_FILE = "platform.json"
ADMIN_TOKEN_FILE = "admin-token"
DEV_TOKENS_FILE = "dev-tokens.json"
TLS_DIR = "tls"
# How long a killed or crashed service may take to be seen as ended before restart() gives up.
EXIT_SEEN_WITHIN_S = 5.0


class PlatformError(RuntimeError):
    pass


@dataclass
class PlatformSettings:
    state_dir: Path = Path(".chat")
    edge_listen: str = "127.0.0.1:8080"
    # Edge processes sharing edge_listen (SO_REUSEPORT), under one supervisor.
    edge_workers: int = 1
    nodes: int = 1
    pool: str = "small"
    slot_context_tokens: int = 8192
    parallel: int = 2
    startup_timeout_s: float = 120.0
    # Several schedulers share membership and the ladder through etcd, so they need it.
    schedulers: int = 1
    # Several gateways share answers in flight (resume anywhere, takeover) through Redis.
    gateways: int = 1
    # Empty: the embedded defaults (in-process membership and buckets, SQLite in state_dir).
    etcd_endpoint: str = ""
    redis_url: str = ""
    # Where in etcd the schedulers keep membership, the ladder and the rollout, and where in
    # Redis the gateways keep buckets and answers in flight; empty: the services' defaults.
    # Regions sharing one etcd or one Redis each take their own (clients/chatctl/regions.py).
    etcd_prefix: str = ""
    redis_prefix: str = ""
    store_url: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    # Plaintext between the services, for debugging: no CA, no certificates, no role checks.
    insecure: bool = False
    # Edges in front of the gateways: "edge" listens on edge_listen, the others on a free port.
    edges: int = 1
    # Several hosts on one machine (tests/netns.py); the edge's edge_listen is taken as is.
    placement: Placement = field(default_factory=OneHost)
    # Regions (clients/chatctl/regions.py): this platform is the region of this name, and
    # publishes to and reads the global directory in this etcd. Both empty: one region.
    region: str = ""
    global_etcd_endpoint: str = ""
    # The CA every region's certificates come from, so the regions' gateways trust each
    # other; None: a CA of this platform's own.
    authority: Authority | None = None

    def __post_init__(self) -> None:
        if self.schedulers > 1 and not self.etcd_endpoint:
            raise PlatformError("more than one scheduler needs etcd (--etcd HOST:PORT)")
        if self.gateways > 1 and not self.redis_url:
            raise PlatformError("more than one gateway needs Redis (--redis URL)")
        if self.edge_workers < 1:
            raise PlatformError(f"--edge-workers must be at least 1, not {self.edge_workers}")
        if bool(self.region) != bool(self.global_etcd_endpoint):
            raise PlatformError("a region needs the global directory's etcd, and only a region")


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    ready: dict[str, object]
    module: str = ""
    env: dict[str, str] = field(default_factory=dict)


class LocalPlatform:
    def __init__(
        self, settings: PlatformSettings, on_ready: Callable[[str, float], None] | None = None
    ) -> None:
        self.settings = settings
        # Told each service's name and seconds since start as it comes up: a progress display.
        self._on_ready = on_ready or (lambda name, seconds: None)
        self._started_at = time.monotonic()
        self.children: list[Child] = []
        self.admin_token = new_token("admin")
        self.tokens: dict[str, str] = {}
        self._wrote_state_files = False

    @property
    def edge_url(self) -> str:
        return str(self._child("edge").ready["http"])

    @property
    def scheduler_address(self) -> str:
        return str(self._child("scheduler").ready["grpc"])

    @property
    def gateway_address(self) -> str:
        return str(self._child("gateway").ready["grpc"])

    def edge_urls(self) -> list[str]:
        return [str(c.ready["http"]) for c in self.children if c.name.startswith("edge")]

    def gateway_addresses(self) -> list[str]:
        return [str(c.ready["grpc"]) for c in self.children if c.name.startswith("gateway")]

    def node_addresses(self) -> list[str]:
        return [str(c.ready["grpc"]) for c in self.children if c.name.startswith("nodeagent")]

    def _child(self, name: str) -> Child:
        for child in self.children:
            if child.name == name:
                return child
        raise PlatformError(f"{name} is not running")

    def scheduler_addresses(self) -> list[str]:
        return [str(c.ready["grpc"]) for c in self.children if c.name.startswith("scheduler")]

    @property
    def tls_dir(self) -> Path | None:
        """Where the CA and the certificates are; None on a plaintext platform."""
        return None if self.settings.insecure else self.settings.state_dir.resolve() / TLS_DIR

    def tls(self, role: str = Role.OPERATOR, node_id: str = "") -> TlsConfig:
        """The files of a holder of `role` (a node's also by its id), or plaintext."""
        if self.tls_dir is None:
            return TlsConfig(insecure=True)
        return TlsConfig.in_folder(self.tls_dir, f"{role}-{node_id}" if node_id else role)

    def channel(self, address: str, role: str = Role.OPERATOR) -> grpc.aio.Channel:
        """A channel to one of this platform's services, with a certificate of `role`."""
        return open_channel(address, self.tls(role))

    def _service_names(self) -> list[str]:
        settings = self.settings
        return [
            *(_numbered("scheduler", i) for i in range(settings.schedulers)),
            *(f"nodeagent-{i}" for i in range(settings.nodes)),
            *(_numbered("gateway", i) for i in range(settings.gateways)),
            *(_numbered("edge", i) for i in range(settings.edges)),
        ]

    def _make_certificates(self) -> None:
        if self.tls_dir is None:
            return
        authority = self.settings.authority or Authority.create()
        authority.save(self.tls_dir)
        # Each certificate names every host a service runs on: any of them may serve with it.
        placed = {self.settings.placement.host(name) for name in self._service_names()}
        hosts = [*LOCAL_HOSTS, *sorted(placed - set(LOCAL_HOSTS))]
        for role in (Role.SCHEDULER, Role.GATEWAY, Role.EDGE, Role.OPERATOR, Role.CLIENT):
            authority.save_holder(self.tls_dir, role, hosts=hosts)
        for index in range(self.settings.nodes):
            authority.save_holder(self.tls_dir, Role.NODE, self._node_id(index), hosts=hosts)

    def _tls_env(self, section: str, tls: TlsConfig) -> dict[str, str]:
        prefix = f"CHAT_{section.upper()}_"
        if tls.insecure:
            return {f"{prefix}TLS_INSECURE": "true"}
        return {
            f"{prefix}TLS_CA_FILE": tls.ca_file,
            f"{prefix}TLS_CERT_FILE": tls.cert_file,
            f"{prefix}TLS_KEY_FILE": tls.key_file,
        }

    async def start(self) -> None:
        settings = self.settings
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self._make_certificates)
        store_url = settings.store_url or f"sqlite:///{settings.state_dir / 'chat.db'}"
        schedulers = [_numbered("scheduler", i) for i in range(settings.schedulers)]
        await asyncio.gather(
            *(self._spawn(name, "scheduler.main", self._scheduler_env(name, store_url))
              for name in schedulers)
        )  # fmt: skip
        starting = [
            self._spawn(f"nodeagent-{i}", "nodeagent.main", self._node_env(i))
            for i in range(settings.nodes)
        ]
        starting.extend(
            self._spawn(name, "gateway.main", self._gateway_env(name, store_url))
            for name in (_numbered("gateway", i) for i in range(settings.gateways))
        )
        await asyncio.gather(*starting)
        await asyncio.gather(
            *(self._spawn(name, "edge.main", self._edge_env(name))
              for name in (_numbered("edge", i) for i in range(settings.edges)))
        )  # fmt: skip
        await self._wait_for_nodes()
        await self._provision_dev_users()
        self._write_state_files()

    def _write_state_files(self) -> None:
        """Where chatctl's other commands find this platform when no flag or env var names it."""
        state = {
            "edge": self.edge_url,
            "gateway": self.gateway_address,
            "scheduler": self.scheduler_address,
            "schedulers": self.scheduler_addresses(),
            "nodes": self.node_addresses(),
            "tls_dir": str(self.tls_dir or ""),
            "region": self.settings.region,
        }
        # Created 0600 rather than chmod-ed after: the token is never readable by others.
        admin_file = self.settings.state_dir / ADMIN_TOKEN_FILE
        admin_file.unlink(missing_ok=True)
        fd = os.open(admin_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.admin_token + "\n")
        # Written last and renamed into place: whoever sees platform.json sees it whole, and
        # the admin token is already there.
        partial = self.settings.state_dir / (PLATFORM_FILE + ".partial")
        partial.write_text(json.dumps(state, indent=2) + "\n")
        partial.replace(self.settings.state_dir / PLATFORM_FILE)
        self._write_scrape_targets()
        self._wrote_state_files = True

    def _write_scrape_targets(self) -> None:
        """Prometheus's view of this platform (deploy/prometheus/prometheus-local.yml)."""
        services = [(child.module, child.ready) for child in self.children]
        groups = scrape_targets(services, self.settings.etcd_endpoint)
        write_scrape_targets(self.settings.state_dir, groups)

    def _listens(self, section: str, service: str) -> dict[str, str]:
        """A service's gRPC, health and metrics ports, on its host, each on a free port."""
        host = self.settings.placement.host(service)
        prefix = f"CHAT_{section.upper()}_"
        return {f"{prefix}{port}_LISTEN": f"{host}:0" for port in ("GRPC", "HEALTH", "METRICS")}

    def _scheduler_env(self, name: str, store_url: str) -> dict[str, str]:
        env = {
            **self._listens("scheduler", name),
            "CHAT_SCHEDULER_STORE_URL": store_url,
            "CHAT_SCHEDULER_ADMIN_TOKEN": self.admin_token,
            **self._tls_env("scheduler", self.tls(Role.SCHEDULER)),
        }
        if self.settings.etcd_endpoint:
            env["CHAT_SCHEDULER_MEMBERSHIP"] = "etcd"
            env["CHAT_SCHEDULER_ETCD_ENDPOINT"] = self.settings.etcd_endpoint
            if self.settings.etcd_prefix:
                env["CHAT_SCHEDULER_ETCD_PREFIX"] = self.settings.etcd_prefix
        return {**env, **self._region_env("scheduler")}

    def _region_env(self, section: str) -> dict[str, str]:
        if not self.settings.region:
            return {}
        prefix = f"CHAT_{section.upper()}_"
        return {
            f"{prefix}REGION": self.settings.region,
            f"{prefix}GLOBAL_ETCD_ENDPOINT": self.settings.global_etcd_endpoint,
        }

    def _node_id(self, index: int) -> str:
        return f"local-{self.settings.pool}-{index}"

    def _node_env(self, index: int) -> dict[str, str]:
        node_id = self._node_id(index)
        return {
            "CHAT_NODEAGENT_NODE_ID": node_id,
            **self._listens("nodeagent", f"nodeagent-{index}"),
            **self._tls_env("nodeagent", self.tls(Role.NODE, node_id)),
            # Every node reports to every scheduler: each holds the whole load table.
            "CHAT_NODEAGENT_SCHEDULER_ADDRESSES": ",".join(self.scheduler_addresses()),
            "CHAT_NODEAGENT_POOL": self.settings.pool,
            "CHAT_NODEAGENT_SLOT_CONTEXT_TOKENS": str(self.settings.slot_context_tokens),
            "CHAT_NODEAGENT_PARALLEL": str(self.settings.parallel),
            "CHAT_NODEAGENT_THREADS": str(max(1, (os.cpu_count() or 2))),
        }

    def _gateway_env(self, name: str, store_url: str) -> dict[str, str]:
        env = {
            **self._listens("gateway", name),
            "CHAT_GATEWAY_SCHEDULER_ADDRESS": self.scheduler_address,
            # Every scheduler: a pick that cannot reach one goes to the next.
            "CHAT_GATEWAY_SCHEDULER_ADDRESSES": ",".join(self.scheduler_addresses()),
            "CHAT_GATEWAY_STORE_URL": store_url,
            "CHAT_GATEWAY_DEFAULT_POOL": self.settings.pool,
            "CHAT_GATEWAY_ADMIN_TOKEN": self.admin_token,
            **self._tls_env("gateway", self.tls(Role.GATEWAY)),
        }
        if self.settings.redis_url:
            env["CHAT_GATEWAY_BUCKETS"] = "redis"
            env["CHAT_GATEWAY_RUNS"] = "redis"
            env["CHAT_GATEWAY_REDIS_URL"] = self.settings.redis_url
            if self.settings.redis_prefix:
                env["CHAT_GATEWAY_REDIS_PREFIX"] = self.settings.redis_prefix
        return {**env, **self._region_env("gateway")}

    def _edge_env(self, name: str) -> dict[str, str]:
        host = self.settings.placement.host(name)
        return {
            "CHAT_EDGE_LISTEN": self.settings.edge_listen if name == "edge" else f"{host}:0",
            "CHAT_EDGE_WORKERS": str(self.settings.edge_workers),
            # Every gateway: a stream whose gateway dies carries on through another.
            "CHAT_EDGE_GATEWAY_ADDRESSES": ",".join(self.gateway_addresses()),
            **self._tls_env("edge", self.tls(Role.EDGE)),
        }

    async def _spawn(self, name: str, module: str, env: dict[str, str]) -> None:
        ready_file = self.settings.state_dir / f"{name}.ready.json"
        ready_file.unlink(missing_ok=True)
        section = module.split(".")[0].upper()
        full_env = {
            **os.environ,
            **self.settings.extra_env,
            **env,
            f"CHAT_{section}_READY_FILE": str(ready_file),
        }
        log = await asyncio.to_thread(open, self.settings.state_dir / f"{name}.log", "ab")
        argv = dies_with_parent([sys.executable, "-m", module])
        process = await asyncio.create_subprocess_exec(
            *self.settings.placement.command(name, argv),
            env=full_env,
            stdout=log,
            stderr=log,
        )
        log.close()
        child = Child(name, process, {}, module, env)
        self.children.append(child)
        deadline = time.monotonic() + self.settings.startup_timeout_s
        while not ready_file.exists():
            if process.returncode is not None:
                raise PlatformError(
                    f"{name} exited with {process.returncode}; see "
                    f"{self.settings.state_dir / (name + '.log')}"
                )
            if time.monotonic() > deadline:
                raise PlatformError(f"{name} was not ready in {self.settings.startup_timeout_s} s")
            await asyncio.sleep(0.05)
        child.ready = json.loads(ready_file.read_text())
        self._on_ready(name, time.monotonic() - self._started_at)

    async def restart(self, name: str) -> Child:
        """Starts a service that died (or was killed) again, at the gRPC address it had, so
        the services that call it find it again."""
        old = self._child(name)
        try:
            # A killed process's sockets close at once, but its exit reaches this loop only
            # when the child watcher reaps it: a caller that saw the sockets close can be
            # here first.
            await asyncio.wait_for(old.process.wait(), EXIT_SEEN_WITHIN_S)
        except TimeoutError:
            raise PlatformError(f"{name} is still running") from None
        place = self.children.index(old)
        self.children.remove(old)
        env = dict(old.env)
        if "grpc" in old.ready:
            env[f"CHAT_{old.module.split('.')[0].upper()}_GRPC_LISTEN"] = str(old.ready["grpc"])
        await self._spawn(name, old.module, env)
        # Back in its place: stop() goes in reverse start order.
        child = self.children.pop()
        self.children.insert(place, child)
        if self._wrote_state_files:
            # Its metrics port is a new one.
            self._write_scrape_targets()
        return child

    async def restart_all(self, timeout_s: float = 40.0) -> None:
        """Every service stopped (edge first) and started again in start order, each at the
        gRPC address it had; back once the nodes are ready. The store, the users and their
        tokens stay: a restarted region serves its users as before."""
        names = [child.name for child in self.children]
        for child in reversed(self.children):
            await _terminate(child, timeout_s)
        for name in names:
            await self.restart(name)
        await self._wait_for_nodes()
        if self._wrote_state_files:
            # An edge on a free port has a new one.
            self._write_state_files()

    def _admin(self) -> tuple[tuple[str, str]]:
        return (("authorization", f"Bearer {self.admin_token}"),)

    async def _wait_for_nodes(self) -> None:
        async with self.channel(self.scheduler_address) as channel:
            stub = pb_grpc.SchedulerServiceStub(channel)
            deadline = time.monotonic() + self.settings.startup_timeout_s
            while True:
                nodes = await stub.ListNodes(pb.ListNodesRequest(), metadata=self._admin())
                ready = [n for n in nodes.nodes if n.load.state == pb.NODE_STATE_READY]
                if len(ready) >= self.settings.nodes:
                    return
                if time.monotonic() > deadline:
                    raise PlatformError("the nodes did not report ready to the scheduler")
                await asyncio.sleep(0.1)

    async def _provision_dev_users(self) -> None:
        async with self.channel(self.scheduler_address) as channel:
            stub = pb_grpc.UserServiceStub(channel)
            for name, tier in (("free", common_pb2.TIER_FREE), ("plus", common_pb2.TIER_PLUS)):
                # A user id is global with regions: each region's dev users are its own.
                region = self.settings.region
                user_id = f"dev-{name}-{region}" if region else f"dev-{name}"
                try:
                    created = await stub.CreateUser(
                        pb.UserServiceCreateUserRequest(user_id=user_id, tier=tier),
                        metadata=self._admin(),
                    )
                    self.tokens[name] = created.token
                except grpc.aio.AioRpcError as error:
                    if error.code() != grpc.StatusCode.ALREADY_EXISTS:
                        raise
                    rotated = await stub.RotateUserToken(
                        pb.UserServiceRotateUserTokenRequest(user_id=user_id),
                        metadata=self._admin(),
                    )
                    self.tokens[name] = rotated.token
        tokens_file = self.settings.state_dir / DEV_TOKENS_FILE
        tokens_file.write_text(json.dumps(self.tokens, indent=2) + "\n")
        tokens_file.chmod(0o600)

    async def stop(self, timeout_s: float = 40.0) -> None:
        """SIGTERM in reverse start order (edge first), each waited for by its own pid."""
        for child in reversed(self.children):
            await _terminate(child, timeout_s)
        self.children.clear()
        # A stopped platform leaves no addresses behind for chatctl to call in vain (only its
        # own: a failed start must not remove those of another platform in the same dir).
        if self._wrote_state_files:
            for name in (PLATFORM_FILE, ADMIN_TOKEN_FILE, SCRAPE_TARGETS_FILE):
                (self.settings.state_dir / name).unlink(missing_ok=True)
            self._wrote_state_files = False


def _numbered(service: str, index: int) -> str:
    """The first of a kind keeps the plain name ("gateway"), the others get their index."""
    return service if index == 0 else f"{service}-{index}"


async def _terminate(child: Child, timeout_s: float) -> None:
    """SIGTERM, and SIGKILL after timeout_s; waited for by its own pid."""
    if child.process.returncode is None:
        child.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(child.process.wait(), timeout_s)
        except TimeoutError:
            child.process.kill()
            await child.process.wait()
