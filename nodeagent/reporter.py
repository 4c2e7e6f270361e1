"""Streams this node's registration and load to the scheduler and obeys its commands."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
import structlog

from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from infra.keepalive import CLIENT_CHANNEL
from infra.tls import TlsConfig
from infra.tls_channel import open_channel
from nodeagent.changes import Changes
from nodeagent.engine import Engine

# Between attempts to reach a scheduler: doubling from the first to the most while attempts
# fail, back to the first after a stream that lasted STREAM_LASTED_S.
FIRST_BACKOFF_S = 0.1
MOST_BACKOFF_S = 2.0
STREAM_LASTED_S = 2.0


# What a pick reads of a replica, sent within report_interval_s of changing.
AT_ONCE = (
    "state",
    "running_requests",
    "waiting_requests",
    "queued_prefill_tokens",
    "prefill_tokens_per_second",
    "decode_step_seconds",
    "answer_seconds",
)
# A change in the KV cache's use worth a report before the heartbeat, as a share of the cache.
KV_STEP = 0.02


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    node_id: str
    address: str
    pool: str


class LoadReporter:
    def __init__(
        self,
        identity: NodeIdentity,
        engine: Engine,
        scheduler_addresses: list[str],
        accepting: asyncio.Event,
        activity: Changes,
        running: Callable[[], int],
        interval_s: float = 0.25,
        engine_ok: asyncio.Event | None = None,
        heartbeat_s: float = 1.0,
        *,
        tls: TlsConfig | None = None,
        kv_step: float = KV_STEP,
    ) -> None:
        if not 0 < interval_s <= heartbeat_s:
            raise ValueError("need 0 < report interval <= report heartbeat")
        if not 0 <= kv_step < 1:
            raise ValueError(f"the report's KV step is a share of the cache, in [0, 1): {kv_step}")
        self._identity = identity
        self._engine = engine
        self._addresses = scheduler_addresses
        # The node's certificate: the scheduler checks that its name is this node's id.
        self._tls = tls
        self._accepting = accepting
        # Noted at every request start, engine health flip and drain command: what an idle
        # node's reports wait on.
        self._activity = activity
        self._running = running
        self._interval_s = interval_s
        self._heartbeat_s = heartbeat_s
        self._kv_step = kv_step
        self._engine_ok = engine_ok
        self._draining_by_operator = False
        self._log = structlog.get_logger(component="reporter", node=identity.node_id)

    async def run(self) -> None:
        """One stream per scheduler: every scheduler holds the whole load table."""
        async with asyncio.TaskGroup() as group:
            for address in self._addresses:
                group.create_task(self._report_forever(address))

    async def _report_forever(self, address: str) -> None:
        loop = asyncio.get_running_loop()
        backoff_s = FIRST_BACKOFF_S
        while True:
            began = loop.time()
            try:
                async with open_channel(address, self._tls, CLIENT_CHANNEL) as scheduler:
                    stub = pb_grpc.SchedulerServiceStub(scheduler)
                    async for response in stub.ConnectNode(self.messages()):
                        self.obey(response.command)
            except grpc.aio.AioRpcError as error:
                self._log.warning(
                    "scheduler stream lost", scheduler=address, code=error.code().name
                )
            # A call starts before it connects, and a scheduler answers only with commands: a
            # stream that lasted is the sign that the scheduler was there. Attempts that fail
            # at once (a scheduler down) back off, or every node would call ten times a second.
            if loop.time() - began >= STREAM_LASTED_S:
                backoff_s = FIRST_BACKOFF_S
            # Jitter: after a scheduler restart, a fleet's nodes must not reconnect in lockstep.
            await asyncio.sleep(backoff_s * random.uniform(0.5, 1.5))
            backoff_s = min(MOST_BACKOFF_S, backoff_s * 2)

    def obey(self, command: int) -> None:
        if command == pb.NODE_COMMAND_DRAIN:
            self._draining_by_operator = True
            self._accepting.clear()
            self._activity.note()
        elif command == pb.NODE_COMMAND_UNDRAIN:
            self._draining_by_operator = False
            self._accepting.set()
            self._activity.note()

    async def messages(self) -> AsyncIterator[pb.ConnectNodeRequest]:
        """What this node sends a scheduler: its registration, then its load."""
        yield pb.ConnectNodeRequest(
            registration=pb.NodeRegistration(
                node_id=self._identity.node_id,
                address=self._identity.address,
                model=self._engine.model,
                pool=self._identity.pool,
                context_tokens=self._engine.context_tokens,
                kv_capacity_tokens=(await self._engine.load()).kv_capacity_tokens,
                max_running_requests=self._engine.max_running_requests,
            )
        )
        loop = asyncio.get_running_loop()
        sent: pb.LoadReport | None = None
        sent_at = 0.0
        while True:
            seen = self._activity.count
            load = await self.snapshot()
            # An unchanged load is sent only as a heartbeat: an idle fleet's reports were most
            # of its schedulers' and nodes' idle CPU (a gRPC message costs ~0.5 ms each side).
            if is_news(load, sent, self._kv_step) or loop.time() - sent_at >= self._heartbeat_s:
                yield pb.ConnectNodeRequest(load=load)
                sent, sent_at = load, loop.time()
            if self._running() or load.running_requests or load.waiting_requests:
                await asyncio.sleep(self._interval_s)
                continue
            # Idle: only this node's own requests change its load, so the next read waits for
            # a change (a start, a health flip, a drain) or the heartbeat, not the interval:
            # four wakes a second on every idle node, each a read of the engine's load (an
            # HTTP scrape on vLLM).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sent_at + self._heartbeat_s - loop.time()):
                    await self._activity.wait_after(seen)

    async def snapshot(self) -> pb.LoadReport:
        load = await self._engine.load()
        if self._engine_ok is not None and not self._engine_ok.is_set():
            state = pb.NODE_STATE_DEAD
        elif self._accepting.is_set():
            state = pb.NODE_STATE_READY
        else:
            state = pb.NODE_STATE_DRAINING
        return pb.LoadReport(
            kv_usage=load.kv_usage,
            free_kv_tokens=load.free_kv_tokens,
            queued_prefill_tokens=load.queued_prefill_tokens,
            running_requests=load.running_requests,
            waiting_requests=load.waiting_requests,
            prefix_hit_rate=load.prefix_hit_rate,
            state=state,
            prefill_tokens_per_second=load.prefill_tokens_per_s,
            decode_step_seconds=load.decode_step_s,
            answer_seconds=load.answer_s,
        )


def is_news(load: pb.LoadReport, sent: pb.LoadReport | None, kv_step: float) -> bool:
    """Whether the load differs from the one sent in what a pick reads at once: the state,
    the requests running and waiting, the prompt tokens queued, the measured speeds, or the
    KV cache's use by kv_step or more. A busy engine's cache grows with every token it writes,
    and each report is a gRPC message at both ends: that growth alone waits for the heartbeat
    (docs/decisions.md, "Load reports: changes every 250 ms, heartbeats every second")."""
    if sent is None:
        return True
    if any(getattr(load, name) != getattr(sent, name) for name in AT_ONCE):
        return True
    if not kv_step:
        return load != sent
    return abs(load.kv_usage - sent.kv_usage) >= kv_step
