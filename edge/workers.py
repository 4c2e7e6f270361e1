"""Several edge processes on one port: the edge keeps no state between requests (a stream
resumes on any edge with Last-Event-ID), so one machine's cores can all serve HTTP through
SO_REUSEPORT, the kernel spreading new connections across the processes bound to the port.

`EdgeWorkers` is the supervisor `edge.main` becomes when `workers` > 1: it holds the port,
starts the workers (each an ordinary edge with `reuse_port` on), replaces one that dies, and
stops them all on its own stop. It serves no request itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import structlog

from infra.process import dies_with_parent
from infra.runner import write_ready_file

# A worker that does not say it is ready within this long failed to start.
WORKER_START_TIMEOUT_S = 60.0
# How often the supervisor looks for a worker's ready file while one starts.
READY_POLL_S = 0.05
# A worker that keeps dying is restarted no faster than this.
RESTART_BACKOFF_S = 1.0


class WorkerFailed(RuntimeError):
    """A worker exited before it was ready."""


@dataclass
class Worker:
    index: int
    process: asyncio.subprocess.Process
    ready_file: Path


def hold_port(host: str, port: int) -> socket.socket:
    """A bound, never-listening SO_REUSEPORT socket on host:port (port 0: a free one). It keeps
    the port for the workers for as long as the supervisor runs, and receives no connection:
    the kernel only hands connections to listening sockets."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    holder = socket.socket(family, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind((host, port))
    return holder


class EdgeWorkers:
    def __init__(self, count: int, listen: str, shutdown_grace_s: float) -> None:
        if count < 2:
            raise ValueError("a supervisor needs at least two workers")
        self._count = count
        self._host, port = listen.rsplit(":", 1)
        self._port = int(port)
        self._grace_s = shutdown_grace_s
        self._workers: list[Worker] = []
        self._log = structlog.get_logger(component="edge-workers")

    async def serve(self, stop: asyncio.Event, ready_file: str) -> None:
        holder = hold_port(self._host, self._port)
        self._port = holder.getsockname()[1]
        try:
            with tempfile.TemporaryDirectory(prefix="edge-workers-") as state:
                try:
                    for index in range(self._count):
                        self._workers.append(await self._start(index, Path(state)))
                    url = f"http://{self._host}:{self._port}"
                    pids = [worker.process.pid for worker in self._workers]
                    write_ready_file(ready_file, {"http": url, "workers": pids})
                    self._log.info("edge ready", url=url, workers=pids)
                    await self._watch(stop, Path(state))
                finally:
                    await self._stop_all()
        finally:
            holder.close()

    async def _start(self, index: int, state: Path) -> Worker:
        ready = state / f"worker-{index}.ready.json"
        ready.unlink(missing_ok=True)
        env = {
            **os.environ,
            "CHAT_EDGE_WORKERS": "1",
            "CHAT_EDGE_REUSE_PORT": "true",
            "CHAT_EDGE_LISTEN": f"{self._host}:{self._port}",
            "CHAT_EDGE_READY_FILE": str(ready),
        }
        # The same config file (argv) as the supervisor; the environment overrides it.
        argv = [sys.executable, "-m", "edge.main", *sys.argv[1:]]
        process = await asyncio.create_subprocess_exec(*dies_with_parent(argv), env=env)
        worker = Worker(index, process, ready)
        await self._wait_ready(worker)
        return worker

    async def _wait_ready(self, worker: Worker) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WORKER_START_TIMEOUT_S
        while not worker.ready_file.exists():
            if worker.process.returncode is not None:
                raise WorkerFailed(f"edge worker {worker.index} exited with "
                                   f"{worker.process.returncode} before it was ready")  # fmt: skip
            if loop.time() > deadline:
                worker.process.kill()
                raise WorkerFailed(f"edge worker {worker.index} was not ready in time")
            await asyncio.sleep(READY_POLL_S)
        json.loads(worker.ready_file.read_text())  # written whole (tmp + rename) or not at all

    async def _watch(self, stop: asyncio.Event, state: Path) -> None:
        """Until the stop: a worker that exits is replaced, so the port keeps its processes."""
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                exits = {asyncio.create_task(w.process.wait()): w for w in self._workers}
                done, _ = await asyncio.wait(
                    {stopping, *exits}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in exits:
                    task.cancel()
                for task in done - {stopping}:
                    await self._replace(exits[task], state, stop)
        finally:
            stopping.cancel()

    async def _replace(self, dead: Worker, state: Path, stop: asyncio.Event) -> None:
        self._log.warning("edge worker exited; starting another", worker=dead.index,
                          pid=dead.process.pid, status=dead.process.returncode)  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RESTART_BACKOFF_S)
        if stop.is_set():
            return
        try:
            fresh = await self._start(dead.index, state)
        except WorkerFailed as error:
            # The next round of the watch sees it gone and tries again after the back-off.
            self._log.error("edge worker did not start", worker=dead.index, error=str(error))
            return
        self._workers[self._workers.index(dead)] = fresh

    async def _stop_all(self) -> None:
        """SIGTERM: each worker ends its streams as a single edge does (clients resume them
        elsewhere); one that outlives the grace is killed."""
        running = [w.process for w in self._workers if w.process.returncode is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                await asyncio.wait_for(process.wait(), self._grace_s + 5.0)
            except TimeoutError:
                process.kill()
                await process.wait()
