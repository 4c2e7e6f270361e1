"""Membership against real etcd: the session server, or a private one stopped and started."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import aetcd
import pytest

from scheduler.membership import (
    ChangeKind,
    EtcdMembership,
    InProcessMembership,
    MembershipChange,
    NodeRecord,
)
from tests.servers import Etcd, free_port, run_etcd

TTL_S = 2
Factory = Callable[..., Awaitable[EtcdMembership]]


def record(node_id: str, pool: str = "small") -> NodeRecord:
    return NodeRecord(node_id, f"10.0.0.1:{len(node_id)}", pool, "smol", 8192, 65536)


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float) -> float:
    """Polls until check() holds; returns the seconds it took."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not true within {timeout_s} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def keys(client: aetcd.Client, prefix: str) -> dict[str, bytes]:
    found = await client.get_prefix(prefix.encode())
    return {kv.key.decode()[len(prefix) :]: kv.value for kv in found}


async def next_change(queue: asyncio.Queue[MembershipChange]) -> MembershipChange:
    return await asyncio.wait_for(queue.get(), 2.0)


@pytest.fixture
def prefix() -> str:
    return f"/test/{uuid.uuid4().hex}/nodes/"


async def answers(client: aetcd.Client) -> bool:
    with contextlib.suppress(aetcd.ClientError):
        await client.get(b"probe")
        return True
    return False


@pytest.fixture
async def etcd(etcd_server: Etcd) -> AsyncIterator[aetcd.Client]:
    """A plain client that checks what the memberships wrote, once etcd serves (tests.servers
    waits only for its port, which etcd opens before it answers)."""
    async with aetcd.Client(host=etcd_server.host, port=etcd_server.port) as client:
        await eventually(lambda: answers(client), 30.0)
        yield client


@pytest.fixture
async def memberships(etcd_server: Etcd, etcd: aetcd.Client, prefix: str) -> AsyncIterator[Factory]:
    started: list[EtcdMembership] = []

    async def start(port: int = etcd_server.port, **options: object) -> EtcdMembership:
        options.setdefault("prefix", prefix)
        membership = EtcdMembership(etcd_server.host, port, lease_ttl_s=TTL_S, **options)
        await membership.start()
        started.append(membership)
        return membership

    yield start
    for membership in started:
        await membership.stop()


async def test_in_process_membership_tracks_registrations() -> None:
    membership = InProcessMembership()
    await membership.start()
    changes = membership.subscribe()
    await membership.register(record("n1"))
    await membership.register(record("n1"))  # the same record again is no change
    await membership.deregister("n1")
    assert membership.members() == {}
    assert changes.get_nowait() == MembershipChange(ChangeKind.JOINED, "n1", record("n1"))
    assert changes.get_nowait() == MembershipChange(ChangeKind.LEFT, "n1", None)
    assert changes.empty()
    await membership.stop()


def test_a_record_round_trips_through_json() -> None:
    assert NodeRecord.from_json(record("n1").to_json()) == record("n1")
    with pytest.raises(TypeError):
        NodeRecord.from_json(b'{"node_id": "n1"}')


async def test_register_writes_the_record_under_a_lease(
    memberships: Factory, etcd: aetcd.Client, prefix: str
) -> None:
    membership = await memberships()
    await membership.register(record("n1"))
    stored = await etcd.get((prefix + "n1").encode())
    assert stored is not None and stored.lease != 0
    assert NodeRecord.from_json(stored.value) == record("n1")
    assert membership.members() == {"n1": record("n1")}


async def test_another_scheduler_sees_the_node_through_its_watch(memberships: Factory) -> None:
    owner, other = await memberships(), await memberships()
    changes = other.subscribe()
    await owner.register(record("n1"))
    assert await next_change(changes) == MembershipChange(ChangeKind.JOINED, "n1", record("n1"))
    assert other.members() == {"n1": record("n1")}


async def test_the_lease_lives_while_refreshed_and_expires_after_stop(
    memberships: Factory, etcd: aetcd.Client, prefix: str
) -> None:
    owner, other = await memberships(), await memberships()
    changes = other.subscribe()
    await owner.register(record("n1"))
    await asyncio.sleep(TTL_S + 1.0)
    assert "n1" in await keys(etcd, prefix)
    await owner.stop()

    async def gone() -> bool:
        return "n1" not in await keys(etcd, prefix)

    assert await eventually(gone, TTL_S + 1.5) <= TTL_S + 1.0
    assert await next_change(changes) == MembershipChange(ChangeKind.JOINED, "n1", record("n1"))
    assert await next_change(changes) == MembershipChange(ChangeKind.LEFT, "n1", None)
    assert other.members() == {}


async def test_a_scheduler_started_later_rebuilds_the_view(memberships: Factory) -> None:
    owner = await memberships()
    await owner.register(record("n1"))
    await owner.register(record("n2", pool="large"))
    latecomer = await memberships()
    assert (
        latecomer.members() == owner.members() == {"n1": record("n1"), "n2": record("n2", "large")}
    )


async def test_deregister_removes_the_key_at_once(
    memberships: Factory, etcd: aetcd.Client, prefix: str
) -> None:
    owner, other = await memberships(), await memberships()
    changes = other.subscribe()
    await owner.register(record("n1"))
    await owner.deregister("n1")
    assert await keys(etcd, prefix) == {}
    assert owner.members() == {}
    assert await next_change(changes) == MembershipChange(ChangeKind.JOINED, "n1", record("n1"))
    assert await next_change(changes) == MembershipChange(ChangeKind.LEFT, "n1", None)


async def test_a_node_stays_while_another_scheduler_still_holds_it(
    memberships: Factory, etcd: aetcd.Client, prefix: str
) -> None:
    # Every node streams to every scheduler; the last writer's lease carries the key.
    first, second = await memberships(), await memberships()
    await first.register(record("n1"))
    await second.register(record("n1"))
    await second.deregister("n1")

    async def rewritten() -> bool:
        return "n1" in await keys(etcd, prefix)

    await eventually(rewritten, 2.0)
    assert first.members() == {"n1": record("n1")}


async def test_unreachable_etcd_never_raises_into_the_caller(memberships: Factory) -> None:
    membership = await memberships(port=free_port())
    await membership.register(record("n1"))
    await membership.register(record("n2"))
    await membership.deregister("n2")
    assert membership.members() == {"n1": record("n1")}


async def test_nodes_are_registered_again_when_etcd_returns(
    memberships: Factory, prefix: str
) -> None:
    port = free_port()
    with run_etcd(port):
        async with aetcd.Client(host="127.0.0.1", port=port) as client:
            await eventually(lambda: answers(client), 30.0)
            membership = await memberships(port=port)
            await membership.register(record("n1"))
            assert set(await keys(client, prefix)) == {"n1"}
    # etcd is gone: registration goes on locally and the last known view stays.
    await membership.register(record("n2"))
    await asyncio.sleep(TTL_S + 0.5)  # longer than a lease: every refresh fails meanwhile
    assert set(membership.members()) == {"n1", "n2"}
    with run_etcd(port):  # a fresh etcd that knows no keys and no leases
        async with aetcd.Client(host="127.0.0.1", port=port) as client:

            async def both_back() -> bool:
                with contextlib.suppress(aetcd.ClientError):
                    return set(await keys(client, prefix)) == {"n1", "n2"}
                return False

            await eventually(both_back, 10.0)
            await asyncio.sleep(TTL_S + 1.0)  # and their new leases are kept alive
            assert set(await keys(client, prefix)) == {"n1", "n2"}
            assert set(membership.members()) == {"n1", "n2"}
            await membership.stop()
