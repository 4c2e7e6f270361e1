"""Node membership: which nodes exist (not their load; that stays in the LoadTable).

`InProcessMembership` keeps it in memory for the single-scheduler local platform.
`EtcdMembership` shares it between schedulers: each node's record is JSON under
`prefix + node_id`, attached to a lease that this scheduler refreshes for as long as the node's
stream is alive, and every scheduler watches the prefix. etcd trouble is logged, never raised:
the view stays as last known and locally registered nodes are written again when etcd returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
from collections.abc import Coroutine
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, TypeVar

import aetcd
import grpc
import structlog

from infra.etcd_client import PLAINTEXT, etcd_client
from infra.tls import TlsConfig

# What aetcd raises when etcd is down, slow or refuses a call; TimeoutError comes from its
# connect() waiting on another task's connection attempt.
ETCD_ERRORS = (aetcd.ClientError, grpc.aio.AioRpcError, TimeoutError)
_RETRY_S = 0.5
T = TypeVar("T")
ETCD_CHANNEL_OPTIONS = {
    # gRPC's default reconnect backoff grows to 120 s; membership must recover within seconds.
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.min_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 1000,
    # Notices an etcd that vanished without closing the socket, so the watch is re-established.
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
}


@dataclass(frozen=True, slots=True)
class NodeRecord:
    node_id: str
    address: str
    pool: str
    model: str
    context_tokens: int
    kv_capacity_tokens: int

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> NodeRecord:
        """Raises ValueError or TypeError on a value that is not a record."""
        fields = json.loads(data)
        if not isinstance(fields, dict):
            raise ValueError("a node record is a JSON object")
        return cls(**fields)


class ChangeKind(StrEnum):
    JOINED = "joined"  # a new node, or a known node whose record changed
    LEFT = "left"


@dataclass(frozen=True, slots=True)
class MembershipChange:
    kind: ChangeKind
    node_id: str
    record: NodeRecord | None  # None when the node left


class Membership(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def register(self, record: NodeRecord) -> None: ...

    async def deregister(self, node_id: str) -> None: ...

    def members(self) -> dict[str, NodeRecord]:
        """A snapshot of every known node, registered here or by another scheduler."""
        ...

    def subscribe(self) -> asyncio.Queue[MembershipChange]:
        """A queue that receives every change to members() from now on."""
        ...

    def unsubscribe(self, queue: asyncio.Queue[MembershipChange]) -> None: ...


class _View:
    """The known members and their subscribers. Only the event loop's tasks touch it."""

    def __init__(self) -> None:
        self._view: dict[str, NodeRecord] = {}
        self._subscribers: list[asyncio.Queue[MembershipChange]] = []

    def members(self) -> dict[str, NodeRecord]:
        return dict(self._view)

    def subscribe(self) -> asyncio.Queue[MembershipChange]:
        queue: asyncio.Queue[MembershipChange] = asyncio.Queue()
        self._subscribers.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[MembershipChange]) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(queue)

    def _set(self, record: NodeRecord) -> None:
        if self._view.get(record.node_id) == record:
            return
        self._view[record.node_id] = record
        self._publish(MembershipChange(ChangeKind.JOINED, record.node_id, record))

    def _remove(self, node_id: str) -> None:
        if self._view.pop(node_id, None) is not None:
            self._publish(MembershipChange(ChangeKind.LEFT, node_id, None))

    def _replace(self, records: dict[str, NodeRecord]) -> None:
        for node_id in self._view.keys() - records.keys():
            self._remove(node_id)
        for record in records.values():
            self._set(record)

    def _publish(self, change: MembershipChange) -> None:
        for queue in self._subscribers:
            queue.put_nowait(change)


