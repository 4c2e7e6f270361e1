"""A home region's store reached through any of its gateways (gateway/home_client.py): real
HomeService servers on one region's store, and an address nothing listens on."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from chat.v1 import home_service_pb2 as pb
from chat.v1 import home_service_pb2_grpc as pb_grpc
from domain.answer_options import ToolCall
from domain.errors import AlreadyExists, InvalidArgument, NotFound, Unavailable
from domain.limiter import Limit
from domain.rollout import RolloutState
from domain.types import Role, Tier, Turn
from gateway.buckets import InProcessBuckets
from gateway.feedback import RatingDesk
from gateway.home_client import HomeStore
from gateway.home_servicer import HomeServicer
from gateway.metrics import GatewayMetrics
from gateway.versions import VersionBook
from infra.grpcserver import GrpcServer
from infra.tls import TlsConfig
from store.base import Store
from store.factory import open_store
from store.records import CapturedPrompt, MemoryRecord, NewMessage
from tests.servers import free_port

TLS = TlsConfig(insecure=True)
QUESTION = NewMessage("m-1", Role.USER, "Where is my history kept?", 6, None)


class NoRollout:
    async def rollout(self, known_revision: int, tallies: dict) -> tuple[int, RolloutState | None]:
        return 0, None


class Busy(HomeServicer):
    """A gateway that took the call and answered UNAVAILABLE: whether it made the change is
    unknown to the caller."""

    async def AppendMessage(
        self, request: pb.AppendMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.AppendMessageResponse:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "store busy")
        raise AssertionError("abort raises")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(f"sqlite:///{tmp_path / 'home.db'}")
    yield opened
    await opened.close()


def servicer(kind: type[HomeServicer], store: Store) -> HomeServicer:
    buckets = InProcessBuckets({Tier.PLUS: Limit(1000.0, 0.0)}, lambda: 0.0)
    metrics = GatewayMetrics(CollectorRegistry())
    return kind(store, buckets, RatingDesk(store, VersionBook(NoRollout()), metrics))


@contextlib.asynccontextmanager
async def serving(service: HomeServicer) -> AsyncIterator[str]:
    server = GrpcServer("127.0.0.1:0", [pb.DESCRIPTOR.services_by_name["HomeService"].full_name],
                        tls=TLS)  # fmt: skip
    pb_grpc.add_HomeServiceServicer_to_server(service, server.server)
    await server.start()
    try:
        yield server.address
    finally:
        await server.stop(0)


@contextlib.asynccontextmanager
async def home(addresses: list[str]) -> AsyncIterator[HomeStore]:
    client = HomeStore("a", addresses, TLS)
    try:
        yield client
    finally:
        await client.close()


async def test_a_change_and_a_read_pass_over_a_gateway_that_is_down(store: Store) -> None:
    down = f"127.0.0.1:{free_port()}"
    async with serving(servicer(HomeServicer, store)) as up, home([down, up]) as client:
        added = await client.add_message("u-1", "c-1", QUESTION, "History")
        read = await client.list_messages("u-1", "c-1")
        buckets = client.buckets(lambda tier: Limit(1000.0, 0.0))
        reserved = await buckets.reserve("u-1", Tier.PLUS, 40.0)
        level = await buckets.level("u-1", Tier.PLUS)
    assert (added.content, [m.content for m in read], reserved.bucket.level, level.level) == (
        "Where is my history kept?", ["Where is my history kept?"], 960.0, 960.0,
    )  # fmt: skip


async def test_a_change_a_gateway_answered_is_not_sent_again(store: Store) -> None:
    async with (
        serving(servicer(Busy, store)) as busy,
        serving(servicer(HomeServicer, store)) as up,
        home([busy, up]) as client,
    ):
        with pytest.raises(Unavailable) as refused:
            await client.add_message("u-1", "c-1", QUESTION, "History")
        with pytest.raises(NotFound):
            await client.list_messages("u-1", "c-1")
    assert refused.value.reason == "home region 'a': UNAVAILABLE store busy"


async def test_no_gateway_reached_is_unavailable_with_the_home_region() -> None:
    downs = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    async with home(downs) as client:
        with pytest.raises(Unavailable) as refused:
            await client.get_conversation("u-1", "c-1")
    assert refused.value.reason.startswith("home region 'a': UNAVAILABLE failed to connect")


async def test_a_turn_run_away_from_home_has_its_prompt_captured_at_home(store: Store) -> None:
    turns = (
        Turn(Role.SYSTEM, "Be brief.", 3),
        Turn(Role.ASSISTANT, "", 4, (ToolCall("call_1", "find", '{"q": "x"}'),)),
        Turn(Role.TOOL, "found", 1, tool_call_id="call_1"),
        Turn(Role.USER, "Where is my history kept?", 6),
    )
    prompt = CapturedPrompt("m-1", "c-1", "v1", "smollm", "node-b", 0.5, 200, turns)
    async with serving(servicer(HomeServicer, store)) as up, home([up]) as client:
        added = await client.add_message("u-1", "c-1", QUESTION, "History")
        await client.capture_prompt("u-1", dataclasses.replace(prompt, message_id=added.message_id))
        with pytest.raises(NotFound):  # a turn home does not keep
            await client.capture_prompt("u-1", dataclasses.replace(prompt, message_id="m-9"))
    kept = await store.captured_prompt("u-1", added.message_id)
    assert (kept.conversation_id, kept.version, kept.model, kept.node_id, kept.temperature,
            kept.max_tokens, kept.turns) == ("c-1", "v1", "smollm", "node-b", 0.5, 200,
                                             turns)  # fmt: skip


async def test_a_users_memory_is_read_and_written_at_home(store: Store) -> None:
    """A desk away from home over HomeService behaves as one at home: the entries land in the
    home store, the search is the home store's, and errors keep their kind."""

    def entry(memory_id: str, text: str, at: float) -> MemoryRecord:
        return MemoryRecord(memory_id, text, False, "user", at, at)

    async with serving(servicer(HomeServicer, store)) as up, home([up]) as client:
        memories = client.memories()
        await memories.add_memory("u-1", entry("m-1", "My cat is called Tofu", 100.0))
        await memories.add_memory("u-1", entry("m-2", "I live near a river", 200.0))
        with pytest.raises(AlreadyExists):
            await memories.add_memory("u-1", entry("m-1", "again", 300.0))
        changed = await memories.update_memory("u-1", "m-1", "My cats are Tofu and Miso", True,
                                               300.0)  # fmt: skip
        found = await memories.search_memories("u-1", ["cat"], 5, 250.0)
        aged_out = await memories.search_memories("u-1", ["river"], 5, 250.0)
        listed = await memories.list_memories("u-1")
        await memories.delete_memory("u-1", "m-2")
        with pytest.raises(NotFound):
            await memories.get_memory("u-1", "m-2")
        with pytest.raises(InvalidArgument):
            await memories.delete_memory("u-1", "not an id")
    assert changed == MemoryRecord("m-1", "My cats are Tofu and Miso", True, "user", 100.0, 300.0)
    assert (found, aged_out) == ([changed], [])
    assert [m.memory_id for m in listed] == ["m-1", "m-2"]
    assert await store.list_memories("u-1") == [changed]
