"""The global layer above the regions, in etcd: the user directory (home region, residency,
token hashes) and each region's published capacity.

Keys under one prefix (default `/chat/v1/global/`):
- `users/<user_id>`: {"user_id", "tier", "home", "pinned", "token_hash"}
- `tokens/<sha256 of a token>`: the user id, so any region recognises any user's token
- `regions/<name>`: {"name", "published_at", "pools": {pool: {rung, busy_share,
  ready_replicas}}, "gateways": [...]}, rewritten every few seconds by the region's scheduler
  (capacity) and gateways (their addresses, `regions/<name>/gateways/<address>`)

Readers keep a `DirectorySnapshot` refreshed in the background (`DirectoryView`): the hot path
of a message reads memory only, never etcd. A region that stops publishing ages out of every
reader's snapshot; the age is wall time, the published_at of the writer's clock (one machine,
or hosts kept in sync by NTP; a skew of seconds would need the etcd revision instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aetcd
import grpc
import structlog

from domain.regions import PoolCapacity, RegionCapacity
from domain.types import Tier

DEFAULT_PREFIX = "/chat/v1/global/"
GATEWAY_STALE_S = 10.0
ETCD_ERRORS = (aetcd.ClientError, grpc.aio.AioRpcError, TimeoutError)
_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.min_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 1000,
}


@dataclass(frozen=True, slots=True)
class DirectoryUser:
    user_id: str
    tier: Tier
    home: str
    pinned: bool
    token_hash: str = ""


@dataclass(frozen=True, slots=True)
class DirectorySnapshot:
    users: dict[str, DirectoryUser] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    regions: dict[str, RegionCapacity] = field(default_factory=dict)

    def user_by_token_hash(self, digest: str) -> DirectoryUser | None:
        user_id = self.tokens.get(digest)
        return self.users.get(user_id) if user_id else None


def etcd_address(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"an etcd endpoint is host:port, not {endpoint!r}")
    return host, int(port)


class Directory:
    """Reads and writes the global layer. Every call goes to etcd: callers on a hot path read
    a DirectoryView's snapshot instead."""

    def __init__(self, endpoint: str, prefix: str = DEFAULT_PREFIX, timeout_s: float = 2.0):
        host, port = etcd_address(endpoint)
        self._client = aetcd.Client(host=host, port=port, timeout=timeout_s,
                                    options=_CHANNEL_OPTIONS)  # fmt: skip
        self._prefix = prefix

    def _key(self, *parts: str) -> bytes:
        return (self._prefix + "/".join(parts)).encode()

    async def close(self) -> None:
        await self._client.close()

    async def put_user(self, user: DirectoryUser) -> None:
        """The user's record and its token's key; a token the record had before is removed."""
        previous = await self.user(user.user_id)
        if previous is not None and previous.token_hash and previous.token_hash != user.token_hash:
            await self._client.delete(self._key("tokens", previous.token_hash))
        body = {"user_id": user.user_id, "tier": user.tier.value, "home": user.home,
                "pinned": user.pinned, "token_hash": user.token_hash}  # fmt: skip
        await self._client.put(self._key("users", user.user_id), json.dumps(body).encode())
        if user.token_hash:
            await self._client.put(self._key("tokens", user.token_hash), user.user_id.encode())

    async def delete_user(self, user_id: str) -> None:
        """The user's record and its token's key gone; nothing when the user is not listed."""
        previous = await self.user(user_id)
        if previous is not None and previous.token_hash:
            await self._client.delete(self._key("tokens", previous.token_hash))
        await self._client.delete(self._key("users", user_id))

    async def user(self, user_id: str) -> DirectoryUser | None:
        found = await self._client.get(self._key("users", user_id))
        return None if found is None else _user_from(found.value)

    async def users(self) -> dict[str, DirectoryUser]:
        """Every user listed, by id: one read of the users' keys (an operator's listing)."""
        listed = {}
        for kv in await self._client.get_prefix(self._key("users", "")):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                user = _user_from(kv.value)
                listed[user.user_id] = user
        return listed

    async def user_by_token_hash(self, digest: str) -> DirectoryUser | None:
        found = await self._client.get(self._key("tokens", digest))
        return None if found is None else await self.user(found.value.decode())

    async def publish_capacity(self, region: str, pools: dict[str, PoolCapacity]) -> None:
        body = {"name": region, "published_at": time.time(),
                "pools": {name: _pool_to(p) for name, p in pools.items()}}  # fmt: skip
        await self._client.put(self._key("regions", region), json.dumps(body).encode())

    async def publish_gateway(self, region: str, address: str) -> None:
        body = {"address": address, "published_at": time.time()}
        await self._client.put(self._key("regions", region, "gateways", address),
                               json.dumps(body).encode())  # fmt: skip

    async def snapshot(self) -> DirectorySnapshot:
        users: dict[str, DirectoryUser] = {}
        tokens: dict[str, str] = {}
        capacity: dict[str, dict] = {}
        gateways: dict[str, list[tuple[float, str]]] = {}
        for kv in await self._client.get_prefix(self._prefix.encode()):
            value = kv.value
            parts = kv.key.decode()[len(self._prefix) :].split("/")
            with contextlib.suppress(ValueError, KeyError, TypeError):
                match parts:
                    case ["users", _]:
                        user = _user_from(value)
                        users[user.user_id] = user
                    case ["tokens", digest]:
                        tokens[digest] = value.decode()
                    case ["regions", name]:
                        capacity[name] = json.loads(value)
                    case ["regions", name, "gateways", _]:
                        body = json.loads(value)
                        gateways.setdefault(name, []).append(
                            (float(body["published_at"]), str(body["address"]))
                        )
        regions = {
            name: _region_from(body, gateways.get(name, [])) for name, body in capacity.items()
        }
        return DirectorySnapshot(users, tokens, regions)


