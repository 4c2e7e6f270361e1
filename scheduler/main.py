"""The scheduler's composition root."""

from __future__ import annotations

import asyncio
import math
import os
import socket
import time
from dataclasses import dataclass, field

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from chat.v1 import scheduler_service_pb2, scheduler_service_pb2_grpc
from domain.guardrails import Guardrails
from domain.ladder import LadderPolicy
from domain.picker import DEFAULT_ESCAPE, EscapeRule
from domain.pools import LARGE_POOL, SMALL_POOL
from domain.start_wait import StartWaitModel
from infra.config import ConfigError
from infra.directory import DEFAULT_PREFIX, Directory, publish_forever
from infra.etcd_client import PLAINTEXT, etcd_client
from infra.grpcserver import GrpcServer
from infra.logs import configure_logging
from infra.runner import run_service
from infra.service import Service
from infra.tls import TlsConfig
from infra.tls_files import TlsExpiry
from scheduler.canary import CanaryPolicy, CanaryWatch
from scheduler.ladder import EtcdLadderStore, InProcessLadderStore, LadderKeeper, LadderStore
from scheduler.membership import (
    ETCD_CHANNEL_OPTIONS,
    EtcdMembership,
    InProcessMembership,
    Membership,
)
from scheduler.metrics import register_scheduler_metrics
from scheduler.prompts_servicer import PromptsServicer
from scheduler.region_publisher import RegionPublisher
from scheduler.rollout import EtcdRolloutStore, InProcessRolloutStore, RolloutKeeper, RolloutStore
from scheduler.servicer import SchedulerServicer
from scheduler.table import LoadTable
from scheduler.user_memories import UserMemories
from scheduler.users import UserAdmin
from scheduler.users_servicer import UsersServicer
from store.factory import open_store


@dataclass
class SchedulerConfig:
    grpc_listen: str = "127.0.0.1:50051"
    metrics_listen: str = "127.0.0.1:0"
    # The CA, this scheduler's certificate and key (infra.tls), or insecure: true.
    tls: TlsConfig = field(default_factory=TlsConfig)
    # Health alone, in plaintext, for probes that show no certificate; empty: none.
    health_listen: str = ""
    # "memory" for one scheduler (the local platform); "etcd" to share membership between several.
    membership: str = "memory"
    etcd_endpoint: str = "127.0.0.1:2379"
    # etcd's CA, and the certificate and key this scheduler shows etcd (its
    # --client-cert-auth): membership, the ladder and the rollout reach etcd over mutual TLS.
    # Absent: plaintext, as before these settings existed (insecure: true).
    etcd_tls: TlsConfig = field(default_factory=lambda: PLAINTEXT)
    # Under this etcd prefix: membership (`nodes/`), the ladder (`ladder/`) and the rollout
    # (`rollout/`). Schedulers sharing one prefix share one region's fleet; regions sharing one
    # etcd each take a prefix of their own (`chatctl up --regions`: `/chat/v1/regions/<name>/`).
    etcd_prefix: str = "/chat/v1/"
    # A node whose scheduler stops refreshing its lease leaves membership after this long.
    node_lease_ttl_s: float = 2.0
    report_timeout_s: float = 2.0
    # PickReplica's expected wait (domain/start_wait.py): a replica's prompt queue over this
    # prefill speed, or, when its batch is full, the time for places to open, with answers
    # holding theirs about answer_hold_s (400 tokens at 30 tokens/s) and Plus, queued first,
    # taking paid_share of them (Plus sends 40 % of messages); a wait not exceeded with
    # start_wait_confidence. Rung 3 refuses a Free message whose wait passes 2 s.
    prefill_tokens_per_s: float = DEFAULT_ESCAPE.wait.prefill_tokens_per_s  # 2,000
    answer_hold_s: float = DEFAULT_ESCAPE.wait.answer_s  # 13
    paid_share: float = DEFAULT_ESCAPE.wait.paid_share  # 0.4
    start_wait_confidence: float = DEFAULT_ESCAPE.wait.confidence  # 0.9
    # A conversation leaves the replica holding its cache only when it would wait there longer
    # than this to start (and longer than elsewhere by more than re-reading its prefix takes).
    escape_min_wait_s: float = DEFAULT_ESCAPE.min_wait_s  # 1
    store_url: str = "sqlite:///.chat/chat.db"
    admin_token: str = ""
    # Pools a node may register in and a pick may ask for.
    pools: list[str] = field(default_factory=lambda: [LARGE_POOL, SMALL_POOL])
    # The ladder follows this pool's busy share, and from rung 1 on also that of the pool
    # Free is shed to; it lives in etcd when membership does.
    ladder_pool: str = LARGE_POOL
    ladder_shed_to_pool: str = SMALL_POOL
    # A replica whose admitted prompts wait longer than this to be read counts as saturated
    # (the gateway's rung-3 wait, shed_max_wait_s).
    ladder_saturated_wait_s: float = 2.0
    ladder_tick_s: float = 10.0
    ladder_up_at: list[float] = field(default_factory=lambda: [0.85, 0.92, 0.97])
    ladder_down_gap: float = 0.07
    # A candidate version is rolled back to 0 % automatically when, over the trailing window,
    # its share of failed answers, refusals or slow starts (gateway's slow_ttft_s) passes the
    # current version's by more than the margin, on at least canary_min_answers answers; so is
    # one whose share of hallucinated citations (cited ids not retrieved for the turn or
    # resolving to no passage) passes it by canary_citation_margin, on at least
    # canary_min_citations citations too (most answers cite nothing, so enough answers can
    # still hold too few citations to judge).
    canary_window_s: float = 300.0
    canary_error_margin: float = 0.05
    canary_refusal_margin: float = 0.05
    canary_slow_margin: float = 0.05
    canary_min_answers: int = 20
    canary_citation_margin: float = 0.02
    canary_min_citations: int = 20
    scheduler_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    # Regions (docs/decisions.md, "Regions"): this scheduler's region and the global layer's
    # etcd, where it publishes the region's capacity every region_publish_s and lists the
    # users it creates. Both empty: one region.
    region: str = ""
    global_etcd_endpoint: str = ""
    global_prefix: str = DEFAULT_PREFIX
    region_publish_s: float = 2.0
    ready_file: str = ""
    log_level: str = "info"


