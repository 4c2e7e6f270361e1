"""NodeService.Link: many answers on one stream per gateway-node pair, through the gateway's
own adapter (gateway/node_link.py) against a real node server on 127.0.0.1 with the
simulated engine, compared with the same answers over Generate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from chat.v1 import common_pb2, node_service_pb2_grpc
from chat.v1 import node_service_pb2 as pb
from domain.replica_hardware import H100x4_70B
from domain.types import Finish, Role, Tier, Turn
from gateway.node_client import NodeClient, NodeRefused
from gateway.node_link import MAX_BUFFERED, LinkedNodes
from gateway.ports import Chunk, Finished, GenerateSpec, Generation, StreamBroken, Working
from infra.grpcserver import GrpcServer
from infra.tls import TlsConfig
from nodeagent.request_registry import RequestRegistry
from nodeagent.servicer import NodeServicer
from nodeagent.sim import SimEngine
from tests.relay import SilentRelay

WAIT_S = 20.0


class SimNode:
    """A node server over the simulated engine; `speed` times real time."""

    def __init__(
        self, speed: float, length: int, grace_s: float = 30.0, vouch_interval_s: float = 1.0
    ) -> None:
        self.engine = SimEngine(H100x4_70B, speed=speed, answer_lengths=(length, length))
        self.registry = RequestRegistry(self.engine, reattach_grace_s=grace_s)
        accepting, self.engine_ok = asyncio.Event(), asyncio.Event()
        accepting.set()
        self.engine_ok.set()
        self.server = GrpcServer("127.0.0.1:0", ["chat.v1.NodeService"],
                                 tls=TlsConfig(insecure=True))  # fmt: skip
        self.servicer = NodeServicer(self.engine, self.registry, accepting, self.engine_ok, 0.0,
                                     vouch_interval_s=vouch_interval_s)  # fmt: skip
        node_service_pb2_grpc.add_NodeServiceServicer_to_server(self.servicer, self.server.server)

    def relay(self) -> SilentRelay:
        """A relay in front of this node, for a test to cut or freeze."""
        return SilentRelay("127.0.0.1", int(self.server.address.rsplit(":", 1)[1]))

    async def __aenter__(self) -> SimNode:
        await self.engine.start()
        await self.server.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.server.stop(0)
        await self.registry.close()
        await self.engine.stop()


def spec(rid: str, question: str, max_tokens: int = 400) -> GenerateSpec:
    turns = (Turn(Role.SYSTEM, "You are brief.", 4), Turn(Role.USER, question, 8))
    return GenerateSpec(rid, turns, max_tokens, Tier.FREE, 0.7, 12)


async def read_all(generation: Generation) -> tuple[list[Chunk], Finished]:
    chunks: list[Chunk] = []
    try:
        while True:
            item = await generation.read()
            if isinstance(item, Finished):
                return chunks, item
            if isinstance(item, Chunk):
                chunks.append(item)
    finally:
        generation.close()


async def read_items(generation: Generation) -> list[Chunk | Finished | Working]:
    """Everything read up to the finish, the node's vouches among the chunks."""
    items: list[Chunk | Finished | Working] = []
    try:
        while not items or not isinstance(items[-1], Finished):
            items.append(await generation.read())
        return items
    finally:
        generation.close()


def vouches_before_each_chunk(items: list[Chunk | Finished | Working]) -> list[int]:
    counts = [0]
    for item in items:
        if isinstance(item, Working):
            counts[-1] += 1
        elif isinstance(item, Chunk):
            counts.append(0)
    return counts[:-1]


def text(chunks: list[Chunk]) -> str:
    return "".join(chunk.text for chunk in chunks)


@pytest.fixture
async def fast_node() -> AsyncIterator[SimNode]:
    async with SimNode(speed=200.0, length=60) as node:
        yield node


@pytest.fixture
async def linked() -> AsyncIterator[LinkedNodes]:
    nodes = LinkedNodes(NodeClient())
    yield nodes
    await nodes.close()


