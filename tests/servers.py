"""Real servers for tests: etcd, Redis and PostgreSQL from Debian's packages, each started on a
free port of 127.0.0.1 (or at a Place: another address, inside a network namespace) in a
directory of its own, and stopped by its own process id."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from infra.certs import Authority
from infra.tls import Role, TlsConfig


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until(
    check: Callable[[], bool], process: subprocess.Popen, what: str, timeout_s: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start in {timeout_s} s")
        time.sleep(0.05)


@dataclass(frozen=True)
class Place:
    """Where a server runs: the address it binds, and the command its command line is run
    under (`ip netns exec NAME` for a network namespace, tests/netns.py)."""

    host: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()
    # A fresh namespace has every port free; on the shared loopback one is looked for.
    port: int = 0

    def port_or_free(self, default: int) -> int:
        if self.prefix:
            return self.port or default
        return self.port or free_port()


LOOPBACK = Place()


def _port_open(port: int, host: str = "127.0.0.1") -> Callable[[], bool]:
    def check() -> bool:
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return True
        return False

    return check


def _etcd_healthy(url: str) -> Callable[[], bool]:
    """etcd's own /health says so."""

    def check() -> bool:
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(f"{url}/health", timeout=0.5) as answer:
                return json.loads(answer.read()).get("health") == "true"
        return False

    return check


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass(frozen=True)
class Redis:
    url: str
    port: int
    pid: int = 0


@contextlib.contextmanager
def run_redis(place: Place = LOOPBACK) -> Iterator[Redis]:
    port = place.port_or_free(6379)
    with tempfile.TemporaryDirectory() as folder:
        process = subprocess.Popen(
            [
                *place.prefix,
                "redis-server",
                "--port",
                str(port),
                "--bind",
                place.host,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                folder,
                # Off the loopback it takes callers only with a password, else.
                *(("--protected-mode", "no") if place.prefix else ()),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_until(_port_open(port, place.host), process, "redis-server")
            yield Redis(f"redis://{place.host}:{port}/0", port, process.pid)
        finally:
            _stop(process)


@dataclass(frozen=True)
class Etcd:
    endpoint: str
    host: str
    port: int
    process: subprocess.Popen


@dataclass(frozen=True)
class EtcdTls:
    """The files of an etcd serving over mutual TLS: its own certificate and key, and the CA
    whose certificates it takes from clients (and that signed its own)."""

    ca_file: str
    cert_file: str
    key_file: str

    def flags(self) -> list[str]:
        return ["--cert-file", self.cert_file, "--key-file", self.key_file,
                "--client-cert-auth", "--trusted-ca-file", self.ca_file]  # fmt: skip


@contextlib.contextmanager
def run_etcd(
    client: int | None = None, place: Place = LOOPBACK, tls: EtcdTls | None = None
) -> Iterator[Etcd]:
    """etcd with an empty data directory; on a chosen client port when given (to restart one);
    with tls, its clients must show a certificate signed by tls's CA."""
    client = client or place.port_or_free(2379)
    peer = place.port_or_free(2380) if place.prefix else free_port()
    scheme = "https" if tls else "http"
    client_url, peer_url = f"{scheme}://{place.host}:{client}", f"http://{place.host}:{peer}"
    with tempfile.TemporaryDirectory() as folder:
        process = subprocess.Popen(
            [*place.prefix, "etcd", "--name", "test", "--data-dir", f"{folder}/data",
             "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"test={peer_url}", *(tls.flags() if tls else ())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            # Its port opens before it serves: a first client could time out on the handshake.
            # (Over TLS its /health wants a client's certificate: the port has to do there.)
            ready = _port_open(client, place.host) if tls else _etcd_healthy(client_url)
            _wait_until(ready, process, "etcd")
            yield Etcd(f"{place.host}:{client}", place.host, client, process)
        finally:
            _stop(process)


@dataclass(frozen=True)
class TlsEtcd:
    server: Etcd
    # What a scheduler shows this etcd: the CA, and a scheduler's certificate and key.
    client: TlsConfig
    authority: Authority


@contextlib.contextmanager
def run_tls_etcd(folder: Path) -> Iterator[TlsEtcd]:
    """etcd over mutual TLS, with a throwaway CA of its own written under folder."""
    authority = Authority.create("etcd test CA")
    authority.save(folder)
    server = authority.save_holder(folder, "etcd")
    client = authority.save_holder(folder, Role.SCHEDULER)
    with run_etcd(tls=EtcdTls(server.ca_file, server.cert_file, server.key_file)) as etcd:
        yield TlsEtcd(etcd, client, authority)


@dataclass(frozen=True)
class Postgres:
    dsn: str
    port: int


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed (scripts/services.sh installs it)")
    return found[-1]


@contextlib.contextmanager
def run_postgres(place: Place = LOOPBACK) -> Iterator[Postgres]:
    port = place.port_or_free(5432)
    # initdb refuses to run as root: when root, the server runs as the postgres user.
    as_root = os.geteuid() == 0
    owner = {"user": "postgres", "group": "postgres", "extra_groups": []} if as_root else {}
    folder = tempfile.mkdtemp(prefix="pg-test-")
    if as_root:
        shutil.chown(folder, "postgres", "postgres")
    data = Path(folder) / "data"
    subprocess.run(
        [_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **owner,
    )
    if place.prefix:
        # Callers come from the namespace's subnet, not from 127.0.0.1.
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write("host all all samenet trust\n")
    # `ip netns exec` needs root: the switch to the postgres user comes after it, by setpriv.
    become = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
    server_owner = owner if not place.prefix else {}
    process = subprocess.Popen(
        [
            *place.prefix,
            *(become if place.prefix and as_root else []),
            _pg_bin("postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-h",
            place.host,
            "-k",
            folder,
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **server_owner,
    )
    try:

        def ready() -> bool:
            probe = subprocess.run(
                [_pg_bin("pg_isready"), "-h", place.host, "-p", str(port), "-U", "postgres"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            return probe.returncode == 0

        _wait_until(ready, process, "postgres")
        yield Postgres(f"postgresql://postgres@{place.host}:{port}/postgres", port)
    finally:
        _stop(process)
        shutil.rmtree(folder, ignore_errors=True)
