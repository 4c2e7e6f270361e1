"""Real servers for the tool adapters' tests, on free ports of 127.0.0.1: an MCP server (the
official SDK's, tests/mcp_pages_server.py, in a process of its own, stopped by its own process
id) and an SMTP server (aiosmtpd's, in a thread of its own) that keeps what it receives."""

from __future__ import annotations

import contextlib
import email
import email.policy
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

from tests.servers import _port_open, _stop, _wait_until, free_port

_MCP_SERVER_SCRIPT = Path(__file__).with_name("mcp_pages_server.py")


@dataclass(frozen=True)
class McpTestServer:
    # The streamable HTTP endpoint: http://127.0.0.1:PORT/mcp
    url: str
    port: int
    pid: int


@contextlib.contextmanager
def run_mcp_server(pages: dict[str, str]) -> Iterator[McpTestServer]:
    """The MCP server with fetch_page (answering pages[url]), add and slow."""
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        pages_file = Path(folder) / "pages.json"
        pages_file.write_text(json.dumps(pages), encoding="utf-8")
        process = subprocess.Popen(
            [sys.executable, str(_MCP_SERVER_SCRIPT), str(port), str(pages_file)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # uvicorn opens its port once the app has started.
            _wait_until(_port_open(port), process, "the MCP test server")
            yield McpTestServer(f"http://127.0.0.1:{port}/mcp", port, process.pid)
        finally:
            _stop(process)


class _Collector:
    """aiosmtpd's handler: keeps each message it accepts, in arrival order, and wakes waiters."""

    def __init__(self) -> None:
        self.arrived = threading.Condition()
        self.messages: list[EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        content = envelope.content
        raw = content if isinstance(content, bytes) else content.encode()
        # Lines come as the wire's CRLF; parsed, a message reads with Python's newlines.
        raw = raw.replace(b"\r\n", b"\n")
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self.arrived:
            self.messages.append(message)
            self.arrived.notify_all()
        return "250 Message accepted for delivery"


@dataclass(frozen=True)
class SmtpTestServer:
    host: str
    port: int
    _collector: _Collector

    def messages(self) -> list[EmailMessage]:
        with self._collector.arrived:
            return list(self._collector.messages)

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[EmailMessage]:
        """The messages, once at least count have arrived; AssertionError after timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self._collector.arrived:
            while len(self._collector.messages) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    got = len(self._collector.messages)
                    raise AssertionError(f"{got} of {count} mails arrived in {timeout_s} s")
                self._collector.arrived.wait(left)
            return list(self._collector.messages)

    def clear(self) -> None:
        with self._collector.arrived:
            self._collector.messages.clear()


@contextlib.contextmanager
def run_smtp_server() -> Iterator[SmtpTestServer]:
    """An SMTP server taking any mail, plain (no TLS, no login), as the operator's relay."""
    collector = _Collector()
    controller = Controller(collector, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield SmtpTestServer(controller.hostname, controller.port, collector)
    finally:
        controller.stop()
