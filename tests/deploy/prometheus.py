"""A real Prometheus (Debian's package) for the tests: scraping a running platform with the
shipped scrape jobs and rules, and asked through its HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from tests.servers import free_port

T = TypeVar("T")


def binary(name: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed (scripts/services.sh installs Debian's prometheus)")
    return found


@dataclass(frozen=True)
class Prometheus:
    url: str
    http: aiohttp.ClientSession

    async def get(self, path: str, **params: str) -> Any:
        async with self.http.get(f"{self.url}{path}", params=params) as response:
            body = await response.json()
        assert body["status"] == "success", body
        return body["data"]

    async def query(self, expr: str) -> list[dict[str, Any]]:
        return list((await self.get("/api/v1/query", query=expr))["result"])

    async def names(self) -> set[str]:
        return set(await self.get("/api/v1/label/__name__/values"))


async def wait_for(check: Callable[[], Awaitable[T]], what: str, timeout_s: float = 60.0) -> T:
    """The check's first truthy answer; polled, never slept past."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def run_prometheus(config: Path, folder: Path) -> AsyncIterator[Prometheus]:
    port = free_port()
    log_path = folder / "prometheus.log"
    with log_path.open("w") as log:
        process = await asyncio.create_subprocess_exec(
            binary("prometheus"), f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn", stdout=log, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    server = Prometheus(f"http://127.0.0.1:{port}", http)

    async def ready() -> bool:
        if process.returncode is not None:
            raise AssertionError(f"prometheus exited: {log_path.read_text()}")
        with contextlib.suppress(aiohttp.ClientError):
            async with http.get(f"{server.url}/-/ready") as response:
                return response.status == 200
        return False

    try:
        await wait_for(ready, "prometheus ready", 30)
        yield server
    finally:
        await http.close()
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                process.kill()
                await process.wait()
