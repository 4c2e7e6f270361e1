"""Several hosts on one machine: each service in a network namespace of its own, all joined by
one bridge, so a test can cut the link between two of them while both keep running.

Everything is named per run (namespaces `chat-<run>-<pid>-<service>`, bridge `chbr<run>`, veths
`ch<run>v<n>`, a /24 under 10.0.0.0/8 no route of this machine uses), so two runs on one
machine do not collide, and everything is removed at close, after a failure too. A run that
was killed before its close leaves namespaces named with a pid that no longer lives: the next
run removes those that hold no process.

A cut is silent, as a partition is: no RST, no ICMP, no error. Each side's neighbour entry for
the other is pinned to a MAC address nobody has, so their frames go into the bridge and reach
no one, and connecting times out. (`iptables` is not on every machine and `tc netem` needs a
kernel module, so neither is used: latency and loss are left out.) The test process itself
stays on the machine's own namespace and reaches every service through the bridge's address.

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's `ip`; `unavailable()` says why
not when it cannot run.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

from tests.servers import Place

NOBODY_MAC = "02:00:00:00:00:01"
INSIDE = "eth0"
NAMESPACE = re.compile(r"^chat-([0-9a-f]{6})-(\d+)-")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs these tests as root)"
    probe = f"chat-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` was refused: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Host:
    """One service's namespace and its address on the bridge."""

    service: str
    netns: str
    address: str
    veth: str

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def place(self, port: int = 0) -> Place:
        return Place(self.address, ("ip", "netns", "exec", self.netns), port)


@dataclass
class Network:
    run: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: dict[str, Host] = field(default_factory=dict)
    subnet: ipaddress.IPv4Network | None = None
    _cuts: set[frozenset[str]] = field(default_factory=set)

    @property
    def bridge(self) -> str:
        return f"chbr{self.run}"

    @property
    def gateway_address(self) -> str:
        """This machine's own address on the bridge: where the test process calls from."""
        return str(self._subnet()[1])

    def open(self) -> None:
        sweep_stale()
        self.subnet = _free_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def host(self, service: str) -> Host:
        """The namespace `service` runs in, made on first use."""
        if service in self.hosts:
            return self.hosts[service]
        index = len(self.hosts)
        address = str(self._subnet()[index + 2])
        host = Host(service, f"chat-{self.run}-{os.getpid()}-{service}", address,
                    f"ch{self.run}v{index}")  # fmt: skip
        self.hosts[service] = host
        _ip("netns", "add", host.netns)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", INSIDE, "netns", host.netns)
        _ip("link", "set", host.veth, "master", self.bridge)
        _ip("link", "set", host.veth, "up")
        inside = ("-n", host.netns)
        _ip(*inside, "addr", "add", f"{address}/24", "dev", INSIDE)
        _ip(*inside, "link", "set", INSIDE, "up")
        _ip(*inside, "link", "set", "lo", "up")
        return host

    def cut(self, a: str, b: str) -> None:
        """From now on nothing passes between services a and b, silently."""
        first, second = self.hosts[a], self.hosts[b]
        for near, far in ((first, second), (second, first)):
            _ip("-n", near.netns, "neigh", "replace", far.address, "lladdr", NOBODY_MAC,
                "nud", "permanent", "dev", INSIDE)  # fmt: skip
        self._cuts.add(frozenset((a, b)))

    def heal(self, a: str, b: str) -> None:
        first, second = self.hosts[a], self.hosts[b]
        for near, far in ((first, second), (second, first)):
            _ip("-n", near.netns, "neigh", "del", far.address, "dev", INSIDE, check=False)
        self._cuts.discard(frozenset((a, b)))

    def heal_all(self) -> None:
        for a, b in [tuple(pair) for pair in self._cuts]:
            self.heal(a, b)

    def close(self) -> None:
        """Removes every namespace and the bridge; a process still in a namespace (one this
        run started and failed to stop) is killed first, by its id."""
        for host in self.hosts.values():
            _remove_namespace(host.netns)
        self.hosts.clear()
        _ip("link", "del", self.bridge, check=False)

    def _subnet(self) -> ipaddress.IPv4Network:
        if self.subnet is None:
            raise RuntimeError("the network is not open")
        return self.subnet


def _remove_namespace(netns: str) -> None:
    pids = _ip("netns", "pids", netns, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            continue
    _ip("netns", "del", netns, check=False)


def _used_networks() -> list[ipaddress.IPv4Network]:
    routes = _ip("-4", "route", "show", "table", "all").stdout.splitlines()
    used = []
    for route in routes:
        destination = route.split()[0] if route else ""
        if destination in ("default", "local", "broadcast", "unreachable", ""):
            destination = route.split()[1] if len(route.split()) > 1 else ""
        try:
            used.append(ipaddress.IPv4Network(destination, strict=False))
        except ValueError:
            continue
    return used


def _free_subnet() -> ipaddress.IPv4Network:
    used = _used_networks()
    for _ in range(1000):
        candidate = ipaddress.IPv4Network(
            f"10.{secrets.randbelow(256)}.{secrets.randbelow(256)}.0/24"
        )
        if not any(candidate.overlaps(network) for network in used):
            return candidate
    raise RuntimeError("no free /24 under 10.0.0.0/8")


def sweep_stale() -> None:
    """Removes what runs that died before their close left: namespaces named with a pid that
    is gone and holding no process, and their bridges."""
    listed = _ip("netns", "list", check=False).stdout.splitlines()
    for line in listed:
        name = line.split()[0] if line.strip() else ""
        found = NAMESPACE.match(name)
        if found is None or _alive(int(found.group(2))):
            continue
        if _ip("netns", "pids", name, check=False).stdout.split():
            continue
        _ip("netns", "del", name, check=False)
        _ip("link", "del", f"chbr{found.group(1)}", check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class NetnsPlacement:
    """LocalPlatform's placement (clients/chatctl/platform.py) on a Network: each service in
    the namespace of its name."""

    network: Network

    def host(self, service: str) -> str:
        return self.network.host(service).address

    def command(self, service: str, argv: list[str]) -> list[str]:
        return self.network.host(service).command(argv)