async def _expire_forever(
    table: LoadTable, interval_s: float, log: structlog.stdlib.BoundLogger
) -> None:
    while True:
        await asyncio.sleep(interval_s)
        for node_id in table.expire():
            log.warning(
                "node stopped reporting; it is not picked until it reports again", node=node_id
            )


# How often a held rollout read looks at etcd again (scheduler/rollout.py).
ROLLOUT_RECHECK_S = 0.5
# The services the scheduler's server serves (and reports healthy).
SERVICES = ("SchedulerService", "UserService", "PromptCaptureService")


def _build_ladder_store(config: SchedulerConfig) -> LadderStore:
    if config.membership == "etcd":
        host, port = _etcd_address(config.etcd_endpoint)
        # Membership's reconnect backoff: gRPC's default grows to 120 s, and the ladder kept
        # failing for that long after etcd came back.
        client = etcd_client(host, port, config.etcd_tls, timeout=1.0, options=ETCD_CHANNEL_OPTIONS)
        return EtcdLadderStore(client, config.scheduler_id, _etcd_prefix(config) + "ladder/")
    return InProcessLadderStore()


def _build_rollout_store(config: SchedulerConfig) -> RolloutStore:
    """Beside the ladder: in etcd when membership is, else in process."""
    if config.membership == "etcd":
        host, port = _etcd_address(config.etcd_endpoint)
        client = etcd_client(host, port, config.etcd_tls, timeout=1.0, options=ETCD_CHANNEL_OPTIONS)
        return EtcdRolloutStore(client, _etcd_prefix(config) + "rollout/state")
    return InProcessRolloutStore()


def _canary_policy(config: SchedulerConfig) -> CanaryPolicy:
    rails = Guardrails(config.canary_error_margin, config.canary_refusal_margin,
                       config.canary_slow_margin, config.canary_min_answers,
                       config.canary_citation_margin, config.canary_min_citations)  # fmt: skip
    if config.canary_window_s <= 0:
        raise ConfigError("canary_window_s must be more than 0")
    return CanaryPolicy(rails, config.canary_window_s)


def _build_membership(config: SchedulerConfig) -> Membership:
    if config.membership == "memory":
        return InProcessMembership()
    if config.membership != "etcd":
        raise ConfigError(f"membership must be 'memory' or 'etcd', not {config.membership!r}")
    host, port = _etcd_address(config.etcd_endpoint)
    return EtcdMembership(
        host,
        port,
        _etcd_prefix(config) + "nodes/",
        lease_ttl_s=config.node_lease_ttl_s,
        tls=config.etcd_tls,
    )


def _build_directory(config: SchedulerConfig) -> Directory | None:
    """The global directory with regions; None for one region (nothing to publish)."""
    if not config.region and not config.global_etcd_endpoint:
        return None
    if not (config.region and config.global_etcd_endpoint):
        raise ConfigError("regions need both region and global_etcd_endpoint")
    try:
        return Directory(config.global_etcd_endpoint, config.global_prefix)
    except ValueError as error:
        raise ConfigError(str(error)) from error


def _etcd_prefix(config: SchedulerConfig) -> str:
    """The prefix, checked: one that did not end in '/' would take in its neighbours' keys
    ('/chat/a' is a prefix of '/chat/ab/...')."""
    prefix = config.etcd_prefix
    if not (prefix.startswith("/") and prefix.endswith("/")):
        raise ConfigError(f"etcd_prefix must start and end with '/', not {prefix!r}")
    return prefix


