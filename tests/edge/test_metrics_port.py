"""An edge given a metrics_listen serves /metrics there and not on its public port, which the
internet reaches; a real `python -m edge.main` process, asked over real sockets."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[dict[str, object]]:
    """The edge's ready file; no gateway behind it (none of these paths calls one)."""
    ready = tmp_path / "edge.ready.json"
    env = {
        **os.environ,
        "CHAT_EDGE_LISTEN": "127.0.0.1:0",
        "CHAT_EDGE_METRICS_LISTEN": "127.0.0.1:0",
        "CHAT_EDGE_READY_FILE": str(ready),
        "CHAT_EDGE_GATEWAY_ADDRESS": "127.0.0.1:1",
        "CHAT_EDGE_TLS_INSECURE": "true",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edge.main", cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.exists():
            if process.returncode is not None or time.monotonic() > deadline:
                process.kill()
                _, err = await process.communicate()
                pytest.fail(f"the edge did not start: {err.decode()[-2000:]}")
            await asyncio.sleep(0.05)
        yield json.loads(ready.read_text())
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.communicate(), 30)


async def test_metrics_are_served_on_their_own_port_only(edge: dict[str, object]) -> None:
    public = str(edge["http"])
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{public}/metrics") as response:
            assert response.status == 404
        async with http.get(f"{public}/healthz") as response:
            assert response.status == 200
        async with http.get(f"http://127.0.0.1:{edge['metrics']}/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=")
            page = await response.text()
    assert "\nedge_open_streams 0.0\n" in page
