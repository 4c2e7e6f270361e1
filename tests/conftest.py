"""Session-wide real servers. Each starts once per test session on free ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.servers import (
    Etcd,
    Postgres,
    Redis,
    TlsEtcd,
    run_etcd,
    run_postgres,
    run_redis,
    run_tls_etcd,
)


@pytest.fixture(scope="session")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """The whole local platform: scheduler, one llama.cpp nodeagent, gateway, edge."""
    state = tmp_path_factory.mktemp("platform")
    local = LocalPlatform(
        PlatformSettings(
            state_dir=state,
            edge_listen="127.0.0.1:0",
            nodes=1,
            slot_context_tokens=4096,
            parallel=2,
        )
    )
    try:
        await local.start()
        yield local
    finally:
        await local.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Redis]:
    with run_redis() as server:
        yield server


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[Etcd]:
    with run_etcd() as server:
        yield server


@pytest.fixture(scope="session")
def etcd_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEtcd]:
    """etcd that takes only clients showing a certificate of its CA (mutual TLS)."""
    with run_tls_etcd(tmp_path_factory.mktemp("etcd-tls")) as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    with run_postgres() as server:
        yield server
