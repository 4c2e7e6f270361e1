"""Session-wide real servers. Each starts once per test session on free ports."""

from __future__ import annotations

import faulthandler
import sys
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

# After the summary, the process must end: a thread left running that is not a daemon (a
# store's connection never closed) kept a CI run waiting, silent, until its time ran out.
EXIT_WITHIN_S = 60


def pytest_unconfigure(config: pytest.Config) -> None:
    """Prints every thread's stack and exits with status 1 if the process is still there
    EXIT_WITHIN_S after the tests ended."""
    faulthandler.dump_traceback_later(EXIT_WITHIN_S, exit=True, file=sys.stderr)


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
