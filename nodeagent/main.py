"""The nodeagent's composition root: config -> engine, registry, servicer, reporter, servers."""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry, Gauge

from chat.v1 import node_service_pb2, node_service_pb2_grpc
from domain.replica_hardware import PRESETS
from domain.token_counts import TokenCounts
from infra.grpcserver import GrpcServer
from infra.logs import configure_logging
from infra.runner import run_service
from infra.service import Service
from infra.tls import TlsConfig
from infra.tls_files import TlsExpiry
from nodeagent.changes import Changes
from nodeagent.engine import Engine, EngineError
from nodeagent.llamacpp import LlamaCppEngine
from nodeagent.metrics import register_node_metrics
from nodeagent.reporter import LoadReporter, NodeIdentity
from nodeagent.request_registry import RequestRegistry
from nodeagent.served_tokenizer import ServedTokenizer, vouch
from nodeagent.servicer import NodeServicer
from nodeagent.sim import SimEngine
from nodeagent.vllm import VllmEngine
from nodeagent.vllm_launch import VllmLaunch


@dataclass
class NodeAgentConfig:
    node_id: str = field(default_factory=socket.gethostname)
    grpc_listen: str = "127.0.0.1:0"
    metrics_listen: str = "127.0.0.1:0"
    # The CA, this node's certificate and key (infra.tls), or insecure: true. The
    # certificate's name must be node_id: the scheduler takes this node's stream only then.
    tls: TlsConfig = field(default_factory=TlsConfig)
    # Health alone, in plaintext, for probes that show no certificate; empty: none.
    health_listen: str = ""
    # The address gateways dial; empty means the bound gRPC address.
    advertise_address: str = ""
    scheduler_addresses: list[str] = field(default_factory=lambda: ["127.0.0.1:50051"])
    engine: str = "llamacpp"
    model: str = "smollm2-135m-instruct"
    # llamacpp: a GGUF file (empty: the bundled SmolLM2); vllm: a Hugging Face model folder
    # (empty: .vllm/smollm2-135m-instruct, made by scripts/install_vllm.sh).
    model_path: str = ""
    pool: str = "small"
    slot_context_tokens: int = 8192
    parallel: int = 2
    threads: int = 2
    report_interval_s: float = 0.25
    # The load is read every report_interval_s and sent when it changed, else this often: well
    # inside the scheduler's report_timeout_s (2 s), after which a silent node is not picked.
    report_heartbeat_s: float = 1.0
    # A busy engine's KV cache grows with every token: a change of its use smaller than this
    # share of the cache waits for the heartbeat; 0 reports every change (nodeagent/reporter.py).
    report_kv_step: float = 0.02
    # After an answer's first token, tokens are sent at most this often, several to a chunk
    # (vLLM's and SGLang's --stream-interval, in seconds): each message costs CPU at every hop.
    # 0 sends every token as it comes.
    stream_interval_s: float = 0.05
    # Token counts kept by text (a digest of it), so a history resent every message is not
    # counted again by the engine; 0 keeps none.
    tokenize_cache_texts: int = 16_384
    # The engine model's tokenizer.json, offered to gateways so they count tokens themselves
    # (checked against the engine at start, not offered if it counts otherwise). Empty: the
    # vLLM model folder's own, or for the bundled SmolLM2 the one scripts/install_vllm.sh
    # converts from the same GGUF, when there is one. serve_tokenizer false offers none.
    tokenizer_file: str = ""
    serve_tokenizer: bool = True
    shutdown_grace_s: float = 30.0
    keep_after_finish_s: float = 60.0
    # A request whose gateway vanished waits this long for another to re-attach.
    reattach_grace_s: float = 5.0
    health_interval_s: float = 1.0
    # An answer with no news this long is vouched for on its link while the engine passes its
    # health check, so a gateway waits for it instead of failing it over (keep it well under
    # the gateways' node_stall_timeout_s).
    vouch_interval_s: float = 1.0
    # engine "sim": the simulated replica's hardware and model (see domain.replica_hardware.PRESETS)
    # and how many times faster than real time it runs.
    sim_preset: str = "70b-4xh100"
    sim_speed: float = 1.0
    # The shortest and longest answer the simulated model writes (when max tokens allow).
    sim_answer_tokens: list[int] = field(default_factory=lambda: [100, 700])
    # How many conversations' cached tokens the simulated replica remembers (its prefix cache),
    # the oldest forgotten first.
    sim_remembered_conversations: int = 1_000
    # The accelerators the engine holds (vLLM's tensor-parallel size; the pod's GPU limit):
    # the cost view counts them for as long as the node runs (nodeagent/metrics.py).
    gpus: int = 1
    # engine "vllm": attach to the vLLM server at vllm_url (a GPU pod runs it in its own
    # container), or, when empty, start one with vllm_python (empty: .vllm/venv/bin/python).
    # slot_context_tokens is its max model length; `model` is the name it serves.
    vllm_url: str = ""
    vllm_python: str = ""
    vllm_max_num_seqs: int = 8
    # vLLM's CPU build only: KV cache size in host memory and the cores its threads use.
    vllm_kvcache_space_gib: int = 1
    vllm_cpu_threads_bind: str = "0-1"
    # Skip torch.compile / CUDA graphs: a CPU node starts in ~1 min instead of 5+.
    vllm_enforce_eager: bool = False
    # The started server's tool-call parser and chat template; empty: its model family's
    # (nodeagent/vllm_flags.py), which a model folder of no known family must name.
    vllm_tool_call_parser: str = ""
    vllm_chat_template: str = ""
    vllm_startup_timeout_s: float = 300.0
    ready_file: str = ""
    log_level: str = "info"


