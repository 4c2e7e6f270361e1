"""How a running request's tokens are cut into chunks for its followers."""

from __future__ import annotations

from domain.types import Finish, Usage
from nodeagent.engine import Finished, GenerationRequest
from nodeagent.request_registry import RunningRequest


def running(tokens: list[str]) -> RunningRequest:
    request = GenerationRequest("r1", (), max_tokens=len(tokens))
    done = Finished(Finish.STOP, Usage(3, 0, len(tokens)))
    return RunningRequest(request, chunks=list(tokens), finished=done)


async def test_tokens_ready_at_once_go_in_one_chunk_each_its_own_piece() -> None:
    items = [item async for item in running(["Hel", "lo", "!"]).follow(0, 0.0)]
    assert items == [(3, ["Hel", "lo", "!"]), Finished(Finish.STOP, Usage(3, 0, 3))]


async def test_a_batching_node_joins_what_came_meanwhile_into_one_piece() -> None:
    items = [item async for item in running(["Hel", "lo", "!"]).follow(1, 0.05)]
    assert items == [(3, ["lo!"]), Finished(Finish.STOP, Usage(3, 0, 3))]
