"""The nodes over NodeService.Link: one long-lived stream per node address carries every answer
this gateway runs there, so a frame of many answers' tokens costs one gRPC message where
Generate costs one per answer. The same `Nodes` port as gateway/node_client.py's: the core
cannot tell them apart.

A link is opened on the first answer for its address and again after it breaks. Its answers
outlive it on the node for the node's re-attach grace, so a broken link is not a lost answer:
each one attaches on a new link from the last chunk this gateway got, and reads on with not a
token lost or repeated. Only an answer whose new link fails too (the node is gone), or that
the node no longer knows, breaks, and the answer writer fails it over as before.

Each answer reads from a buffer of its own, filled by the link's one reader, which never waits
for an answer's reader: a slow one cannot hold back the others. Past MAX_BUFFERED chunks, new
text joins the newest chunk instead, so a slow reader gets its text in fewer, larger chunks,
and what a buffer holds stays bounded by the answer's own length cap.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Sequence

import grpc
import structlog

from chat.v1 import node_service_pb2 as pb
from gateway.node_client import NodeClient, NodeRefused, finished_from_pb, start_pb
from gateway.ports import WORKING, Chunk, Finished, GenerateSpec, Generation, StreamBroken, Working

# Chunks an answer's buffer holds before new text joins the newest one.
MAX_BUFFERED = 64
# A link opened to re-attach answers must be taken (its first, empty frame) this soon, or the
# node counts as gone: a node cut off silently would otherwise hold its answers for a
# connection attempt's whole timeout before they fail over.
REOPEN_TIMEOUT_S = 1.0
_INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.name
# The codes of a link the node never took because it could not be reached.
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE.name, grpc.StatusCode.DEADLINE_EXCEEDED.name)
_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


class LinkGeneration:
    """One answer on a link; the `Generation` port. close() leaves an unfinished answer running
    on the node for its grace (a detach), like a Generate stream closed without a cancel."""

    __slots__ = ("_ended", "_items", "_link", "_waiter", "cancelled", "last_index", "reopened",
                 "request_id")  # fmt: skip

    def __init__(self, request_id: str, link: NodeLink) -> None:
        self.request_id = request_id
        # The index of the newest chunk received: a re-attach goes on after it.
        self.last_index = 0
        # Set when it was attached on a new link and has had no news since: another break
        # then means the node is gone.
        self.reopened = False
        # A cancel was asked for: a re-attach passes it on, in case the broken link lost it.
        self.cancelled = False
        self._items: collections.deque[Chunk | Finished | Working | Exception] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._link = link
        # Its finish or failure arrived, or it was closed: nothing more comes or goes for it.
        self._ended = False

    async def read(self) -> Chunk | Finished | Working:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._items.popleft()
        if isinstance(item, Exception):
            raise item
        return item

    def cancel(self) -> Awaitable[None]:
        if not self._ended and not self.cancelled:
            self.cancelled = True
            self._link.send(pb.LinkRequest(cancel=pb.LinkCancel(request_id=self.request_id)))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def close(self) -> None:
        if not self._ended:
            self._ended = True
            self._link.leave(self)

    def moved_to(self, link: NodeLink) -> None:
        self._link = link
        self.reopened = True

    def take(self, update: pb.AnswerUpdate) -> None:
        """One update from the link; the reader finds it in this answer's buffer."""
        self.reopened = False
        if update.HasField("error"):
            self.fail(_refusal(update.error))
            return
        if update.HasField("chunk"):
            chunk = update.chunk
            self.last_index = chunk.index
            self._put(Chunk(chunk.index, chunk.text, tuple(chunk.pieces)))
        if update.HasField("finish"):
            self._ended = True
            self._put(finished_from_pb(update.finish))
        elif update.working and not self._items:
            # Only to a reader with nothing to read: unread text already says as much.
            self._put(WORKING)

    def fail(self, error: Exception) -> None:
        self._ended = True
        self._put(error)

    @property
    def ended(self) -> bool:
        return self._ended

    def _put(self, item: Chunk | Finished | Working | Exception) -> None:
        items = self._items
        if len(items) >= MAX_BUFFERED and type(item) is Chunk and type(items[-1]) is Chunk:
            items[-1] = _joined(items[-1], item)
        else:
            items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class NodeLink:
    """One Link stream to one node, and the answers on it."""

    def __init__(self, nodes: LinkedNodes, address: str) -> None:
        self.address = address
        self._nodes = nodes
        self._answers: dict[str, LinkGeneration] = {}
        self._outbox = _Outbox()
        self._taken = asyncio.Event()
        self._call = nodes.client.stub(address).Link(self._outbox)
        self._reader = asyncio.create_task(self._read(), name=f"node-link-{address}")
        self.broken = False
        self._given_up = False

    def start(self, spec: GenerateSpec) -> LinkGeneration:
        generation = LinkGeneration(spec.request_id, self)
        self._answers[spec.request_id] = generation
        self.send(pb.LinkRequest(start=start_pb(spec)))
        return generation

    def adopt(self, generation: LinkGeneration) -> None:
        """Follows an answer of a broken link from its last chunk."""
        generation.moved_to(self)
        self._answers[generation.request_id] = generation
        attach = pb.GenerateAttach(request_id=generation.request_id,
                                   after_chunk_index=generation.last_index)  # fmt: skip
        self.send(pb.LinkRequest(attach=attach))
        if generation.cancelled:
            self.send(pb.LinkRequest(cancel=pb.LinkCancel(request_id=generation.request_id)))

    async def must_be_taken(self, timeout_s: float) -> None:
        """Breaks the link unless the node takes it within timeout_s."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._taken.wait()
        except TimeoutError:
            self._given_up = True
            self._call.cancel()

    @property
    def taken(self) -> bool:
        """Whether the node took this link (sent its first frame)."""
        return self._taken.is_set()

    def send(self, request: pb.LinkRequest) -> None:
        self._outbox.queue.put_nowait(request)

    def leave(self, generation: LinkGeneration) -> None:
        if self._answers.pop(generation.request_id, None) is not None and not self.broken:
            self.send(pb.LinkRequest(detach=pb.LinkDetach(request_id=generation.request_id)))

    async def _read(self) -> None:
        code: str | None = None
        try:
            async for frame in self._call:
                self._taken.set()
                answers = self._answers
                for update in frame.updates:
                    generation = answers.get(update.request_id)
                    if generation is not None:
                        generation.take(update)
                        if generation.ended:
                            del answers[update.request_id]
        except grpc.aio.AioRpcError as error:
            code = error.code().name
        except asyncio.CancelledError:
            # A call cancelled on this side ends its reads with CancelledError, not an
            # AioRpcError: when must_be_taken gave up, the answers must still fail over (they
            # waited for the gateway's stall timeout, 10 s, in a partition). Only close()
            # cancels this task itself, and it fails the answers on its own.
            if not self._given_up:
                raise
            code = grpc.StatusCode.DEADLINE_EXCEEDED.name
        except Exception:  # a frame this gateway cannot read must not leave answers waiting
            structlog.get_logger(component="node-link").exception(
                "a frame from the node could not be read", address=self.address
            )
            code = grpc.StatusCode.INTERNAL.name
            self._call.cancel()
        self.broken = True
        self._outbox.end()
        orphans, self._answers = self._answers, {}
        self._nodes.lost(self, list(orphans.values()), code)

    async def close(self) -> None:
        """Ends the link for good (the gateway stops): its answers fail, and are not moved."""
        self.broken = True
        self._outbox.end()
        self._reader.cancel()
        self._call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        orphans, self._answers = self._answers, {}
        for generation in orphans.values():
            generation.fail(StreamBroken(None, "the gateway closed its link to the node"))


class LinkedNodes:
    """The `Nodes` port over one link per node address; token counts stay unary calls.

    A node of an older release has no Link and answers UNIMPLEMENTED: the answers started on
    that link fail over (the node never ran them), and every later answer for that address
    takes a Generate stream, so gateways may be rolled out before their nodes."""

    def __init__(self, client: NodeClient) -> None:
        self.client = client
        self._links: dict[str, NodeLink] = {}
        self._without_link: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def tokenize(self, address: str, texts: Sequence[str], model: str = "") -> list[int]:
        return await self.client.tokenize(address, texts, model)

    async def generate(self, address: str, spec: GenerateSpec) -> Generation:
        if address in self._without_link:
            return await self.client.generate(address, spec)
        return self._link(address).start(spec)

    def _link(self, address: str) -> NodeLink:
        link = self._links.get(address)
        if link is None or link.broken:
            link = self._links[address] = NodeLink(self, address)
        return link

    def lost(self, link: NodeLink, orphans: list[LinkGeneration], code: str | None) -> None:
        """A link broke: its answers attach on a new one, except those already moved once
        without news since (the node is gone), which fail and are failed over."""
        if self._links.get(link.address) is link:
            del self._links[link.address]
        if code in _UNREACHABLE and not link.taken and not self._closed:
            self.client.forget(link.address)
        if code == _UNIMPLEMENTED and link.address not in self._without_link:
            self._without_link.add(link.address)
            structlog.get_logger(component="node-link").warning(
                "the node has no Link (an older release): its answers go over Generate",
                address=link.address,
            )
        again: list[LinkGeneration] = []
        for generation in orphans:
            if generation.ended:
                continue
            if generation.reopened or code == _UNIMPLEMENTED:
                generation.fail(StreamBroken(code, f"the link to the node broke ({code})"))
            else:
                again.append(generation)
        if not again or self._closed:
            for generation in again:
                generation.fail(StreamBroken(code, f"the link to the node broke ({code})"))
            return
        fresh = self._link(link.address)
        for generation in again:
            fresh.adopt(generation)
        watch = asyncio.create_task(fresh.must_be_taken(REOPEN_TIMEOUT_S))
        self._tasks.add(watch)
        watch.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.close()
        await self.client.close()


class _Outbox:
    """The link's requests as gRPC reads them. An iterator object, not an async generator:
    gRPC drops its reading task when the call ends, and a generator suspended in it would
    then be closed while running."""

    __slots__ = ("queue",)

    def __init__(self) -> None:
        self.queue: asyncio.Queue[pb.LinkRequest | None] = asyncio.Queue()

    def end(self) -> None:
        """Ends the iteration, so gRPC's reading task ends with the link (a gateway that
        stopped with it still waiting logged "Task was destroyed but it is pending")."""
        self.queue.put_nowait(None)

    def __aiter__(self) -> _Outbox:
        return self

    async def __anext__(self) -> pb.LinkRequest:
        request = await self.queue.get()
        if request is None:
            self.queue.put_nowait(None)
            raise StopAsyncIteration
        return request


def _refusal(error: pb.AnswerError) -> Exception:
    code = _CODE_NAMES.get(error.code, str(error.code))
    reason = f"the node refused the request ({error.reason}): {error.message}"
    if error.code == _INVALID_ARGUMENT:
        return NodeRefused(reason)
    return StreamBroken(code, reason)


def _joined(first: Chunk, then: Chunk) -> Chunk:
    """Two chunks as one: the text of both, kept as the pieces they were made of."""
    pieces: tuple[str, ...] = ()
    if first.pieces or then.pieces:
        pieces = (*(first.pieces or (first.text,)), *(then.pieces or (then.text,)))
    return Chunk(then.index, first.text + then.text, pieces)
