"""The node's watch on its engine's health, on a real llama-server: a node that is answering
has its proof of life in the tokens, and asks the engine only once it goes quiet."""

from __future__ import annotations

import asyncio
from typing import cast

import structlog

from nodeagent.changes import Changes
from nodeagent.engine import Engine
from nodeagent.llamacpp import LlamaCppEngine
from nodeagent.main import watch_engine
from tests.nodeagent.conftest import NodeUnderTest
from tests.nodeagent.test_servicer import read_all, start


class CountedHealth:
    """The real engine's health check, counted."""

    def __init__(self, engine: LlamaCppEngine) -> None:
        self.engine = engine
        self.calls = 0
        self.asked = asyncio.Condition()

    async def healthy(self) -> bool:
        async with self.asked:
            self.calls += 1
            self.asked.notify_all()
        return await self.engine.healthy()


async def test_a_node_asks_its_engine_only_while_the_engine_writes_nothing(
    engine: LlamaCppEngine, node: NodeUnderTest
) -> None:
    counted = CountedHealth(engine)
    ok = asyncio.Event()
    ok.set()
    log = structlog.get_logger()
    watch = asyncio.create_task(
        watch_engine(cast(Engine, counted), ok, 0.5, Changes(), log, lambda: node.registry.heard_at)
    )
    try:
        async with asyncio.timeout(30), counted.asked:
            await counted.asked.wait_for(lambda: counted.calls >= 2)  # idle: every interval
        call = node.stub.Generate()
        await call.write(start("watched", "Tell me a long story about a lighthouse.", 160))
        before = counted.calls
        responses = await read_all(call)
        during = counted.calls - before
        tokens = responses[-1].finish.usage.output_tokens
        assert tokens >= 60, "the answer lasts several intervals"
        # One ask may fall before the first token; none while tokens come.
        assert during <= 1, (during, tokens)
        async with asyncio.timeout(30), counted.asked:
            await counted.asked.wait_for(lambda: counted.calls >= before + during + 2)
        assert ok.is_set()
    finally:
        watch.cancel()
