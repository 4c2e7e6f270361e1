"""The gateway's composition root."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge
from redis.asyncio import Redis

import domain
from chat.v1 import (
    chat_service_pb2,
    chat_service_pb2_grpc,
    edge_link_pb2,
    edge_link_pb2_grpc,
    home_service_pb2,
    home_service_pb2_grpc,
    replay_service_pb2,
    replay_service_pb2_grpc,
)
from domain.breaker import BreakerPolicy
from domain.budget import DEFAULT_POOL_WEIGHTS, DailyAllowance
from domain.compaction import CompactionPolicy
from domain.context import segment_text
from domain.difficulty import DifficultyModel
from domain.errors import Unavailable
from domain.limiter import Limit
from domain.pools import LARGE_POOL, SMALL_POOL
from domain.regions import DEFAULT_OUT_AFTER_S, DEFAULT_SPILL_RUNG, RegionRules
from domain.router import Router
from domain.safety import (
    BlocklistClassifier,
    InputGuard,
    OutputGuard,
    OutputMode,
    StreamCheckConfig,
)
from domain.shedding import SheddingPolicy
from domain.tiers import BUCKET_REFILL_S, FREE_DEFAULTS, PLUS_DEFAULTS, TierPolicy
from domain.types import MAX_STREAM_INTERVAL_S, Tier
from gateway.answers import StreamTimeouts
from gateway.auth import Authenticator
from gateway.buckets import Buckets, InProcessBuckets
from gateway.compactor import Compactor
from gateway.daily_budget import DailyBudget, DailySpend, InProcessDailySpend, RedisDailySpend
from gateway.edge_link import EdgeLinkServicer
from gateway.feedback import RatingDesk
from gateway.files import FileDesk, FilesConfig
from gateway.home_client import HomeStore
from gateway.home_servicer import HomeServicer
from gateway.memories import MemoryConfig, MemoryDesk
from gateway.metrics import CurrentVersion, GatewayMetrics
from gateway.node_client import NodeClient
from gateway.node_link import LinkedNodes
from gateway.owner_probe import advertised
from gateway.peer_client import PeerGateways
from gateway.pipeline import ChatPipeline
from gateway.planner import PipelinePolicy
from gateway.policies import MessagePolicies
from gateway.ports import Nodes
from gateway.prompt_capture import CapturePolicy, ExpiredPrompts, StoredPrompts
from gateway.redis_buckets import REDIS_PREFIX, RedisBuckets, connect
from gateway.redis_run_sharing import RedisRunSharing
from gateway.regions import NoRegions, RegionRouter
from gateway.replay import Replayer
from gateway.replay_servicer import ReplayServicer
from gateway.run_sharing import LocalRuns, RunSharing
from gateway.runs import RunRegistry
from gateway.scheduler_client import SchedulerClient
from gateway.servicer import ChatServicer
from gateway.shared_runs import SharedRuns, SharedRunsConfig
from gateway.tool_messages import ToolMessages
from gateway.tools_setup import ToolsConfig, tool_loops
from gateway.versions import VersionBook
from infra.config import ConfigError
from infra.directory import DEFAULT_PREFIX, Directory, DirectoryView
from infra.grpcserver import GrpcServer
from infra.logs import configure_logging
from infra.runner import run_service
from infra.service import Service
from infra.tls import TlsConfig
from infra.tls_files import TlsExpiry
from store.base import ConversationStore, SummaryStore
from store.factory import open_store

# What the project ships, package data of domain/: the difficulty classifier trained by
# scripts/train_router.py, and the narrow hard-block rule set.
SHIPPED_DIFFICULTY_MODEL = Path(domain.__file__).parent / "data" / "difficulty_model.json"
SHIPPED_BLOCKLIST = Path(domain.__file__).parent / "safety" / "blocklist.json"
# The policies' own defaults (domain/), which the configuration's defaults repeat.
_SHEDDING = SheddingPolicy()
_BREAKER = BreakerPolicy()


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
    default_pool: str = SMALL_POOL
    # Each tier's window, answer cap and bucket (domain/tiers.py).
    free_window_tokens: int = FREE_DEFAULTS.window_tokens
    plus_window_tokens: int = PLUS_DEFAULTS.window_tokens
    free_max_answer_tokens: int = FREE_DEFAULTS.max_answer_tokens
    plus_max_answer_tokens: int = PLUS_DEFAULTS.max_answer_tokens
    free_bucket_capacity: float = FREE_DEFAULTS.limit.capacity
    plus_bucket_capacity: float = PLUS_DEFAULTS.limit.capacity
    bucket_refill_s: float = BUCKET_REFILL_S
    # Besides the bucket, a daily allowance per user in GPU-cost-weighted tokens (the bucket's
    # cost times the pool's weight; UTC days; 0: none). Past it messages go to the small pool
    # instead of being refused (domain/budget.py).
    free_daily_allowance: float = 100_000.0
    plus_daily_allowance: float = 1_000_000.0
    large_pool_cost_weight: float = DEFAULT_POOL_WEIGHTS[LARGE_POOL]
    small_pool_cost_weight: float = DEFAULT_POOL_WEIGHTS[SMALL_POOL]
    buckets: str = "memory"  # "memory" (this process only) or "redis" (shared by all gateways)
    redis_url: str = "redis://127.0.0.1:6379/0"
    # What every key (buckets, daily spend, answers in flight) and the stop channel start with.
    # Gateways with one prefix share them; regions sharing one Redis each take their own
    # (`chatctl up --regions`: `chat:regions:<name>:`), since a Redis database number would
    # not part the stop channel (pub/sub ignores databases).
    redis_prefix: str = REDIS_PREFIX
    # With Redis unreachable: admit unmetered (open) or refuse with Retry-After (closed).
    free_fail_open: bool = False
    plus_fail_open: bool = True
    max_message_chars: int = 32_000
    # At most this many tokens in one message, counted by the serving model, so a paste does
    # not push the conversation's own history out of the window; a longer message is refused
    # with its count (413), never cut. 0: only the window limits it.
    max_message_tokens: int = 6000
    max_open_streams_per_user: int = 4
    # The ladder: Free answers are capped at rung 2; at rung 3 Free waits over this are refused.
    shed_answer_tokens: int = _SHEDDING.capped_answer_tokens
    shed_max_wait_s: float = _SHEDDING.max_wait_s
    node_first_token_timeout_s: float = 120.0
    node_stall_timeout_s: float = 10.0
    # A node that vouches for an answer's silence (queued, or behind a long prompt in the same
    # batch) is waited on this long for its next text; only silence it does not vouch for is
    # failed over after node_stall_timeout_s.
    node_vouched_stall_timeout_s: float = 120.0
    max_failovers: int = 2
    # Answers go over one NodeService.Link stream per node (gateway/node_link.py), each frame
    # carrying every answer's new tokens: a third of the nodes' CPU per token (docs/decisions.md,
    # "One link per gateway-node pair"). Off: one Generate stream per answer.
    node_link: bool = True
    # Token counts made here with each node's own tokenizer file, which the node sends once
    # (gateway/local_tokenizers.py): no Tokenize call before an answer. Off: the node counts.
    local_token_counts: bool = True
    # Picks go over one held PickReplicas stream per scheduler (gateway/pick_stream.py): one
    # message each way instead of a call each. Off: a PickReplica call per pick.
    pick_stream: bool = True
    # A pool with this many failures (no replica, replica lost) within the window is skipped
    # for the cooldown: large falls to small, small to a composed "busy" answer.
    breaker_failures_to_open: int = _BREAKER.failures_to_open
    breaker_window_s: float = _BREAKER.window_s
    breaker_cooldown_s: float = _BREAKER.cooldown_s
    keep_ended_runs_s: float = 600.0
    # After an answer's first text, each stream to the edge gets at most one message per this
    # interval, carrying every event that came meanwhile: a message costs more CPU than the
    # events in it, and a reader sees no difference between 20 updates a second and 60. The
    # first text and the end go at once. 0: one message per event as it comes.
    stream_interval_s: float = 0.05
    # At most one frame this often on an edge's link (gateway/edge_link.py), carrying every
    # stream's news since the last, in place of stream_interval_s for the streams on it; a
    # stream's events up to its first text, and its end, go at once.
    edge_link_frame_interval_s: float = 0.025
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
    compaction_pool: str = SMALL_POOL
    compaction_min_tokens_between: int = 3000
    safety: bool = True
    safety_blocklist: str = ""
    output_window_tokens: int = 200
    output_lookback_tokens: int = 50
    output_holdback_tokens: int = 50
    # How often the output check reads its window: the user's view trails the newest text by
    # holdback to holdback + this many tokens.
    output_check_every_tokens: int = 16
    # A held-back answer's node (output mode holdback, output_holdback_tokens above 0) sends
    # its chunks at most this often after the first (0: at the node's own interval, 0.05 s):
    # its text shows only output_holdback_tokens behind the newest, where a check releases
    # it (every output_check_every_tokens, about 0.4 s at 40 tokens/s), so finer chunks cost
    # a gRPC message each on the node and here and show nothing sooner. A release may come
    # up to this much later. At most 2 s. bench/first_words.py measured 0.25 s against 0.05 s
    # (docs/decisions.md, "Held-back answers can ask for coarser chunks").
    output_holdback_chunk_interval_s: float = 0.25
    # How each tier's answers meet the output check: "holdback" (text shows once checked, as
    # above) or "retract" (text shows as it comes; text the check flags later is withdrawn
    # with a `retract` event, then the refusal). Plus retracts: its first words are promised
    # within 1 s for 95 % of messages, which the hold-back (about 1.6 s) cannot keep. The
    # OpenAI-compatible APIs (completions, Responses) always hold back, whatever the tier's:
    # their clients cannot withdraw text. docs/decisions.md, "Retract mode".
    free_output_mode: str = "holdback"
    plus_output_mode: str = "retract"
    # Where answers in flight live: "memory" (this gateway only) or "redis" (any gateway
    # resumes any answer, retries never run the model twice, a dead gateway's answers are
    # taken over by the others).
    runs: str = "memory"
    # A gateway silent this long (redis runs) is dead and its answers are taken over. Renewed
    # every third of it: a live gateway whose loop stalls past two thirds of it loses its runs
    # to another, which goes on from the logged text (docs/decisions.md).
    gateway_liveness_s: float = 2.0
    # Prompt capture: the exact prompt of each answered turn (its turns, sampling, version,
    # model and replica) is kept this many days, readable only through the admin API, and
    # deleted with its conversation; 0 keeps none. Off per tier with <tier>_prompt_capture.
    # docs/decisions.md, "Every answered turn's prompt is captured".
    prompt_capture_days: float = 30.0
    free_prompt_capture: bool = True
    plus_prompt_capture: bool = True
    # The admin token ReplayService asks of operators (`chatctl replay`); empty: nobody may.
    admin_token: str = ""
    # A replay that has not finished by then is cancelled and reported UNAVAILABLE.
    replay_timeout_s: float = 300.0
    # The tools the platform runs for a completion that asks (the Responses API's mcp tools,
    # the operator's own): grants per tier, steps per turn, servers (gateway/tools_setup.py).
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    # Each tier's segment turn, after the system prompt of every stored turn: a tone template
    # and profile facts (what the operator knows of every user of the tier), stable for the
    # segment so the replicas' prefix cache shares it. Empty: no such turn.
    free_tone: str = ""
    plus_tone: str = ""
    free_profile_facts: list[str] = field(default_factory=list)
    plus_profile_facts: list[str] = field(default_factory=list)
    # Personal memory (gateway/memories.py): entries per turn per tier, ageing, sizes.
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    # The files users upload for file_search (gateway/files.py): sizes, passages, results.
    files: FilesConfig = field(default_factory=FilesConfig)
    # Regions (docs/decisions.md, "Regions"): this gateway's region and the global layer's
    # etcd. Both empty: one region, no directory. A message of a user from another region
    # goes to their home; at home, a new conversation spills to the region with the most
    # room when home's ladder is at region_spill_rung or its pool has no ready replica.
    region: str = ""
    global_etcd_endpoint: str = ""
    global_prefix: str = DEFAULT_PREFIX
    region_spill_rung: int = DEFAULT_SPILL_RUNG
    # A region whose capacity is older than this is out (its users start elsewhere).
    region_out_after_s: float = DEFAULT_OUT_AFTER_S
    # How often this gateway says it is there, and reads the directory into memory.
    region_publish_s: float = 2.0
    directory_refresh_s: float = 1.0
    shutdown_grace_s: float = 30.0
    # How often the gateway asks a scheduler whether the model versions' rollout changed.
    rollout_poll_s: float = 0.5
    # An idle gateway's rollout call is held by the scheduler up to this long, answered at
    # once when the rollout changes (gateway/versions.py); 0 polls every rollout_poll_s.
    rollout_wait_s: float = 10.0
    # An answer whose first text comes later than this counts as a slow start in its version's
    # online guardrails (a share over 1 % is a p99 over it).
    slow_ttft_s: float = 10.0
    ready_file: str = ""
    # Where other gateways reach this one's gRPC port, named in its liveness so that they can
    # see at once that it died (gateway/owner_probe.py); empty: the listen address, unless it
    # is a wildcard (then they wait out its liveness).
    advertise_address: str = ""
    # Off: this gateway neither names its address nor probes others'; a dead gateway's answers
    # wait for its liveness to run out.
    probe_gateways: bool = True
    log_level: str = "info"


def build_policy(config: GatewayConfig) -> PipelinePolicy:
    return PipelinePolicy(
        system_prompt=config.system_prompt,
        tiers={
            Tier.FREE: TierPolicy(
                config.free_window_tokens,
                config.free_max_answer_tokens,
                Limit.refilling_in(config.free_bucket_capacity, config.bucket_refill_s),
                segment_text(config.free_tone, config.free_profile_facts),
            ),
            Tier.PLUS: TierPolicy(
                config.plus_window_tokens,
                config.plus_max_answer_tokens,
                Limit.refilling_in(config.plus_bucket_capacity, config.bucket_refill_s),
                segment_text(config.plus_tone, config.plus_profile_facts),
            ),
        },
        default_pool=config.default_pool,
        max_message_chars=config.max_message_chars,
        max_message_tokens=config.max_message_tokens,
        max_open_streams_per_user=config.max_open_streams_per_user,
        shedding=SheddingPolicy(config.shed_answer_tokens, config.shed_max_wait_s),
        streaming=StreamTimeouts(
            config.node_first_token_timeout_s,
            config.node_stall_timeout_s,
            config.max_failovers,
            held_chunk_interval(config.output_holdback_chunk_interval_s),
            vouched_stall_s=config.node_vouched_stall_timeout_s,
        ),
        breaker=BreakerPolicy(
            config.breaker_failures_to_open, config.breaker_window_s, config.breaker_cooldown_s
        ),
    )


def held_chunk_interval(seconds: float) -> float:
    if not 0 <= seconds <= MAX_STREAM_INTERVAL_S:
        raise ConfigError(f"output_holdback_chunk_interval_s must be within "
                          f"0..{MAX_STREAM_INTERVAL_S:g}, not {seconds}")  # fmt: skip
    return seconds


def build_policies(config: GatewayConfig) -> MessagePolicies:
    router = difficulty = None
    if config.router:
        path = Path(config.router_model) if config.router_model else SHIPPED_DIFFICULTY_MODEL
        difficulty = DifficultyModel.from_dict(read_json(path))
        router = Router(difficulty.threshold)
    if not config.safety:
        return MessagePolicies(router, difficulty)
    blocklist = Path(config.safety_blocklist) if config.safety_blocklist else SHIPPED_BLOCKLIST
    classifier = BlocklistClassifier.from_data(read_json(blocklist))
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


def read_json(path: Path) -> dict:
    """A policy's data file, read once here: domain/ builds policies from data, never from
    files."""
    return json.loads(path.read_text(encoding="utf-8"))


def output_mode(name: str) -> OutputMode:
    try:
        return OutputMode(name)
    except ValueError:
        choices = ", ".join(mode.value for mode in OutputMode)
        raise ConfigError(f"an output mode must be one of {choices}, not {name!r}") from None


def build_compactor(
    config: GatewayConfig, store: SummaryStore, scheduler: SchedulerClient, nodes: Nodes
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
    return RedisBuckets(redis, limits, fail_open, metrics.observe_bucket_store_unavailable,
                        config.redis_prefix)  # fmt: skip


def capture_policy(config: GatewayConfig) -> CapturePolicy:
    tiers = {Tier.FREE: config.free_prompt_capture, Tier.PLUS: config.plus_prompt_capture}
    return CapturePolicy(config.prompt_capture_days * 86_400.0,
                         frozenset(t for t, on in tiers.items() if on))  # fmt: skip


def build_daily_budget(
    config: GatewayConfig, redis: Redis | None, metrics: GatewayMetrics
) -> DailyBudget:
    """Spend is kept where the buckets are: every gateway must see the same figure."""
    allowance = DailyAllowance(
        {Tier.FREE: config.free_daily_allowance, Tier.PLUS: config.plus_daily_allowance},
        {LARGE_POOL: config.large_pool_cost_weight, SMALL_POOL: config.small_pool_cost_weight},
    )
    spend: DailySpend = InProcessDailySpend()
    if config.buckets == "redis" and redis is not None:
        spend = RedisDailySpend(redis, config.redis_prefix)
    return DailyBudget(allowance, spend, metrics)


def connect_redis(config: GatewayConfig) -> Redis | None:
    """One Redis client for whatever lives there; None when nothing does."""
    for name, value in (("buckets", config.buckets), ("runs", config.runs)):
        if value not in ("memory", "redis"):
            raise ConfigError(f"{name} must be 'memory' or 'redis', not {value!r}")
    if "redis" not in (config.buckets, config.runs):
        return None
    if not config.redis_prefix.endswith(":"):
        # The prefix is joined to key names: without its ':', 'chat:a' would hold 'chat:ab:'.
        raise ConfigError(f"redis_prefix must end with ':', not {config.redis_prefix!r}")
    return connect(config.redis_url)


def build_run_sharing(
    config: GatewayConfig, redis: Redis | None, runs: RunRegistry, metrics: GatewayMetrics
) -> RunSharing:
    if config.runs != "redis" or redis is None:
        return LocalRuns()
    settings = SharedRunsConfig(
        liveness_s=config.gateway_liveness_s,
        keep_after_end_s=int(config.keep_ended_runs_s),
        key_prefix=config.redis_prefix,
    )
    waiter = Redis.from_url(config.redis_url, socket_timeout=settings.follow_block_s + 5.0,
                            socket_connect_timeout=0.5)  # fmt: skip
    return RedisRunSharing(SharedRuns(redis, settings, waiter=waiter), runs, metrics)


async def build_regions(
    config: GatewayConfig,
    service: Service,
    store: ConversationStore,
    pipeline: ChatPipeline,
    away_pipeline: Callable[[HomeStore, Buckets], ChatPipeline],
    registry: CollectorRegistry,
    limits: Callable[[Tier], Limit],
) -> RegionRouter | NoRegions:
    if not config.region and not config.global_etcd_endpoint:
        return NoRegions(pipeline)
    if not (config.region and config.global_etcd_endpoint):
        raise ConfigError("regions need both region and global_etcd_endpoint")
    directory = Directory(config.global_etcd_endpoint, config.global_prefix)
    service.closes(directory.close)
    view = DirectoryView(directory, config.directory_refresh_s)
    # Before the first message: the users and regions are known when the server opens.
    await view.refresh()
    service.task(view.run(), "directory")
    rules = RegionRules(config.region_spill_rung, config.region_out_after_s)
    return RegionRouter(config.region, view, store, pipeline, away_pipeline, config.tls, rules,
                        registry, config.default_pool, directory, limits)  # fmt: skip


async def serve(config: GatewayConfig, stop: asyncio.Event) -> None:
    log = configure_logging("gateway", config.log_level)
    policy = build_policy(config)
    async with Service("gateway", log) as service:
        store = await open_store(config.store_url)
        service.closes(store.close)
        scheduler = SchedulerClient(config.scheduler_addresses or [config.scheduler_address],
                                    tls=config.tls, pick_stream=config.pick_stream)  # fmt: skip
        service.closes(scheduler.close)
        client = NodeClient(tls=config.tls, local_counts=config.local_token_counts)
        nodes: LinkedNodes | NodeClient = LinkedNodes(client) if config.node_link else client
        service.closes(nodes.close)
        runs = RunRegistry(time.monotonic, config.keep_ended_runs_s)
        redis_client = connect_redis(config)
        if redis_client is not None:
            service.closes(redis_client.aclose)
        registry = CollectorRegistry()
        metrics = GatewayMetrics(registry)
        buckets = build_buckets(config, policy, redis_client, metrics)
        sharing = build_run_sharing(config, redis_client, runs, metrics)
        versions = VersionBook(scheduler, config.rollout_poll_s, config.slow_ttft_s,
                               metrics.know_versions, config.rollout_wait_s)  # fmt: skip
        # The rollout as it stands before the first message, when a scheduler answers; else
        # the configured version until one does (the poll keeps asking).
        with contextlib.suppress(Unavailable):
            await versions.refresh()
        service.task(versions.run(), "versions")
        budget = build_daily_budget(config, redis_client, metrics)
        capture = capture_policy(config)
        expired = ExpiredPrompts(store, capture.retention_s)
        service.task(expired.run(), "prompt-capture")
        policies = build_policies(config)
        memories = MemoryDesk(store, config.memory.policy(), time.time, policies, metrics)
        # One policy and MCP client for the pipeline's stored tool messages and for
        # ChatService's completions with tools.
        files = FileDesk(store, config.files, time.time, metrics)
        loops = tool_loops(config.tools, metrics, policies, memories, files, versions)
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
            policies,
            build_compactor(config, store, scheduler, nodes),
            versions=versions,
            budget=budget,
            region=config.region,
            prompts=StoredPrompts(store, capture),
            # A stored message asking for tools: the loop over this pipeline's completions.
            tool_messages=lambda steps: ToolMessages(
                loops(steps), store, buckets, runs, config.region, StoredPrompts(store, capture),
            ),
            memories=memories,
        )  # fmt: skip

        def away_pipeline(home_store: HomeStore, home_buckets: Buckets) -> ChatPipeline:
            # A conversation of another region's user: history read from and written to its
            # home (the store given), its bucket home's, its prompt captured there and its
            # memory read there;
            # compaction is left to home; its run is this gateway's.
            return ChatPipeline(home_store, scheduler, nodes, runs, home_buckets, policy,
                                time.monotonic, LocalRuns(), metrics, build_policies(config),
                                None, region=config.region, versions=versions,
                                budget=budget,
                                prompts=StoredPrompts(home_store, capture),
                                memories=memories.over(home_store.memories()))  # fmt: skip

        regions = await build_regions(
            config, service, store, pipeline, away_pipeline, registry, buckets.limit
        )
        streaming = Gauge("gateway_answers_streaming", "answers being generated", registry=registry)
        streaming.set_function(lambda: len(runs.running()))
        # Runs held for retries and resumes: grows for keep_ended_runs_s, then stays about level.
        kept = Gauge("gateway_runs_kept", "runs held, ended ones included", registry=registry)
        kept.set_function(lambda: len(runs))
        revision = Gauge("gateway_rollout_revision",
                         "the revision of the model versions' rollout this gateway applies",
                         registry=registry)  # fmt: skip
        revision.set_function(lambda: versions.revision)
        registry.register(CurrentVersion(lambda: versions.state))
        registry.register(TlsExpiry("gateway", [config.tls]))
        metrics_server = await service.metrics(registry, config.metrics_listen)
        service_name = chat_service_pb2.DESCRIPTOR.services_by_name["ChatService"].full_name
        home_name = home_service_pb2.DESCRIPTOR.services_by_name["HomeService"].full_name
        replay_name = replay_service_pb2.DESCRIPTOR.services_by_name["ReplayService"].full_name
        link_name = edge_link_pb2.DESCRIPTOR.services_by_name["EdgeLinkService"].full_name
        server = GrpcServer(config.grpc_listen, [service_name, home_name, replay_name, link_name],
                            tls=config.tls, health_listen=config.health_listen)  # fmt: skip
        peers = PeerGateways(config.tls)
        service.closes(peers.close)
        ratings = RatingDesk(store, versions, metrics)
        chat = ChatServicer(Authenticator(store, regions.user_by_token_hash), pipeline, store,
                            buckets, ratings, regions, peers,
                            stream_interval_s=config.stream_interval_s,
                            tools=loops(pipeline), memories=memories,
                            files=files)  # fmt: skip
        chat_service_pb2_grpc.add_ChatServiceServicer_to_server(chat, server.server)
        # The same streams, many to a stream, for edges (gateway/edge_link.py).
        linked = EdgeLinkServicer(chat.streams, metrics, config.edge_link_frame_interval_s)
        edge_link_pb2_grpc.add_EdgeLinkServiceServicer_to_server(linked, server.server)
        home = HomeServicer(store, buckets, ratings)
        home_service_pb2_grpc.add_HomeServiceServicer_to_server(home, server.server)
        replayer = Replayer(store, versions, scheduler, nodes, default_pool=config.default_pool,
                            default_system_prompt=config.system_prompt,
                            timeout_s=config.replay_timeout_s)  # fmt: skip
        replays = ReplayServicer(replayer, config.admin_token)
        replay_service_pb2_grpc.add_ReplayServiceServicer_to_server(replays, server.server)
        await service.grpc(server)
        service.task(regions.publish(server.address, config.region_publish_s), "publish")
        address = config.advertise_address or advertised(server.address)
        background = sharing.start(pipeline.resume, address if config.probe_gateways else "")
        # Once the drain ended every run: the takeover work stops, nothing is left to take.
        service.closes(lambda: sharing.retire(background))
        # After the stop (health NOT_SERVING): answers already running finish and are saved.
        service.drains(lambda: pipeline.close(config.shutdown_grace_s))
        service.drains(lambda: regions.close(config.shutdown_grace_s))
        await service.serve(
            stop,
            config.ready_file,
            server.ready({"metrics": metrics_server.port}),
            grpc=server.address,
            metrics_port=metrics_server.port,
        )


def main() -> None:
    run_service(GatewayConfig, "gateway", serve, "the chat pipeline, over gRPC")


if __name__ == "__main__":
    main()
