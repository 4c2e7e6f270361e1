"""The gateway's composition root."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge
from redis.asyncio import Redis

from chat.v1 import chat_service_pb2, chat_service_pb2_grpc
from domain.breaker import BreakerPolicy
from domain.compaction import CompactionPolicy
from domain.difficulty import DEFAULT_DIFFICULTY_MODEL, DifficultyModel
from domain.limiter import Limit
from domain.router import Router
from domain.safety import (
    DEFAULT_BLOCKLIST,
    InputGuard,
    OutputGuard,
    OutputMode,
    StreamCheckConfig,
    load_blocklist,
)
from domain.shedding import SheddingPolicy
from domain.types import Tier
from gateway.answers import StreamTimeouts
from gateway.auth import Authenticator
from gateway.buckets import Buckets, InProcessBuckets
from gateway.compactor import Compactor
from gateway.metrics import GatewayMetrics
from gateway.node_client import NodeClient
from gateway.pipeline import ChatPipeline
from gateway.planner import PipelinePolicy, TierPolicy
from gateway.policies import MessagePolicies
from gateway.redis_buckets import RedisBuckets, connect
from gateway.redis_run_sharing import RedisRunSharing
from gateway.run_sharing import LocalRuns, RunSharing
from gateway.runs import RunRegistry
from gateway.scheduler_client import SchedulerClient
from gateway.servicer import ChatServicer
from gateway.shared_runs import SharedRuns, SharedRunsConfig
from infra.config import ConfigError
from infra.grpcserver import GrpcServer
from infra.logs import configure_logging
from infra.metrics import MetricsServer
from infra.runner import run_service, write_ready_file
from infra.tls import TlsConfig
from store.base import Store
from store.factory import open_store


@dataclass
class GatewayConfig:
    grpc_listen: str = "127.0.0.1:50052"
    metrics_listen: str = "127.0.0.1:0"
    # The CA, this gateway's certificate and key (infra.tls), or insecure: true; the same
    # certificate serves callers and calls the scheduler and the nodes.
    tls: TlsConfig = field(default_factory=TlsConfig)
    # Health alone, in plaintext, for probes that show no certificate; empty: none.
    health_listen: str = ""
    scheduler_address: str = "127.0.0.1:50051"
    # Every scheduler's address (each holds the same table): a pick that cannot reach one is
    # asked of the next at once. Empty: scheduler_address alone.
    scheduler_addresses: list[str] = field(default_factory=list)
    store_url: str = "sqlite:///.chat/chat.db"
    system_prompt: str = "You are a helpful assistant. Answer clearly and briefly."
    default_pool: str = "small"
    free_window_tokens: int = 8000
    plus_window_tokens: int = 32000
    free_max_answer_tokens: int = 1000
    plus_max_answer_tokens: int = 4000
    free_bucket_capacity: float = 25_000
    plus_bucket_capacity: float = 250_000
    bucket_refill_s: float = 3 * 3600
    buckets: str = "memory"  # "memory" (this process only) or "redis" (shared by all gateways)
    redis_url: str = "redis://127.0.0.1:6379/0"
    # With Redis unreachable: admit unmetered (open) or refuse with Retry-After (closed).
    free_fail_open: bool = False
    plus_fail_open: bool = True
    max_message_chars: int = 32_000
    max_open_streams_per_user: int = 4
    # The ladder: Free answers are capped at rung 2; at rung 3 Free waits over this are refused.
    shed_answer_tokens: int = 300
    shed_max_wait_s: float = 2.0
    node_first_token_timeout_s: float = 120.0
    node_stall_timeout_s: float = 10.0
    max_failovers: int = 2
    # A pool with this many failures (no replica, replica lost) within the window is skipped
    # for the cooldown: large falls to small, small to a composed "busy" answer.
    breaker_failures_to_open: int = 5
    breaker_window_s: float = 30.0
    breaker_cooldown_s: float = 15.0
    keep_ended_runs_s: float = 600.0
    # The router: each conversation starts on the pool its first message needs (the shipped
    # difficulty classifier, or router_model), escalates small -> large at most once.
    # Off: messages run on the pool they name, else default_pool.
    router: bool = True
    router_model: str = ""
    # The safety checks outside the model: a hard-block check on each message, and a streaming
    # check on each answer that holds back output_holdback_tokens behind the newest text.
    # Compaction: at 70 % of the prompt budget the small model folds older turns into a
    # summary (first message, last 6 turns and pinned constraints stay verbatim), at most once
    # per compaction_min_tokens_between tokens.
    compaction: bool = True
    compaction_pool: str = "small"
    compaction_min_tokens_between: int = 3000
    safety: bool = True
    safety_blocklist: str = ""
    output_window_tokens: int = 200
    output_lookback_tokens: int = 50
    output_holdback_tokens: int = 50
    # How often the output check reads its window: the user's view trails the newest text by
    # holdback to holdback + this many tokens.
    output_check_every_tokens: int = 16
    # How each tier's answers meet the output check: "holdback" (text shows once checked, as
    # above) or "retract" (text shows as it comes; text the check flags later is withdrawn
    # with a `retract` event, then the refusal). Completions (the OpenAI-compatible API)
    # always hold back. docs/decisions.md, "Retract mode".
    free_output_mode: str = "holdback"
    plus_output_mode: str = "holdback"
    # Where answers in flight live: "memory" (this gateway only) or "redis" (any gateway
    # resumes any answer, retries never run the model twice, a dead gateway's answers are
    # taken over by the others).
    runs: str = "memory"
    # A gateway silent this long (redis runs) is dead and its answers are taken over.
    gateway_liveness_s: float = 3.0
    shutdown_grace_s: float = 30.0
    ready_file: str = ""
    log_level: str = "info"


def build_policy(config: GatewayConfig) -> PipelinePolicy:
    return PipelinePolicy(
        system_prompt=config.system_prompt,
        tiers={
            Tier.FREE: TierPolicy(
                config.free_window_tokens,
                config.free_max_answer_tokens,
                Limit.refilling_in(config.free_bucket_capacity, config.bucket_refill_s),
            ),
            Tier.PLUS: TierPolicy(
                config.plus_window_tokens,
                config.plus_max_answer_tokens,
                Limit.refilling_in(config.plus_bucket_capacity, config.bucket_refill_s),
            ),
        },
        default_pool=config.default_pool,
        max_message_chars=config.max_message_chars,
        max_open_streams_per_user=config.max_open_streams_per_user,
        shedding=SheddingPolicy(config.shed_answer_tokens, config.shed_max_wait_s),
        streaming=StreamTimeouts(
            config.node_first_token_timeout_s, config.node_stall_timeout_s, config.max_failovers
        ),
        breaker=BreakerPolicy(
            config.breaker_failures_to_open, config.breaker_window_s, config.breaker_cooldown_s
        ),
    )


def build_policies(config: GatewayConfig) -> MessagePolicies:
    router = difficulty = None
    if config.router:
        path = Path(config.router_model) if config.router_model else DEFAULT_DIFFICULTY_MODEL
        difficulty = DifficultyModel.load(path)
        router = Router(difficulty.threshold)
    if not config.safety:
        return MessagePolicies(router, difficulty)
    blocklist = Path(config.safety_blocklist) if config.safety_blocklist else DEFAULT_BLOCKLIST
    classifier = load_blocklist(blocklist)
    stream = StreamCheckConfig(
        window_tokens=config.output_window_tokens,
        lookback_tokens=config.output_lookback_tokens,
        holdback_tokens=config.output_holdback_tokens,
        check_every_tokens=config.output_check_every_tokens,
    )
    modes = {Tier.FREE: output_mode(config.free_output_mode),
             Tier.PLUS: output_mode(config.plus_output_mode)}  # fmt: skip
    return MessagePolicies(router, difficulty, InputGuard(classifier),
                           lambda mode: OutputGuard(classifier, stream, mode=mode),
                           modes)  # fmt: skip


def output_mode(name: str) -> OutputMode:
    try:
        return OutputMode(name)
    except ValueError:
        choices = ", ".join(mode.value for mode in OutputMode)
        raise ConfigError(f"an output mode must be one of {choices}, not {name!r}") from None


def build_compactor(
    config: GatewayConfig, store: Store, scheduler: SchedulerClient, nodes: NodeClient
) -> Compactor | None:
    if not config.compaction:
        return None
    policy = CompactionPolicy(min_tokens_between=config.compaction_min_tokens_between)
    return Compactor(store, scheduler, nodes, policy, summary_pool=config.compaction_pool)


def build_buckets(
    config: GatewayConfig, policy: PipelinePolicy, redis: Redis | None, metrics: GatewayMetrics
) -> Buckets:
    limits = {t: p.limit for t, p in policy.tiers.items()}
    if config.buckets == "memory":
        return InProcessBuckets(limits, time.monotonic)
    assert redis is not None
    fail_open = {Tier.FREE: config.free_fail_open, Tier.PLUS: config.plus_fail_open}
    return RedisBuckets(redis, limits, fail_open, metrics.observe_bucket_store_unavailable)


def connect_redis(config: GatewayConfig) -> Redis | None:
    """One Redis client for whatever lives there; None when nothing does."""
    for name, value in (("buckets", config.buckets), ("runs", config.runs)):
        if value not in ("memory", "redis"):
            raise ConfigError(f"{name} must be 'memory' or 'redis', not {value!r}")
    if "redis" not in (config.buckets, config.runs):
        return None
    return connect(config.redis_url)


def build_run_sharing(
    config: GatewayConfig, redis: Redis | None, runs: RunRegistry, metrics: GatewayMetrics
) -> RunSharing:
    if config.runs != "redis" or redis is None:
        return LocalRuns()
    settings = SharedRunsConfig(
        liveness_s=config.gateway_liveness_s, keep_after_end_s=int(config.keep_ended_runs_s)
    )
    waiter = Redis.from_url(config.redis_url, socket_timeout=settings.follow_block_s + 5.0,
                            socket_connect_timeout=0.5)  # fmt: skip
    return RedisRunSharing(SharedRuns(redis, settings, waiter=waiter), runs, metrics)


async def serve(config: GatewayConfig, stop: asyncio.Event) -> None:
    log = configure_logging("gateway", config.log_level)
    policy = build_policy(config)
    store = await open_store(config.store_url)
    scheduler = SchedulerClient(
        config.scheduler_addresses or [config.scheduler_address], tls=config.tls
    )
    nodes = NodeClient(tls=config.tls)
    runs = RunRegistry(time.monotonic, config.keep_ended_runs_s)
    redis_client = connect_redis(config)
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    buckets = build_buckets(config, policy, redis_client, metrics)
    sharing = build_run_sharing(config, redis_client, runs, metrics)
    pipeline = ChatPipeline(
        store,
        scheduler,
        nodes,
        runs,
        buckets,
        policy,
        time.monotonic,
        sharing,
        metrics,
        build_policies(config),
        build_compactor(config, store, scheduler, nodes),
    )
    service_name = chat_service_pb2.DESCRIPTOR.services_by_name["ChatService"].full_name
    server = GrpcServer(
        config.grpc_listen, [service_name], tls=config.tls, health_listen=config.health_listen
    )
    chat_service_pb2_grpc.add_ChatServiceServicer_to_server(
        ChatServicer(Authenticator(store), pipeline, store, buckets), server.server
    )
    streaming = Gauge("gateway_answers_streaming", "answers being generated", registry=registry)
    streaming.set_function(lambda: len(runs.running()))
    metrics_server = MetricsServer(registry, config.metrics_listen)
    await server.start()
    await server.set_serving(True)
    await metrics_server.start()
    background = sharing.start(pipeline.resume)
    write_ready_file(config.ready_file, server.ready({"metrics": metrics_server.port}))
    log.info("gateway ready", grpc=server.address, metrics_port=metrics_server.port)
    await stop.wait()
    # New calls are refused from here; answers already running finish and are saved.
    await server.set_serving(False)
    await pipeline.close(config.shutdown_grace_s)
    await sharing.retire(background)
    await server.stop(grace_s=2.0)
    await scheduler.close()
    await nodes.close()
    if redis_client is not None:
        await redis_client.aclose()
    await metrics_server.stop()
    await store.close()
    log.info("gateway stopped")


def main() -> None:
    run_service(GatewayConfig, "gateway", serve, "the chat pipeline, over gRPC")


if __name__ == "__main__":
    main()
