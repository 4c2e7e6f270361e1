"""The scheduler's etcd over mutual TLS: a real etcd started with --cert-file, --key-file,
--client-cert-auth and --trusted-ca-file (tests.servers.run_tls_etcd), membership shared
through it, and the callers it must refuse."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aetcd
import grpc
import pytest
from aetcd import rpc

from infra.certs import Authority
from infra.config import ConfigError, load_config
from infra.etcd_client import PLAINTEXT, TlsEtcdClient, etcd_client
from infra.tls import Role, TlsConfig
from scheduler.main import SchedulerConfig, _build_membership
from scheduler.membership import ChangeKind, EtcdMembership, MembershipChange, NodeRecord
from tests.servers import TlsEtcd

RECORD = NodeRecord("n1", "10.0.0.1:50061", "small", "smol", 8192, 65536)


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"not true within {timeout_s} s"
        await asyncio.sleep(0.05)


@pytest.fixture
async def etcd(etcd_tls_server: TlsEtcd) -> AsyncIterator[aetcd.Client]:
    """A TLS client with the scheduler's certificate, once etcd answers (its port opens
    before it serves)."""
    server = etcd_tls_server.server
    async with TlsEtcdClient(server.host, server.port, etcd_tls_server.client) as client:

        async def answers() -> bool:
            try:
                await client.get(b"probe")
            except aetcd.ClientError:
                return False
            return True

        await eventually(answers)
        yield client


async def test_membership_is_shared_through_etcd_over_mutual_tls(
    etcd_tls_server: TlsEtcd, etcd: aetcd.Client
) -> None:
    server, prefix = etcd_tls_server.server, f"/test/{uuid.uuid4().hex}/nodes/"
    owner, other = (EtcdMembership(server.host, server.port, prefix, tls=etcd_tls_server.client)
                    for _ in range(2))  # fmt: skip
    await owner.start()
    await other.start()
    try:
        changes = other.subscribe()
        await owner.register(RECORD)
        change = await asyncio.wait_for(changes.get(), 5.0)
        assert change == MembershipChange(ChangeKind.JOINED, "n1", RECORD)
        stored = await etcd.get((prefix + "n1").encode())
        assert stored is not None and stored.lease != 0
        assert NodeRecord.from_json(stored.value) == RECORD
    finally:
        await owner.stop()
        await other.stop()


async def range_without_a_client_certificate(ca: bytes, endpoint: str) -> grpc.StatusCode:
    credentials = grpc.ssl_channel_credentials(ca)
    async with grpc.aio.secure_channel(endpoint, credentials) as channel:
        try:
            await rpc.KVStub(channel).Range(rpc.RangeRequest(key=b"probe"), timeout=5)
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


async def test_a_client_without_a_certificate_is_refused(
    etcd_tls_server: TlsEtcd, etcd: aetcd.Client
) -> None:
    endpoint = etcd_tls_server.server.endpoint
    ca = etcd_tls_server.authority.cert_pem
    code = await range_without_a_client_certificate(ca, endpoint)
    assert code == grpc.StatusCode.UNAVAILABLE
    # Nor in plaintext, as the scheduler called etcd before it had TLS settings.
    server = etcd_tls_server.server
    async with etcd_client(server.host, server.port, PLAINTEXT, timeout=5) as plain:
        with pytest.raises(aetcd.ConnectionFailedError):
            await plain.get(b"probe")


async def test_a_certificate_of_another_authority_is_refused(
    etcd_tls_server: TlsEtcd, etcd: aetcd.Client, tmp_path: Path
) -> None:
    stranger = Authority.create("another CA")
    held = stranger.save_holder(tmp_path, Role.SCHEDULER)
    # It trusts etcd's CA, so only its own certificate is what etcd refuses.
    tls = TlsConfig(etcd_tls_server.client.ca_file, held.cert_file, held.key_file)
    server = etcd_tls_server.server
    async with etcd_client(server.host, server.port, tls, timeout=5) as client:
        with pytest.raises(aetcd.ConnectionFailedError):
            await client.get(b"probe")


def test_the_scheduler_takes_etcd_tls_from_its_config_keys(etcd_tls_server: TlsEtcd) -> None:
    files = etcd_tls_server.client
    assert load_config(SchedulerConfig, "scheduler", env={}).etcd_tls == PLAINTEXT
    env = {"CHAT_SCHEDULER_ETCD_TLS_CA_FILE": files.ca_file,
           "CHAT_SCHEDULER_ETCD_TLS_CERT_FILE": files.cert_file,
           "CHAT_SCHEDULER_ETCD_TLS_KEY_FILE": files.key_file,
           "CHAT_SCHEDULER_MEMBERSHIP": "etcd"}  # fmt: skip
    config = load_config(SchedulerConfig, "scheduler", env=env)
    assert config.etcd_tls == files
    half = {k: v for k, v in env.items() if "KEY_FILE" not in k}
    with pytest.raises(ConfigError, match="set ca_file, cert_file and key_file"):
        _build_membership(load_config(SchedulerConfig, "scheduler", env=half))
