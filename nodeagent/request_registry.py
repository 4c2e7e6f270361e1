"""The node's running requests. Generation outlives the gRPC stream that started it, so a
gateway that lost its stream can re-attach by request id and read on from where it was."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from domain.types import Finish, Usage
from infra.waiters import Waiters
from nodeagent.changes import Changes
from nodeagent.engine import Chunk, Engine, EngineError, EngineLost, Finished, GenerationRequest


@dataclass(slots=True)
class RunningRequest:
    request: GenerationRequest
    chunks: list[str] = field(default_factory=list)
    # The answer's token count at the end of each chunk: a chunk's index is its last token's,
    # and an engine may gather several tokens into one chunk.
    token_ends: list[int] = field(default_factory=list)
    finished: Finished | None = None
    task: asyncio.Task[None] | None = None
    followers: int = 0
    # Started when the last follower leaves without a cancel; a re-attach stops it.
    orphan_timer: asyncio.Task[None] | None = None
    # Followers waiting for the next token, and followers holding a chunk back that only the
    # answer's end (or their hold running out) wakes: tokens arriving during a hold do not.
    _token_waiters: Waiters = field(default_factory=Waiters)
    _finish_waiters: Waiters = field(default_factory=Waiters)
    # Called on each token and at the end: a node link that carries many answers reads them
    # in one pass per engine step instead of keeping a waiting task per answer.
    listeners: list[Callable[[], None]] = field(default_factory=list)

    def add(self, text: str, tokens: int = 1) -> None:
        self.token_ends.append(self.token_index(len(self.chunks)) + max(1, tokens))
        self.chunks.append(text)
        self._token_waiters.wake()
        for listener in self.listeners:
            listener()

    def token_index(self, chunks: int) -> int:
        """The index of the last token of the first `chunks` chunks (0 for none)."""
        return self.token_ends[chunks - 1] if chunks else 0

    def chunks_through(self, token_index: int) -> int:
        """How many chunks end at or before token token_index: where a reader that has the
        answer up to that token goes on from."""
        return bisect.bisect_right(self.token_ends, token_index)

    def finish(self, finished: Finished) -> None:
        self.finished = finished
        self._token_waiters.wake()
        self._finish_waiters.wake()
        for listener in self.listeners:
            listener()

    async def follow(
        self, after_index: int = 0, interval_s: float = 0.0
    ) -> AsyncIterator[tuple[int, list[str]] | Finished]:
        """Chunks after token after_index, then the Finished. A chunk is (the index of its last
        token, counting from 1; the pieces of text since the chunk before). The first
        chunk goes at once; later ones at most one per interval_s, each carrying what came
        meanwhile as one piece: every gRPC message costs CPU on the node, the gateway and the
        edge, while a reader sees no difference between 20 updates a second and 60. With
        interval_s 0 each token stays a piece of its own, and the tokens ready at once go in
        one chunk. The last one goes as soon as the answer ends."""
        sent = self.chunks_through(after_index)
        loop = asyncio.get_running_loop()
        hold_until = 0.0
        while True:
            if len(self.chunks) <= sent and self.finished is None:
                await self._token_waiters.wait()
            hold_s = hold_until - loop.time()
            if self.finished is None and hold_s > 0:
                await self._finish_waiters.wait(hold_s)
            pending = self.chunks[sent:]
            finished = self.finished
            if pending:
                sent += len(pending)
                if interval_s > 0:
                    hold_until = loop.time() + interval_s
                    pending = ["".join(pending)]
                yield self.token_index(sent), pending
            if finished is not None and sent >= len(self.chunks):
                yield finished
                return

    async def until_finished(self) -> Finished:
        while self.finished is None:
            await self._finish_waiters.wait()
        return self.finished

    def cancel(self) -> None:
        if self.task and not self.task.done():
            self.task.cancel()


class RequestRegistry:
    """Owns every running request of this node; evicts each a grace period after it ends.

    A request whose gateway vanished keeps generating for reattach_grace_s, so another
    gateway can pick it up by id and lose nothing; unclaimed, it is cancelled in the engine
    so its slot and KV blocks go back to paying work.
    """

    def __init__(
        self,
        engine: Engine,
        keep_after_finish_s: float = 60.0,
        reattach_grace_s: float = 5.0,
        activity: Changes | None = None,
    ) -> None:
        """activity: where each start is noted; a registry of its own when not shared."""
        self._engine = engine
        self._keep_after_finish_s = keep_after_finish_s
        self._reattach_grace_s = reattach_grace_s
        self._requests: dict[str, RunningRequest] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Each start is noted there: an idle node's load reporter sleeps on it.
        self._activity = activity if activity is not None else Changes()
        # When the engine last wrote a token (the event loop's clock): proof it is up, so
        # the health check need not ask it while it answers.
        self.heard_at = -math.inf

    def __len__(self) -> int:
        return sum(1 for r in self._requests.values() if r.finished is None)

    def get(self, request_id: str) -> RunningRequest | None:
        return self._requests.get(request_id)

    def start(self, request: GenerationRequest) -> RunningRequest:
        existing = self._requests.get(request.request_id)
        if existing is not None:
            return existing
        running = RunningRequest(request)
        self._requests[request.request_id] = running
        running.task = asyncio.create_task(self._run(running), name=f"gen-{request.request_id}")
        self._activity.note()
        return running

    async def _run(self, running: RunningRequest) -> None:
        output = 0
        finished: Finished | None = None
        loop = asyncio.get_running_loop()
        try:
            async for item in self._engine.generate(running.request):
                if isinstance(item, Chunk):
                    output += item.tokens
                    running.add(item.text, item.tokens)
                    self.heard_at = loop.time()
                else:
                    finished = item
            if finished is None:
                raise EngineError("the engine ended a stream without a finish")
        except asyncio.CancelledError:
            usage = Usage(input_tokens=running.request.prompt_tokens, output_tokens=output)
            finished = Finished(Finish.CANCELLED, usage)
        except EngineLost:
            finished = Finished(Finish.ERROR, Usage(output_tokens=output), engine_lost=True)
        except EngineError:
            finished = Finished(Finish.ERROR, Usage(output_tokens=output))
        running.finish(finished)
        evict = asyncio.create_task(self._evict_later(running.request.request_id))
        self._tasks.add(evict)
        evict.add_done_callback(self._tasks.discard)

    def follow_started(self, running: RunningRequest) -> None:
        running.followers += 1
        if running.orphan_timer is not None:
            running.orphan_timer.cancel()
            running.orphan_timer = None

    def follow_ended(self, running: RunningRequest) -> None:
        running.followers -= 1
        if running.followers == 0 and running.finished is None:
            running.orphan_timer = asyncio.create_task(self._cancel_unclaimed(running))

    async def _cancel_unclaimed(self, running: RunningRequest) -> None:
        await asyncio.sleep(self._reattach_grace_s)
        if running.followers == 0:
            running.cancel()

    async def _evict_later(self, request_id: str) -> None:
        await asyncio.sleep(self._keep_after_finish_s)
        self._requests.pop(request_id, None)

    async def wait_idle(self, timeout_s: float) -> None:
        running = [r.task for r in self._requests.values() if r.task and not r.task.done()]
        if running:
            await asyncio.wait(running, timeout=timeout_s)

    async def close(self) -> None:
        for running in self._requests.values():
            running.cancel()
            if running.orphan_timer is not None:
                running.orphan_timer.cancel()
        for task in [*self._tasks, *(r.task for r in self._requests.values() if r.task)]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
