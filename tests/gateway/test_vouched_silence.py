"""The answer writer against scripted nodes. Its deadline: silence the node vouches for (an answer
queued, or behind a long prompt in its batch) is waited on, up to the vouched cap; silence it
does not vouch for fails over after the stall timeout, before the first token too once the node
has vouched. What a user would see: which replica wrote the answer, and its whole text."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from domain.breaker import BreakerPolicy, Breakers
from domain.context import Prompt
from domain.types import Finish, Role, Tier, Turn, Usage
from gateway.answers import Answer, AnswerPlan, AnswerWriter, StreamTimeouts
from gateway.metrics import GatewayMetrics
from gateway.ports import WORKING, Chunk, Finished, GenerateSpec, Working
from gateway.runs import MessageRun
from gateway.scheduler_client import ReplicaPick

FIRST = ReplicaPick(node_id="node-a", address="127.0.0.1:1", model="m")
OTHER = ReplicaPick(node_id="node-b", address="127.0.0.1:2", model="m")
# Long enough that a scripted step never times out only because the machine is busy.
TIMEOUTS = StreamTimeouts(first_token_s=30.0, stall_s=0.5, vouched_stall_s=2.0)
# A silence no deadline here waits out.
FOREVER_S = 60.0

Item = Chunk | Finished | Working


class ScriptedGeneration:
    """Hands out each item after its delay: the node's silence before it."""

    def __init__(self, script: list[tuple[float, Item]]) -> None:
        self._script = script

    async def read(self) -> Item:
        delay_s, item = self._script.pop(0)
        await asyncio.sleep(delay_s)
        return item

    async def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedNodes:
    def __init__(self, scripts: dict[str, list[tuple[float, Item]]]) -> None:
        self._scripts = scripts
        self.specs: list[tuple[str, GenerateSpec]] = []

    async def generate(self, address: str, spec: GenerateSpec) -> ScriptedGeneration:
        self.specs.append((address, spec))
        return ScriptedGeneration(self._scripts[address])


class OtherReplica:
    async def pick(self, *args: object, **kwargs: object) -> ReplicaPick:
        return OTHER


def vouched(for_s: float, every_s: float = 0.1) -> list[tuple[float, Item]]:
    return [(every_s, WORKING)] * round(for_s / every_s)


# The second replica writes the rest of the answer from the text already sent.
REST = [(0.0, Chunk(3, " there")), (0.0, Finished(Finish.STOP, Usage(2, 0, 1)))]


async def write(first: list[tuple[float, Item]]) -> tuple[Answer, MessageRun, float]:
    nodes = ScriptedNodes({FIRST.address: first, OTHER.address: list(REST)})
    writer = AnswerWriter(OtherReplica(), nodes, TIMEOUTS,  # type: ignore[arg-type]
                          GatewayMetrics(CollectorRegistry()),
                          Breakers(BreakerPolicy(), lambda: 0.0))  # fmt: skip
    run = MessageRun("u1", "c1", "m1", "")
    answer = Answer(served_by=FIRST)
    plan = AnswerPlan(Prompt((Turn(Role.USER, "Hi", 1),), 1), FIRST, 100, 0.0, "small", Tier.FREE)
    started = asyncio.get_running_loop().time()
    await writer.write(run, plan, answer)
    return answer, run, asyncio.get_running_loop().time() - started


def shown(answer: Answer) -> str:
    return "".join(answer.shown)


async def test_a_vouched_silence_longer_than_the_stall_timeout_is_waited_out() -> None:
    script = [(0.0, Chunk(1, "Hi")), *vouched(1.5), (0.0, Chunk(2, " you")),
              (0.0, Finished(Finish.STOP, Usage(2, 0, 2)))]  # fmt: skip
    answer, _, _ = await write(script)
    assert answer.served_by == FIRST and answer.failovers == 0
    assert shown(answer) == "Hi you" and answer.finish is Finish.STOP


async def test_a_silence_nobody_vouches_for_fails_over_after_the_stall_timeout() -> None:
    answer, _, took_s = await write([(0.0, Chunk(1, "Hi")), (FOREVER_S, Chunk(2, " you"))])
    assert answer.served_by == OTHER and answer.failovers == 1
    assert shown(answer) == "Hi there"
    assert took_s < TIMEOUTS.vouched_stall_s


async def test_vouching_without_text_fails_over_at_the_vouched_cap() -> None:
    script = [(0.0, Chunk(1, "Hi")), *vouched(FOREVER_S)]
    answer, _, took_s = await write(script)
    assert answer.served_by == OTHER and answer.failovers == 1
    assert shown(answer) == "Hi there"
    assert TIMEOUTS.vouched_stall_s <= took_s < TIMEOUTS.vouched_stall_s + 5.0


async def test_a_node_that_stops_vouching_before_the_first_token_is_left_at_the_stall_timeout() -> (
    None
):
    """Queued answers are vouched for too: once a node has vouched, its silence is measured
    against the stall timeout, not the first token's (30 s here)."""
    script = [*vouched(0.5), (FOREVER_S, Chunk(1, "Hi"))]
    answer, _, took_s = await write(script)
    assert answer.served_by == OTHER and answer.failovers == 1
    assert shown(answer) == " there"
    assert took_s < TIMEOUTS.first_token_s / 3


async def test_an_answer_whose_engine_is_lost_goes_on_on_another_replica() -> None:
    """The node is up but lost its engine (killed, unreachable): the replica failed, not the
    request, so the answer is continued elsewhere from the text already sent."""
    script = [
        (0.0, Chunk(1, "Hi")),
        (0.0, Finished(Finish.ERROR, Usage(1, 0, 1), engine_lost=True)),
    ]
    nodes = ScriptedNodes({FIRST.address: script, OTHER.address: list(REST)})
    writer = AnswerWriter(OtherReplica(), nodes, TIMEOUTS,  # type: ignore[arg-type]
                          GatewayMetrics(CollectorRegistry()),
                          Breakers(BreakerPolicy(), lambda: 0.0))  # fmt: skip
    answer = Answer(served_by=FIRST)
    plan = AnswerPlan(Prompt((Turn(Role.USER, "Hi", 1),), 1), FIRST, 100, 0.0, "small", Tier.FREE)
    await writer.write(MessageRun("u1", "c1", "m1", ""), plan, answer)
    assert answer.served_by == OTHER and answer.failovers == 1
    assert shown(answer) == "Hi there" and answer.finish is Finish.STOP
    assert [(address, spec.continue_from) for address, spec in nodes.specs] == [
        (FIRST.address, ""), (OTHER.address, "Hi")]  # fmt: skip


async def test_an_engine_that_fails_the_request_itself_ends_the_answer_there() -> None:
    answer, _, _ = await write([(0.0, Chunk(1, "Hi")), (0.0, Finished(Finish.ERROR, Usage()))])
    assert answer.served_by == FIRST and answer.failovers == 0
    assert answer.finish is Finish.ERROR
