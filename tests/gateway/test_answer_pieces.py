"""A node that sends several tokens in one message, each its own piece: the answer writer
makes an event of each piece, as if they had come one a message. And what chunk interval the
writer asks a node for."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from domain.breaker import BreakerPolicy, Breakers
from domain.context import Prompt
from domain.safety import OutputGuard, OutputMode, StreamCheckConfig, Verdict
from domain.types import Finish, Role, Tier, Turn, Usage
from gateway.answers import Answer, AnswerPlan, AnswerWriter, StreamTimeouts
from gateway.metrics import GatewayMetrics
from gateway.node_client import Chunk, Finished, GenerateSpec
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
        self.specs: list[GenerateSpec] = []

    async def generate(self, address: str, spec: GenerateSpec) -> Generation:
        self.specs.append(spec)
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


class Allows:
    def classify(self, text: str) -> Verdict:
        return Verdict(True)


async def test_a_held_back_answer_asks_its_node_for_fewer_chunks() -> None:
    """The user sees a held-back answer only where a check releases it, so its node is asked
    for chunks held_chunk_interval_s apart; an answer shown as it comes (retract mode, or a
    hold-back of 0 tokens checked every token) keeps the node's own interval (0 asks for
    nothing)."""
    asked = {}
    every_token = StreamCheckConfig(holdback_tokens=0, check_every_tokens=1)
    for mode, config in ((OutputMode.HOLDBACK, StreamCheckConfig()),
                         (OutputMode.HOLDBACK, every_token),
                         (OutputMode.RETRACT, StreamCheckConfig()), (None, None)):  # fmt: skip
        nodes = Nodes([Chunk(1, "Hi"), Finished(Finish.STOP, Usage(2, 0, 1))])
        guard = None if config is None else (lambda m, c=config: OutputGuard(Allows(), c, mode=m))
        writer = AnswerWriter(None, nodes, StreamTimeouts(held_chunk_interval_s=0.25),  # type: ignore[arg-type]
                              GatewayMetrics(CollectorRegistry()),
                              Breakers(BreakerPolicy(), lambda: 0.0), guard)  # fmt: skip
        run = MessageRun("u1", "c1", "m1", "")
        prompt = Prompt((Turn(Role.USER, "Hi", 1),), 0)
        plan = AnswerPlan(prompt, PICK, 100, 0.0, "small", Tier.PLUS,
                          output_mode=mode or OutputMode.HOLDBACK)  # fmt: skip
        await writer.write(run, plan, Answer(served_by=PICK))
        assert run.events == [Delta("Hi")]
        asked[(mode, config)] = [spec.stream_interval_s for spec in nodes.specs]
    assert list(asked.values()) == [[0.25], [0.0], [0.0], [0.0]]