def _answer_range(tokens: list[int]) -> tuple[int, int]:
    if len(tokens) != 2 or not 1 <= tokens[0] <= tokens[1]:
        raise ValueError(
            f"sim_answer_tokens is [shortest, longest], 1 <= shortest <= longest: {tokens}"
        )
    return tokens[0], tokens[1]


def build_engine(config: NodeAgentConfig) -> Engine:
    if config.engine == "llamacpp":
        return LlamaCppEngine(
            model=config.model,
            model_path=config.model_path,
            slot_context_tokens=config.slot_context_tokens,
            parallel=config.parallel,
            threads=config.threads,
        )
    if config.engine == "sim":
        if config.sim_preset not in PRESETS:
            raise ValueError(
                f"unknown sim_preset {config.sim_preset!r}; presets: {', '.join(PRESETS)}"
            )
        shortest, longest = _answer_range(config.sim_answer_tokens)
        if config.sim_remembered_conversations < 1:
            raise ValueError("sim_remembered_conversations must be at least 1")
        return SimEngine(
            PRESETS[config.sim_preset],
            speed=config.sim_speed,
            answer_lengths=(shortest, longest),
            remembered_conversations=config.sim_remembered_conversations,
        )
    if config.engine == "vllm":
        return _vllm_engine(config)
    raise ValueError(f"unknown engine {config.engine!r}; this build has: llamacpp, sim, vllm")


def tokenizer_file(config: NodeAgentConfig) -> Path | None:
    """The tokenizer file the node offers gateways, if any."""
    if not config.serve_tokenizer or config.engine == "sim":
        return None
    if config.tokenizer_file:
        path = Path(config.tokenizer_file)
        if not path.is_file():
            raise ValueError(f"tokenizer_file {config.tokenizer_file!r} is not a file")
        return path
    if config.engine == "vllm":
        folder = Path(config.model_path or VllmLaunch().model_path)
    elif not config.model_path:
        folder = Path(VllmLaunch().model_path)  # converted from the bundled GGUF
    else:
        return None  # a GGUF of the operator's: its tokenizer.json is theirs to name
    default = folder / "tokenizer.json"
    return default if default.is_file() else None


async def _served_tokenizer(path: Path | None, engine: Engine) -> ServedTokenizer | None:
    return await vouch(engine.model, path, engine.tokenize) if path is not None else None


def _vllm_engine(config: NodeAgentConfig) -> VllmEngine:
    if config.vllm_max_num_seqs < 1 or config.vllm_kvcache_space_gib < 1:
        raise ValueError("vllm_max_num_seqs and vllm_kvcache_space_gib must be at least 1")
    defaults = VllmLaunch()
    launch = VllmLaunch(
        python=config.vllm_python or defaults.python,
        model_path=config.model_path or defaults.model_path,
        kvcache_space_gib=config.vllm_kvcache_space_gib,
        cpu_threads_bind=config.vllm_cpu_threads_bind,
        max_num_seqs=config.vllm_max_num_seqs,
        enforce_eager=config.vllm_enforce_eager,
        tool_call_parser=config.vllm_tool_call_parser,
        chat_template=config.vllm_chat_template,
    )
    return VllmEngine(
        model=config.model,
        context_tokens=config.slot_context_tokens,
        base_url=config.vllm_url,
        launch=launch,
        startup_timeout_s=config.vllm_startup_timeout_s,
    )