async def test_many_answers_on_one_link_match_generate(
    fast_node: SimNode, linked: LinkedNodes
) -> None:
    address = fast_node.server.address
    direct = NodeClient()
    questions = [f"Question {i}: name a river." for i in range(40)]
    try:
        expected = [
            text((await read_all(await direct.generate(address, spec(f"d{i}", q))))[0])
            for i, q in enumerate(questions)
        ]
    finally:
        await direct.close()
    generations = [
        await linked.generate(address, spec(f"l{i}", q)) for i, q in enumerate(questions)
    ]
    results = await asyncio.gather(*(read_all(g) for g in generations))
    assert [text(chunks) for chunks, _ in results] == expected
    assert all(finished.finish is Finish.LENGTH or finished.finish is Finish.STOP
               for _, finished in results)  # fmt: skip
    assert all(finished.usage.output_tokens > 0 for _, finished in results)
    # Every answer rode one stream: one link on each side.
    assert len(fast_node.servicer._links) == 1


async def test_a_slow_reader_does_not_stall_another(linked: LinkedNodes) -> None:
    async with SimNode(speed=20.0, length=300) as node:
        address = node.server.address
        unread = await linked.generate(address, spec("slow", "Tell me about owls."))
        quick = await linked.generate(address, spec("quick", "Tell me about bees.", 20))
        chunks, finished = await read_all(quick)
        assert finished.finish is Finish.LENGTH and len(text(chunks).split()) > 0
        # Its neighbour, never read, is still being written: the quick answer did not wait.
        assert node.registry.get("slow").finished is None
        # Read on after its neighbour ended, the unread answer is not done on the node yet:
        # its text kept arriving into its own buffer meanwhile, joined past the bound.
        async with asyncio.timeout(WAIT_S):
            await node.registry.get("slow").until_finished()
        slow_chunks, slow_finished = await read_all(unread)
        assert slow_finished.usage.output_tokens == 300
        # One token a frame came for it (stream interval 0); its reader got them joined.
        assert len(slow_chunks) < 300 - MAX_BUFFERED
        direct = NodeClient()
        try:
            again, _ = await read_all(
                await direct.generate(address, spec("d", "Tell me about owls."))
            )
        finally:
            await direct.close()
        assert text(slow_chunks) == text(again)


async def test_a_quiet_answer_is_vouched_for_while_its_engine_is_healthy(
    linked: LinkedNodes,
) -> None:
    """Each step of this engine takes about 0.8 s, eight vouch intervals: before its first
    token and between tokens the answer is vouched for, and its text is the engine's."""
    question = "Tell me about herons."
    async with SimNode(speed=0.02, length=3, vouch_interval_s=0.1) as slow, \
            SimNode(speed=200.0, length=3) as fast:  # fmt: skip
        expected, _ = await read_all(
            await linked.generate(fast.server.address, spec("f", question))
        )
        items = await read_items(await linked.generate(slow.server.address, spec("s", question)))
    chunks = [item for item in items if isinstance(item, Chunk)]
    assert text(chunks) == text(expected) and len(chunks) == 3
    assert all(count >= 1 for count in vouches_before_each_chunk(items)), items


async def test_an_answer_is_not_vouched_for_while_its_engine_fails_its_health_check(
    linked: LinkedNodes,
) -> None:
    question = "Tell me about herons."
    async with SimNode(speed=0.02, length=3, vouch_interval_s=0.1) as node:
        generation = await linked.generate(node.server.address, spec("s", question))
        first = await generation.read()
        while not isinstance(first, Chunk):
            first = await generation.read()
        node.engine_ok.clear()
        rest = await read_items(generation)
    # The engine still writes (its health check alone failed): the text comes, unvouched; a
    # vouch already on its way when the check failed may still arrive.
    assert [item.index for item in rest if isinstance(item, Chunk)] == [2, 3]
    assert sum(isinstance(item, Working) for item in rest) <= 1, rest


