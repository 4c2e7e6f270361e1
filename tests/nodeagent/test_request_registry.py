"""How a running request's tokens are cut into chunks for its followers, and where a follower
that re-attaches after a token goes on from, when the engine gathered several tokens into one
chunk."""

from __future__ import annotations

from domain.types import Finish, Usage
from nodeagent.engine import Finished, GenerationRequest
from nodeagent.request_registry import RunningRequest


def running(tokens: list[str], counts: list[int] | None = None) -> RunningRequest:
    """A finished request whose engine wrote these chunks, of `counts` tokens each (1)."""
    counts = counts or [1] * len(tokens)
    request = GenerationRequest("r1", (), max_tokens=sum(counts))
    answer = RunningRequest(request)
    for text, count in zip(tokens, counts, strict=True):
        answer.add(text, count)
    answer.finish(Finished(Finish.STOP, Usage(3, 0, sum(counts))))
    return answer


async def test_tokens_ready_at_once_go_in_one_chunk_each_its_own_piece() -> None:
    items = [item async for item in running(["Hel", "lo", "!"]).follow(0, 0.0)]
    assert items == [(3, ["Hel", "lo", "!"]), Finished(Finish.STOP, Usage(3, 0, 3))]


async def test_a_batching_node_joins_what_came_meanwhile_into_one_piece() -> None:
    items = [item async for item in running(["Hel", "lo", "!"]).follow(1, 0.05)]
    assert items == [(3, ["lo!"]), Finished(Finish.STOP, Usage(3, 0, 3))]


async def test_gathered_chunks_are_indexed_by_their_last_token() -> None:
    # The engine sent the first token, then two events of four tokens each.
    answer = running(["One", ", two, three, four", ", five, six, seven"], [1, 4, 4])
    items = [item async for item in answer.follow(0, 0.0)]
    assert items[0] == (9, ["One", ", two, three, four", ", five, six, seven"])
    # A follower that had the answer up to token 5 goes on after the chunk that ended there.
    items = [item async for item in answer.follow(5, 0.0)]
    assert items == [(9, [", five, six, seven"]), Finished(Finish.STOP, Usage(3, 0, 9))]
    assert [item async for item in answer.follow(9, 0.0)] == [Finished(Finish.STOP, Usage(3, 0, 9))]
    assert (answer.chunks_through(0), answer.chunks_through(1), answer.chunks_through(4)) == (
        0,
        1,
        1,
    )