class DirectoryView:
    """A snapshot of the directory refreshed every refresh_s; while etcd is away the last one
    stays (users are still recognised; regions simply age)."""

    def __init__(self, directory: Directory, refresh_s: float = 1.0) -> None:
        self._directory = directory
        self._refresh_s = refresh_s
        self.snapshot = DirectorySnapshot()
        self._log = structlog.get_logger(component="directory")

    async def refresh(self) -> DirectorySnapshot:
        try:
            self.snapshot = await self._directory.snapshot()
        except ETCD_ERRORS as error:
            self._log.warning("global directory unreachable", error=type(error).__name__)
        return self.snapshot

    async def user_by_token_hash(self, digest: str) -> DirectoryUser | None:
        """From the snapshot; a token it does not hold yet (a user created since the last
        refresh) is looked up in etcd once."""
        found = self.snapshot.user_by_token_hash(digest)
        if found is not None:
            return found
        try:
            return await self._directory.user_by_token_hash(digest)
        except ETCD_ERRORS as error:
            self._log.warning("global directory unreachable", error=type(error).__name__)
            return None

    async def user(self, user_id: str) -> DirectoryUser | None:
        """From the snapshot, or once from etcd for a user created since the last refresh."""
        found = self.snapshot.users.get(user_id)
        if found is not None:
            return found
        try:
            return await self._directory.user(user_id)
        except ETCD_ERRORS as error:
            self._log.warning("global directory unreachable", error=type(error).__name__)
            return None

    async def run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self._refresh_s)


async def publish_forever(
    publish: Callable[[], Awaitable[None]], every_s: float, what: str
) -> None:
    """Calls publish every every_s; etcd trouble is logged and the next round tries again: a
    region that cannot publish simply ages out."""
    log = structlog.get_logger(component="directory")
    while True:
        try:
            await publish()
        except ETCD_ERRORS as error:
            log.warning("could not publish to the global directory", what=what,
                        error=type(error).__name__)  # fmt: skip
        await asyncio.sleep(every_s)


def _user_from(value: bytes) -> DirectoryUser:
    body = json.loads(value)
    return DirectoryUser(str(body["user_id"]), Tier(body["tier"]), str(body["home"]),
                         bool(body["pinned"]), str(body.get("token_hash", "")))  # fmt: skip


def _pool_to(pool: PoolCapacity) -> dict:
    return {"rung": pool.rung, "busy_share": pool.busy_share,
            "ready_replicas": pool.ready_replicas}  # fmt: skip


def _region_from(body: dict, gateways: list[tuple[float, str]]) -> RegionCapacity:
    pools = {
        name: PoolCapacity(int(p["rung"]), float(p["busy_share"]), int(p["ready_replicas"]))
        for name, p in body.get("pools", {}).items()
    }
    # The freshest first; a gateway silent for GATEWAY_STALE_S is gone (a restarted one
    # publishes its new address).
    now = time.time()
    fresh = [(at, address) for at, address in gateways if now - at <= GATEWAY_STALE_S]
    addresses = tuple(address for _, address in sorted(fresh, reverse=True))
    return RegionCapacity(str(body["name"]), float(body["published_at"]), pools, addresses)
