"""The partition harness itself: hosts on namespaces reach each other through the bridge, a
cut is silent (a connect times out, nothing refuses it) and heals, and nothing is left behind."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests import netns
from tests.netns import Network, sweep_stale, unavailable

SERVE = "import socket, sys; s = socket.create_server((sys.argv[1], 8000)); print('up', flush=True)"


def test_without_root_the_reason_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert unavailable() == "network namespaces need root (CI runs these tests as root)"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert unavailable() == "iproute2's `ip` is not installed"


@pytest.fixture
def network() -> Iterator[Network]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    made = Network()
    made.open()
    yield made
    made.close()


def connect_from(network: Network, near: str, far: str) -> str:
    """What a connect from host `near` to `far`'s port 8000 ends in: ok, refused or timeout."""
    probe = (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(('{network.hosts[far].address}', 8000), 1.0)\n"
        "    print('ok')\n"
        "except ConnectionRefusedError:\n"
        "    print('refused')\n"
        "except TimeoutError:\n"
        "    print('timeout')\n"
    )
    argv = network.hosts[near].command([sys.executable, "-c", probe])
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def test_a_cut_is_silent_one_link_only_and_heals(network: Network) -> None:
    server = network.host("server")
    network.host("client")
    network.host("bystander")
    listening = subprocess.Popen(
        server.command([sys.executable, "-c", SERVE + "; s.accept(); s.accept()", server.address]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listening.stdout is not None and listening.stdout.readline().strip() == "up"
        network.cut("client", "server")
        assert connect_from(network, "client", "server") == "timeout"
        # Only that link: this machine and the other hosts still reach the server.
        with socket.create_connection((server.address, 8000), 1.0):
            pass
        network.heal("client", "server")
        assert connect_from(network, "client", "server") == "ok"
    finally:
        listening.kill()
        listening.communicate()


def test_closing_removes_every_namespace_and_the_bridge(network: Network) -> None:
    names = [network.host(name).netns for name in ("a", "b")]
    network.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in names)
    bridge = subprocess.run(["ip", "link", "show", network.bridge], capture_output=True)
    assert bridge.returncode != 0


def test_a_dead_runs_namespaces_are_swept(network: Network) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = f"chat-{secrets.token_hex(3)}-{gone.stdout.strip()}-left"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    ours = network.host("kept").netns
    sweep_stale()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert stale not in listed
    assert ours in listed  # this run's pid lives
    assert netns.NAMESPACE.match(ours)