async def test_a_cancel_frees_the_engine_slot_at_once(linked: LinkedNodes) -> None:
    # The grace is long: only the cancel can free the slot within the wait below.
    async with SimNode(speed=1.0, length=2000, grace_s=60.0) as node:
        generation = await linked.generate(node.server.address, spec("c1", "Count to many."))
        first = await generation.read()
        assert isinstance(first, Chunk)
        assert (await node.engine.load()).running_requests == 1
        cancelled_at = time.monotonic()
        await generation.cancel()
        running = 1
        while running:
            running = (await node.engine.load()).running_requests
            await asyncio.sleep(0.01)
        assert time.monotonic() - cancelled_at < 2.0
        while not isinstance(item := await generation.read(), Finished):
            pass
        generation.close()
        assert item.finish is Finish.CANCELLED


async def test_a_broken_link_is_reattached_with_the_exact_text(linked: LinkedNodes) -> None:
    async with SimNode(speed=2.0, length=200) as node:
        relay = node.relay()
        await relay.start()
        try:
            generation = await linked.generate(relay.address, spec("r1", "Why is the sky blue?"))
            before = [await generation.read() for _ in range(5)]
            relay.cut()
            after, finished = await read_all(generation)
        finally:
            await relay.close()
        assert relay.accepted >= 2  # a second connection carried the re-attached link
        assert finished.usage.output_tokens == 200
        answer = text([*before, *after])  # type: ignore[list-item]
        indexes = [chunk.index for chunk in [*before, *after]]  # type: ignore[union-attr]
        assert indexes == sorted(set(indexes))  # nothing repeated
        # One run on the node, never started again: its own finish is the one read.
        assert node.registry.get("r1").finished.usage == finished.usage
        direct = NodeClient()
        try:
            sky = spec("d", "Why is the sky blue?")
            again, _ = await read_all(await direct.generate(node.server.address, sky))
        finally:
            await direct.close()
        assert answer == text(again)


async def read_until_broken(generation: Generation) -> None:
    """Reads until the answer breaks; an answer that finishes or hangs fails the test."""
    with pytest.raises(StreamBroken):
        async with asyncio.timeout(WAIT_S):
            while not isinstance(await generation.read(), Finished):
                pass


async def test_a_node_gone_silent_fails_its_answers_over_within_keepalive(
    linked: LinkedNodes,
) -> None:
    """A partition (no FIN, no RST): keepalive breaks the link, the re-opened link is never
    taken, and the answer breaks for the answer writer to fail it over; it once waited for
    the gateway's stall timeout instead."""
    async with SimNode(speed=2.0, length=200) as node:
        relay = node.relay()
        await relay.start()
        try:
            generation = await linked.generate(relay.address, spec("s1", "Why is the sea salty?"))
            await generation.read()
            relay.freeze()
            started = time.perf_counter()
            await read_until_broken(generation)
            broken_after_s = time.perf_counter() - started
            generation.close()
        finally:
            relay.thaw()
            await relay.close()
    # keepalive (3 s) and the re-opened link's wait (1 s), with room for a busy machine
    assert broken_after_s < 8.0, broken_after_s


async def test_a_node_back_from_a_partition_is_served_at_once(linked: LinkedNodes) -> None:
    """The channel that failed to reach the node is dropped: the next answer connects anew
    instead of failing while that channel waits out its reconnect backoff."""
    async with SimNode(speed=200.0, length=60) as node:
        relay = node.relay()
        await relay.start()
        try:
            generation = await linked.generate(relay.address, spec("p1", "Name a river."))
            await generation.read()
            await relay.refuse()
            await read_until_broken(generation)
            generation.close()
            await relay.listen()
            chunks, finished = await read_all(
                await linked.generate(relay.address, spec("p2", "Name a river."))
            )
        finally:
            await relay.close()
        direct = NodeClient()
        try:
            expected, _ = await read_all(
                await direct.generate(node.server.address, spec("p3", "Name a river."))
            )
        finally:
            await direct.close()
    assert text(chunks) == text(expected) and text(chunks)
    assert finished.finish in (Finish.LENGTH, Finish.STOP)


