"""A node that sends several tokens in one message, each its own piece: the answer writer
makes an event of each piece, as if they had come one a message."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from domain.breaker import BreakerPolicy, Breakers
from domain.context import Prompt
from domain.types import Finish, Role, Tier, Turn, Usage
from gateway.answers import Answer, AnswerPlan, AnswerWriter, StreamTimeouts
from gateway.metrics import GatewayMetrics
from gateway.node_client import Chunk, Finished
from gateway.runs import Delta, MessageRun
from gateway.scheduler_client import ReplicaPick

PICK = ReplicaPick(node_id="node-a", address="127.0.0.1:1", model="m")


class Generation:
    def __init__(self, items: list[Chunk | Finished]) -> None:
        self._items = items

    async def read(self) -> Chunk | Finished:
        return self._items.pop(0)

    async def cancel(self) -> None:
        raise AssertionError("nothing here stops the answer")

    def close(self) -> None:
        pass


class Nodes:
    def __init__(self, items: list[Chunk | Finished]) -> None:
        self.items = items

    async def generate(self, address: str, spec: object) -> Generation:
        return Generation(self.items)


async def test_each_piece_of_a_chunk_is_an_event_and_the_tokens_are_counted_once() -> None:
    items: list[Chunk | Finished] = [
        Chunk(1, "Hel"),  # a node that sent one token alone
        Chunk(4, "lo, you", ("lo", ",", " you")),
        Chunk(5, "!", ("!",)),
        Finished(Finish.STOP, Usage(2, 0, 5)),
    ]
    writer = AnswerWriter(None, Nodes(items), StreamTimeouts(),  # type: ignore[arg-type]
                          GatewayMetrics(CollectorRegistry()),
                          Breakers(BreakerPolicy(), lambda: 0.0))  # fmt: skip
    run = MessageRun("u1", "c1", "m1", "")
    answer = Answer(served_by=PICK)
    prompt = Prompt((Turn(Role.USER, "Hi", 1),), 0)
    await writer.write(run, AnswerPlan(prompt, PICK, 100, 0.0, "small", Tier.PLUS), answer)
    assert run.events == [Delta("Hel"), Delta("lo"), Delta(","), Delta(" you"), Delta("!")]
    assert answer.tokens == 5 and "".join(answer.shown) == "Hello, you!"
    assert answer.finish is Finish.STOP
