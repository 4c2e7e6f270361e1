"""The global directory on a real etcd: users and their tokens, regions and their gateways."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

import aetcd
import pytest

from domain.regions import PoolCapacity
from domain.types import Tier
from infra.directory import Directory, DirectoryUser, DirectoryView
from tests.servers import Etcd


@pytest.fixture
async def prefix() -> str:
    return f"/directory-test-{uuid.uuid4().hex[:8]}/"


@pytest.fixture
async def directory(etcd_server: Etcd, prefix: str) -> AsyncIterator[Directory]:
    opened = Directory(etcd_server.endpoint, prefix)
    yield opened
    await opened.close()


async def test_a_user_is_found_by_token_and_a_new_token_retires_the_old(directory) -> None:
    first = DirectoryUser("ann", Tier.PLUS, "a", True, "hash-1")
    await directory.put_user(first)
    assert await directory.user_by_token_hash("hash-1") == first
    rotated = DirectoryUser("ann", Tier.PLUS, "a", True, "hash-2")
    await directory.put_user(rotated)
    assert await directory.user_by_token_hash("hash-1") is None
    assert await directory.user_by_token_hash("hash-2") == rotated
    snapshot = await directory.snapshot()
    assert (snapshot.users, snapshot.tokens) == ({"ann": rotated}, {"hash-2": "ann"})


async def test_a_deleted_user_and_their_token_are_gone_and_others_stay(directory) -> None:
    ann = DirectoryUser("ann", Tier.PLUS, "a", True, "hash-a")
    bob = DirectoryUser("bob", Tier.FREE, "b", False, "hash-b")
    for user in (ann, bob):
        await directory.put_user(user)
    await directory.delete_user("ann")
    assert (await directory.user("ann"), await directory.user_by_token_hash("hash-a")) == (
        None,
        None,
    )
    snapshot = await directory.snapshot()
    assert (snapshot.users, snapshot.tokens) == ({"bob": bob}, {"hash-b": "bob"})
    await directory.delete_user("ann")  # not listed: nothing to do


async def test_regions_read_back_with_their_pools_and_fresh_gateways(
    directory, etcd_server: Etcd, prefix: str
) -> None:
    await directory.publish_capacity("a", {"small": PoolCapacity(2, 0.5, 3)})
    await directory.publish_gateway("a", "10.0.0.1:50052")
    # A gateway that stopped publishing long ago is no longer offered.
    raw = aetcd.Client(host=etcd_server.host, port=etcd_server.port)
    stale = {"address": "10.0.0.9:50052", "published_at": time.time() - 60}
    await raw.put(f"{prefix}regions/a/gateways/10.0.0.9:50052".encode(),
                  json.dumps(stale).encode())  # fmt: skip
    await raw.close()
    region = (await directory.snapshot()).regions["a"]
    assert (region.name, region.pools, region.gateways) == (
        "a",
        {"small": PoolCapacity(2, 0.5, 3)},
        ("10.0.0.1:50052",),
    )
    assert region.age_s(time.time()) < 5


async def test_the_view_finds_a_user_created_since_its_last_read(directory) -> None:
    view = DirectoryView(directory)
    await view.refresh()
    created = DirectoryUser("bo", Tier.FREE, "b", False, "hash-b")
    await directory.put_user(created)
    assert view.snapshot.users == {}
    assert await view.user("bo") == created
    assert await view.user_by_token_hash("hash-b") == created