async def watch_engine(
    engine: Engine,
    engine_ok: asyncio.Event,
    interval_s: float,
    activity: Changes,
    log: structlog.stdlib.BoundLogger,
    heard_at: Callable[[], float] = lambda: -math.inf,
) -> None:
    """Keeps engine_ok true while the engine answers its health check. A token written
    within the interval passes for one: a busy node does not ask its engine each second
    (an HTTP request on a new connection, about 1.3 ms of the node's CPU)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval_s)
        if engine_ok.is_set() and loop.time() - heard_at() < interval_s:
            continue
        healthy = await engine.healthy()
        if healthy == engine_ok.is_set():
            continue
        log.warning("engine health changed", healthy=healthy)
        if healthy:
            engine_ok.set()
        else:
            engine_ok.clear()
        activity.note()


async def serve(config: NodeAgentConfig, stop: asyncio.Event) -> None:
    log = configure_logging("nodeagent", config.log_level).bind(node=config.node_id)
    engine = build_engine(config)
    offered = tokenizer_file(config)
    async with Service("nodeagent", log) as service:
        try:
            await service.opens(engine.start, engine.stop)
        except EngineError as exc:
            # The line an operator reads in a crash-looping container's log: why the node
            # never registered (a vLLM started without a flag it relies on, most often).
            log.error("engine not usable: the node does not register", reason=str(exc))
            raise
        # What an idle node's load reports wait on (nodeagent/changes.py).
        activity = Changes()
        registry = RequestRegistry(
            engine, config.keep_after_finish_s, config.reattach_grace_s, activity
        )
        service.closes(registry.close)
        engine_ok = asyncio.Event()
        engine_ok.set()
        accepting = asyncio.Event()
        accepting.set()
        metrics_registry = CollectorRegistry()
        register_node_metrics(
            metrics_registry, config.pool, config.gpus, lambda: len(registry), time.monotonic
        )
        token_counts = TokenCounts(config.tokenize_cache_texts)
        # How full the token-count cache is: it grows until tokenize_cache_texts, then stays.
        kept = Gauge(
            "nodeagent_token_counts_kept",
            "texts whose token count is kept",
            registry=metrics_registry,
        )
        kept.set_function(lambda: len(token_counts))
        metrics_registry.register(TlsExpiry("nodeagent", [config.tls]))
        metrics = await service.metrics(metrics_registry, config.metrics_listen)
        server = GrpcServer(
            config.grpc_listen,
            [node_service_pb2.DESCRIPTOR.services_by_name["NodeService"].full_name],
            tls=config.tls,
            health_listen=config.health_listen,
        )
        tokenizer = await _served_tokenizer(offered, engine)
        servicer = NodeServicer(
            engine, registry, accepting, engine_ok, config.stream_interval_s, token_counts,
            tokenizer, config.vouch_interval_s,
        )  # fmt: skip
        node_service_pb2_grpc.add_NodeServiceServicer_to_server(servicer, server.server)
        await service.grpc(server)
        identity = NodeIdentity(
            config.node_id, config.advertise_address or server.address, config.pool
        )
        reporter = LoadReporter(
            identity,
            engine,
            config.scheduler_addresses,
            accepting,
            activity,
            registry.__len__,
            config.report_interval_s,
            engine_ok,
            config.report_heartbeat_s,
            tls=config.tls,
            kv_step=config.report_kv_step,
        )
        service.task(reporter.run(), "reporter")
        watch = watch_engine(engine, engine_ok, config.health_interval_s, activity, log,
                             lambda: registry.heard_at)  # fmt: skip
        service.task(watch, "engine health")
        service.drains(
            lambda: _drain(accepting, activity, registry, servicer, config.shutdown_grace_s)
        )
        ready = {
            "metrics": metrics.port,
            "node_id": identity.node_id,
            "engine_url": getattr(engine, "base_url", ""),
        }
        await service.serve(
            stop,
            config.ready_file,
            server.ready(ready),
            grpc=server.address,
            metrics_port=metrics.port,
            model=engine.model,
        )


async def _drain(
    accepting: asyncio.Event,
    activity: Changes,
    registry: RequestRegistry,
    servicer: NodeServicer,
    grace_s: float,
) -> None:
    """Refuses new answers (the scheduler sees DRAINING at once) and lets running ones finish."""
    accepting.clear()
    activity.note()
    servicer.drain_links()
    await registry.wait_idle(grace_s)


def main() -> None:
    run_service(NodeAgentConfig, "nodeagent", serve, "the sidecar beside one engine")


if __name__ == "__main__":
    main()
