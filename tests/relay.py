"""A TCP relay on 127.0.0.1 that can fall silent: while frozen it keeps every connection open
and forwards nothing either way, as a partitioned link does (no FIN, no RST, no error)."""

from __future__ import annotations

import asyncio
import contextlib

CHUNK = 65_536


class SilentRelay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        # Connections taken so far: a test sees a reconnect in it.
        self.accepted = 0
        self._port = 0

    @property
    def address(self) -> str:
        if self._server is None:
            raise RuntimeError("the relay is not started")
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    def freeze(self) -> None:
        """From now on nothing passes, in either direction, on any connection."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def refuse(self) -> None:
        """The host is down: every connection is closed and new ones are refused (the port
        stops listening) until `listen` again."""
        if self._server is not None:
            self._port = self._server.sockets[0].getsockname()[1]
            self._server.close()
            self.cut()
            await self._server.wait_closed()

    async def listen(self) -> None:
        """Listens again on the port `refuse` closed."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._port)

    def cut(self) -> None:
        """Closes every connection open now, both ways, as a middlebox that drops its flows
        does; new ones are taken as before."""
        for task in list(self._tasks):
            task.cancel()
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        await self._flowing.wait()
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers.append(up_writer)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.create_task(self._pump(source, sink))
            self._tasks.add(pump)
            pump.add_done_callback(self._tasks.discard)
        if task is not None:
            self._tasks.discard(task)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(CHUNK):
                # Read but held back while frozen: the sender sees its bytes leave, the
                # receiver sees nothing arrive.
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        sink.close()
