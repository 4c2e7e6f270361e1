"""Where a LocalPlatform's services run: on this machine's loopback (`chatctl up`), or each on
a host of its own (tests/netns.py puts each in a network namespace)."""

from __future__ import annotations

from typing import Protocol


class Placement(Protocol):
    """Where each service runs (by its name: "gateway", "gateway-1", "nodeagent-0"...): the
    address it binds all its ports to, and the command line that starts it there."""

    def host(self, service: str) -> str: ...

    def command(self, service: str, argv: list[str]) -> list[str]: ...


class OneHost:
    """Every service on this machine's loopback: `chatctl up` and most tests."""

    def host(self, service: str) -> str:
        return "127.0.0.1"

    def command(self, service: str, argv: list[str]) -> list[str]:
        return argv