class InProcessMembership(_View):
    """One scheduler, no I/O: the members are the nodes registered here."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def register(self, record: NodeRecord) -> None:
        self._set(record)

    async def deregister(self, node_id: str) -> None:
        self._remove(node_id)


@dataclass(eq=False)
class _Registration:
    """A node registered by this scheduler; its keeper task owns the lease."""

    record: NodeRecord
    lease: aetcd.Lease | None = None
    # True when etcd may not hold this record under this lease: write it (again) on next renew.
    stale: bool = True
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    keeper: asyncio.Task[None] | None = None


class EtcdMembership(_View):
    def __init__(
        self,
        host: str,
        port: int,
        prefix: str = "/chat/v1/nodes/",
        lease_ttl_s: float = 2,
        tls: TlsConfig = PLAINTEXT,
    ) -> None:
        super().__init__()
        # At construction, so a scheduler with half its etcd TLS files set does not start.
        tls.check()
        self._host = host
        self._port = port
        self._tls = tls
        self._prefix = prefix.encode()
        # etcd leases are whole seconds.
        self._lease_ttl = max(1, math.ceil(lease_ttl_s))
        self._refresh_s = self._lease_ttl / 3
        self._local: dict[str, _Registration] = {}
        self._client: aetcd.Client | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._reachable = True
        self._log = structlog.get_logger(component="membership", prefix=prefix)

    # Lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        # A call that outlives the lease is useless: the key would be gone by the time it lands.
        timeout = self._lease_ttl / 2
        self._client = etcd_client(
            self._host, self._port, self._tls, timeout=timeout, options=ETCD_CHANNEL_OPTIONS
        )
        revision = await self._try(self._resync(), "read members")
        self._watcher = asyncio.create_task(self._watch_forever(revision))

    async def stop(self) -> None:
        """Stops refreshing without revoking: other schedulers may still hold these nodes."""
        tasks = [reg.keeper for reg in self._local.values() if reg.keeper is not None]
        if self._watcher is not None:
            tasks.append(self._watcher)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._watcher = None
        self._local.clear()
        if self._client is not None:
            await self._client.close()
            self._client = None

    @property
    def _etcd(self) -> aetcd.Client:
        if self._client is None:
            raise RuntimeError("EtcdMembership is used before start() or after stop()")
        return self._client

    # Registration -------------------------------------------------------------------------------

    async def register(self, record: NodeRecord) -> None:
        reg = self._local.get(record.node_id)
        if reg is None:
            reg = self._local[record.node_id] = _Registration(record)
        else:
            reg.record, reg.stale = record, True
        self._set(record)
        # Written at once so that the node is visible when register returns (if etcd is up).
        async with reg.lock:
            await self._try(self._renew(reg), "register node", node=record.node_id)
        if reg.keeper is None:
            reg.keeper = asyncio.create_task(self._keep_alive(reg))

    async def deregister(self, node_id: str) -> None:
        reg = self._local.pop(node_id, None)
        if reg is None:
            return
        self._remove(node_id)
        if reg.keeper is not None:
            reg.keeper.cancel()
            await asyncio.gather(reg.keeper, return_exceptions=True)
        if reg.lease is not None:
            # When etcd is unreachable the lease simply expires, as nobody refreshes it now.
            await self._try(reg.lease.revoke(), "revoke lease", node=node_id)

    async def _keep_alive(self, reg: _Registration) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reg.wake.wait(), self._refresh_s)
            reg.wake.clear()
            async with reg.lock:
                await self._try(self._renew(reg), "refresh lease", node=reg.record.node_id)

    async def _renew(self, reg: _Registration) -> None:
        if reg.lease is None or not await self._refresh(reg.lease):
            # Never granted, expired during an outage, or etcd lost it: a new lease.
            reg.lease = await self._etcd.lease(self._lease_ttl)
            reg.stale = True
        if reg.stale:
            key = self._prefix + reg.record.node_id.encode()
            await self._etcd.put(key, reg.record.to_json(), lease=reg.lease)
            reg.stale = False

    @staticmethod
    async def _refresh(lease: aetcd.Lease) -> bool:
        """False when etcd no longer knows the lease (it answers TTL 0)."""
        reply = await lease.refresh()
        return reply is not None and reply.TTL > 0

    # The shared view ----------------------------------------------------------------------------

    async def _watch_forever(self, revision: int | None) -> None:
        while True:
            if revision is None:
                revision = await self._try(self._resync(), "read members")
            if revision is not None:
                await self._try(self._follow(revision), "watch members")
                revision = None
            await asyncio.sleep(_RETRY_S)

    async def _resync(self) -> int:
        """Rebuilds the view from etcd; returns the revision it reflects."""
        result = await self._etcd.get_prefix(self._prefix)
        records = {}
        for kv in result:
            record = self._parse(kv.key, kv.value)
            if record is not None:
                records[record.node_id] = record
        for node_id, reg in self._local.items():
            if node_id not in records:
                self._rewrite(reg)
                records[node_id] = reg.record
        self._replace(records)
        return result.header.revision

    async def _follow(self, revision: int) -> None:
        watch = await self._etcd.watch_prefix(self._prefix, start_revision=revision + 1)
        self._mark_reachable()
        async for event in watch:
            self._apply(event)

    def _apply(self, event: aetcd.Event) -> None:
        if event.kind == aetcd.EventKind.PUT:
            record = self._parse(event.kv.key, event.kv.value)
            if record is not None:
                self._set(record)
            return
        node_id = event.kv.key[len(self._prefix) :].decode(errors="replace")
        reg = self._local.get(node_id)
        if reg is None:
            self._remove(node_id)
        else:
            # Still connected here: another scheduler's lease carried the key, or ours expired
            # during an outage. The node still exists, so write it back under our lease.
            self._rewrite(reg)

    @staticmethod
    def _rewrite(reg: _Registration) -> None:
        reg.stale = True
        reg.wake.set()

    def _parse(self, key: bytes, value: bytes) -> NodeRecord | None:
        try:
            record = NodeRecord.from_json(value)
        except (ValueError, TypeError) as error:
            self._log.warning("ignoring a malformed node record", key=key, error=str(error))
            return None
        if key != self._prefix + record.node_id.encode():
            self._log.warning("ignoring a node record under another id", key=key)
            return None
        return record

    # etcd errors --------------------------------------------------------------------------------

    async def _try(
        self, call: Coroutine[object, object, T], what: str, **fields: object
    ) -> T | None:
        try:
            result = await call
        except ETCD_ERRORS as error:
            self._mark_unreachable(what, error, fields)
            return None
        self._mark_reachable()
        return result

    def _mark_unreachable(self, what: str, error: Exception, fields: dict[str, object]) -> None:
        # One warning per outage, not one per node per refresh.
        if self._reachable:
            self._log.warning("etcd unavailable", during=what, error=str(error), **fields)
        self._reachable = False

    def _mark_reachable(self) -> None:
        if not self._reachable:
            self._log.info("etcd reachable again")
        self._reachable = True