def _etcd_address(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"etcd_endpoint must be host:port, not {endpoint!r}")
    return host, int(port)


async def serve(config: SchedulerConfig, stop: asyncio.Event) -> None:
    log = configure_logging("scheduler", config.log_level)
    try:
        wait_model = StartWaitModel(
            config.prefill_tokens_per_s,
            config.answer_hold_s,
            config.paid_share,
            config.start_wait_confidence,
        )
    except ValueError as error:
        raise ConfigError(f"start-wait settings: {error}") from error
    if not config.escape_min_wait_s >= 0:
        raise ConfigError("escape_min_wait_s must be 0 or more")
    escape = EscapeRule(wait_model, config.escape_min_wait_s)
    membership = _build_membership(config)
    async with Service("scheduler", log) as service:
        store = await open_store(config.store_url)
        service.closes(store.close)
        table = LoadTable(time.monotonic, config.report_timeout_s, escape)
        ladder = LadderKeeper(
            _build_ladder_store(config),
            table,
            config.ladder_pool,
            LadderPolicy(tuple(config.ladder_up_at), config.ladder_down_gap),
            time.time,
            tick_s=config.ladder_tick_s,
            shed_to_pool=config.ladder_shed_to_pool,
            saturated_queue_tokens=config.prefill_tokens_per_s * config.ladder_saturated_wait_s,
        )
        service.closes(ladder.close)
        # Through etcd another scheduler may change the rollout: a held read looks again
        # every half second, so a change still reaches every gateway within a second.
        recheck_s = ROLLOUT_RECHECK_S if config.membership == "etcd" else math.inf
        rollout = RolloutKeeper(_build_rollout_store(config), time.time, recheck_s)
        service.closes(rollout.close)
        service.drains(rollout.release)
        directory = _build_directory(config)
        if directory is not None:
            service.closes(directory.close)
        registry = CollectorRegistry()
        rollbacks = Counter("scheduler_canary_rollbacks_total",
                            "candidate versions this scheduler rolled back on a guardrail breach",
                            registry=registry)  # fmt: skip
        canary = CanaryWatch(rollout, _canary_policy(config), time.monotonic, rollbacks.inc)
        nodes = Gauge("scheduler_nodes", "nodes in the load table", registry=registry)
        nodes.set_function(lambda: len(table.entries()))
        register_scheduler_metrics(
            registry,
            table,
            ladder,
            config.pools,
            config.prefill_tokens_per_s * config.ladder_saturated_wait_s,
        )
        registry.register(TlsExpiry("scheduler", [config.tls, config.etcd_tls]))
        metrics = await service.metrics(registry, config.metrics_listen)
        # Before the server: the view from etcd is in place when the first node connects.
        # Stopped after it: the node streams have ended and deregistered their nodes.
        await service.opens(membership.start, membership.stop)
        services = scheduler_service_pb2.DESCRIPTOR.services_by_name
        server = GrpcServer(
            config.grpc_listen,
            [services[name].full_name for name in SERVICES],
            tls=config.tls,
            health_listen=config.health_listen,
        )
        users = UsersServicer(UserAdmin(store, directory, config.region), config.admin_token,
                              UserMemories(store, directory, config.region))  # fmt: skip
        scheduler_service_pb2_grpc.add_UserServiceServicer_to_server(users, server.server)
        prompts = PromptsServicer(store, config.admin_token)
        add_prompts = scheduler_service_pb2_grpc.add_PromptCaptureServiceServicer_to_server
        add_prompts(prompts, server.server)
        scheduler_service_pb2_grpc.add_SchedulerServiceServicer_to_server(
            SchedulerServicer(
                table,
                membership,
                users,
                config.admin_token,
                ladder,
                frozenset(config.pools),
                rollout,
                canary,
            ),
            server.server,
        )
        await service.grpc(server)
        service.task(_expire_forever(table, config.report_timeout_s / 4, log), "expiry")
        service.task(ladder.run(), "ladder")
        service.task(canary.run(), "canary")
        if directory is not None:
            publisher = RegionPublisher(config.region, directory, table, ladder, config.pools,
                                        config.prefill_tokens_per_s *
                                        config.ladder_saturated_wait_s)  # fmt: skip
            service.task(publish_forever(publisher.publish, config.region_publish_s, "capacity"),
                         "publish")  # fmt: skip
        await service.serve(
            stop,
            config.ready_file,
            server.ready({"metrics": metrics.port}),
            grpc=server.address,
            metrics_port=metrics.port,
        )


def main() -> None:
    run_service(SchedulerConfig, "scheduler", serve, "membership, load table and replica picking")


if __name__ == "__main__":
    main()