async def test_a_link_refuses_bad_requests_per_answer_with_a_reason(fast_node: SimNode) -> None:
    channel = grpc.aio.insecure_channel(fast_node.server.address)
    requests: asyncio.Queue[pb.LinkRequest] = asyncio.Queue()

    async def feed() -> AsyncIterator[pb.LinkRequest]:
        while True:
            yield await requests.get()

    start = pb.GenerateStart(
        request_id="b1",
        turns=[common_pb2.Turn(role=common_pb2.ROLE_USER, content="Hello there.")],
        max_tokens=5,
    )
    link = node_service_pb2_grpc.NodeServiceStub(channel).Link(feed())
    try:
        assert not (await link.read()).updates  # the node took the link
        for request in (
            pb.LinkRequest(attach=pb.GenerateAttach(request_id="nobody")),
            pb.LinkRequest(cancel=pb.LinkCancel(request_id="nobody")),
            pb.LinkRequest(),
            pb.LinkRequest(start=pb.GenerateStart(request_id="b0", max_tokens=5)),
            pb.LinkRequest(start=start),
            pb.LinkRequest(start=start),
        ):
            requests.put_nowait(request)
        errors: dict[str, list[tuple[grpc.StatusCode, str]]] = {}
        finished = False
        codes = {code.value[0]: code for code in grpc.StatusCode}
        while not (finished and len(errors) == 4):
            for update in (await link.read()).updates:
                if update.HasField("error"):
                    entry = (codes[update.error.code], update.error.reason)
                    errors.setdefault(update.request_id, []).append(entry)
                    assert update.error.message
                finished = finished or (update.request_id == "b1" and update.HasField("finish"))
        assert errors == {
            "nobody": [(grpc.StatusCode.NOT_FOUND, "UNKNOWN_ANSWER")] * 2,
            "": [(grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_REQUEST")],
            "b0": [(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_START")],
            "b1": [(grpc.StatusCode.ALREADY_EXISTS, "ANSWER_EXISTS")],
        }
    finally:
        link.cancel()
        await channel.close()


async def test_the_adapter_maps_refusals_like_generate(
    fast_node: SimNode, linked: LinkedNodes
) -> None:
    address = fast_node.server.address
    refused = await linked.generate(address, spec("too-long", "Hi.", max_tokens=10**7))
    with pytest.raises(NodeRefused, match="INVALID_START"):
        await refused.read()
    # The refusal concerned that answer alone: the same link serves the next one.
    chunks, finished = await read_all(await linked.generate(address, spec("ok", "Hi.")))
    assert finished.finish in (Finish.LENGTH, Finish.STOP) and chunks
    assert len(fast_node.servicer._links) == 1


class NodeWithoutLink(node_service_pb2_grpc.NodeServiceServicer):
    """A node of a release before Link: Generate and Tokenize only (gRPC's generated base
    answers Link with UNIMPLEMENTED)."""

    def __init__(self, servicer: NodeServicer) -> None:
        self.Generate = servicer.Generate
        self.Tokenize = servicer.Tokenize


async def test_a_node_without_link_is_served_over_generate(linked: LinkedNodes) -> None:
    """A gateway rolled out before its nodes: the first answer fails over (the node never ran
    it), every later one to that node goes over Generate with the same text."""
    node = SimNode(speed=200.0, length=60)
    older = GrpcServer("127.0.0.1:0", ["chat.v1.NodeService"], tls=TlsConfig(insecure=True))
    node_service_pb2_grpc.add_NodeServiceServicer_to_server(
        NodeWithoutLink(node.servicer), older.server
    )
    await node.engine.start()
    await older.start()
    try:
        first = await linked.generate(older.address, spec("o1", "Name a lake."))
        with pytest.raises(StreamBroken) as broken:
            await first.read()
        first.close()
        chunks, finished = await read_all(
            await linked.generate(older.address, spec("o2", "Name a lake."))
        )
        direct = NodeClient()
        try:
            expected, _ = await read_all(
                await direct.generate(older.address, spec("o3", "Name a lake."))
            )
        finally:
            await direct.close()
    finally:
        await older.stop(0)
        await node.registry.close()
        await node.engine.stop()
    assert broken.value.code == "UNIMPLEMENTED"
    assert node.registry.get("o1") is None
    assert text(chunks) == text(expected) and text(chunks)
    assert finished.finish in (Finish.LENGTH, Finish.STOP)
