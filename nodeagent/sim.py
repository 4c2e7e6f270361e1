"""Engine adapter `sim`: a SIMULATED GPU replica, not a model. It answers with made-up text.

`SimEngine` puts `domain.replica_sim.ReplicaSim` (sizing 000's step loop on a hardware model of,
say, a 70B on four H100s) behind the Engine interface, in real time: a background task takes
one step, sleeps the step's simulated duration divided by `speed`, then hands every answer that
got a token in that step its next piece. So answers stream at the pace, batching, queueing and
prefix-cache reuse of a loaded GPU server, on a laptop, and a platform can be load-tested
without GPUs. Its model name ends in "-sim" so it shows as a simulator everywhere.

The text is deterministic: the answer to a prompt is a function of its turns only (greedy
decoding, as it were), drawn from a fixed word list. The same prompt gets the same answer on
any node, so a failover that continues from a partial answer (`continue_from`) carries on the
very same text from where the partial one stopped.

A prose answer copies the citations it read: after its planned sentences it cites each
distinct `[[cite:ID]]` found in the prompt's turns (any role, in order of first appearance),
each appended as " [[cite:ID]]". Under `options.citation_ids` (the engine's citation grammar)
it cites only the found ids in that set, or, when none is, the first of citation_ids. With
no marker in the prompt and no citation_ids nothing is appended. The appended text is part of
the planned answer: max_tokens cuts it, and a continuation carries it on, token for token.

A tool's `query` parameter asks what the newest user turn says (nodeagent/sim_documents.py).

The simulator's tokenizer is not a model's: one token per word or punctuation mark (the regex
`\\w+|[^\\w\\s]`), plus one per turn for its role marker and one for the assistant header that
ends a prompt. `tokenize` counts with it, so counts agree with what the simulator charges.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable, Sequence
from dataclasses import dataclass, field

from domain.answer_options import PLAIN, AnswerOptions, ToolCall
from domain.citations import CITE_CLOSE, CITE_OPEN, ID_PATTERN, cite
from domain.replica_hardware import H100x4_70B, ReplicaPreset, step_seconds
from domain.replica_requests import StepResult
from domain.replica_sim import ReplicaSim
from domain.types import Finish, Role, Tier, Usage
from nodeagent import sim_documents
from nodeagent.engine import (
    Chunk,
    EngineError,
    EngineLoad,
    Finished,
    GenerationRequest,
    PromptTurn,
)
from nodeagent.engine_speed import EngineSpeed

_TOKEN = re.compile(r"\w+|[^\w\s]")
_ASSISTANT_HEADER = f"<|{Role.ASSISTANT}|>"
# A citation as the simulated model reads one in its prompt.
_CITATION = re.compile(f"{re.escape(CITE_OPEN)}({ID_PATTERN.pattern}){re.escape(CITE_CLOSE)}")
# How far the stepping task may fall behind the wall clock before it stops catching up.
_MAX_LAG_S = 0.05
_WORDS = (
    "the a model answer token batch step memory cache prefix server replica request stream "
    "prompt chunk queue block layer weight read write each every one two many first next "
    "long short fast slow time second user turn word light blue sky water paper result "
    "simple careful clear because while when then so and but or not only also still here"
).split()


def count_tokens(text: str) -> int:
    """The simulator's tokenizer: one token per word or punctuation mark."""
    return len(_TOKEN.findall(text))


def prompt_tokens(turns: Sequence[PromptTurn], continue_from: str = "") -> list[str]:
    """The prompt as the simulator reads it: each turn's role marker and words, the assistant
    header, then whatever of the answer a failed replica already sent."""
    tokens: list[str] = []
    for turn in turns:
        tokens.append(f"<|{turn.role}|>")
        tokens.extend(_TOKEN.findall(turn.text))
    tokens.append(_ASSISTANT_HEADER)
    tokens.extend(_TOKEN.findall(continue_from))
    return tokens


def _seeded(turns: Sequence[PromptTurn]) -> random.Random:
    """A generator seeded by the turns alone: the same prompt, the same answer, anywhere."""
    digest = hashlib.blake2b(digest_size=8)
    for turn in turns:
        digest.update(f"{turn.role}\0{turn.text}\0".encode())
    return random.Random(int.from_bytes(digest.digest(), "big"))


def planned_answer(turns: Sequence[PromptTurn], lengths: tuple[int, int]) -> list[str]:
    """The whole answer the simulator gives to these turns, as token strings: sentences of
    words from a fixed list, ending in a full stop. A function of the turns alone."""
    rng = _seeded(turns)
    length = rng.randint(*lengths)
    tokens: list[str] = []
    while len(tokens) < length:
        left = length - len(tokens)
        words = rng.randint(5, 14)
        if left - words - 1 < 5:  # no room for another sentence after this one: end with it
            words = max(1, left - 1)
        sentence = [rng.choice(_WORDS) for _ in range(words)]
        tokens.extend([sentence[0].capitalize(), *sentence[1:], "."])
    return tokens[:length]


def citations(turns: Sequence[PromptTurn], options: AnswerOptions) -> str:
    """What a prose answer appends: " [[cite:ID]]" for each distinct id the turns cite, in
    order of first appearance; under citation_ids only those in the set, or, when none is,
    the first of them (the grammar lets the model cite nothing else)."""
    found = list(dict.fromkeys(m.group(1) for t in turns for m in _CITATION.finditer(t.text)))
    if options.citation_ids:
        allowed = set(options.citation_ids)
        found = [i for i in found if i in allowed] or [options.citation_ids[0]]
    return "".join(f" {cite(passage_id)}" for passage_id in found)


def newest_user_text(turns: Sequence[PromptTurn]) -> str:
    return next((turn.text for turn in reversed(turns) if turn.role is Role.USER), "")


def planned_text(
    turns: Sequence[PromptTurn], lengths: tuple[int, int], options: AnswerOptions = PLAIN
) -> str:
    """The whole prose answer to these turns: the planned sentences, then its citations."""
    return "".join(rendered(planned_answer(turns, lengths), 0)) + citations(turns, options)


def rendered(tokens: Sequence[str], start: int) -> list[str]:
    """The chunks that carry tokens[start:]: a space before each word but the answer's first."""
    return [
        token if token == "." or index == 0 else f" {token}"
        for index, token in enumerate(tokens)
        if index >= start
    ]


def conversation_key(turns: Sequence[PromptTurn]) -> Hashable:
    """Names a conversation by its opening: the turns up to its first user message. Later
    turns only append, so every turn of one conversation has the same key."""
    opening = []
    for turn in turns:
        opening.append((turn.role, turn.text))
        if turn.role == Role.USER:
            break
    return hash(tuple(opening))


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """How many leading tokens a and b share; compares 16 at a time, as KV blocks hold."""
    limit = min(len(a), len(b))
    same = 0
    while same + 16 <= limit and a[same : same + 16] == b[same : same + 16]:
        same += 16
    while same < limit and a[same] == b[same]:
        same += 1
    return same


@dataclass(slots=True)
class _Stream:
    """What the stepping task has told one answer so far."""

    changed: asyncio.Event = field(default_factory=asyncio.Event)
    emitted: int = 0
    finished: bool = False
    cached_tokens: int = 0
    failed: str = ""


@dataclass(frozen=True, slots=True)
class _Plan:
    prompt: list[str]
    answer: list[str]  # the tokens this request writes: the rest of the planned answer
    chunks: list[str]
    finish: Finish
    # Calls made instead of text: the answer's tokens are the calls', streamed as none.
    tool_calls: tuple[ToolCall, ...] = ()


class SimEngine:
    """A simulated replica in real time; `speed` > 1 runs it that many times faster."""

    def __init__(
        self,
        preset: ReplicaPreset = H100x4_70B,
        speed: float = 1.0,
        answer_lengths: tuple[int, int] = (100, 700),
        # More than a 70B replica's GPUs and host RAM hold (about 400 conversations of 1.1 GB).
        remembered_conversations: int = 1_000,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be greater than 0")
        self.model = f"{preset.model}-sim"
        self.context_tokens = preset.context_tokens
        self.max_running_requests = preset.max_running
        self.preset = preset
        self._speed = speed
        self._answer_lengths = answer_lengths
        self._sim = ReplicaSim(preset)
        self._streams: dict[str, _Stream] = {}
        # The tokens each conversation's last request read and wrote: what its cache holds.
        self._contents: OrderedDict[Hashable, list[str]] = OrderedDict()
        self._remembered = remembered_conversations
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Its answers' lengths vary by request, so how long they hold their places is measured
        # (from submission: a queue before admission counts too, as on vLLM's side).
        self._answers = EngineSpeed()

    @property
    def simulated_s(self) -> float:
        """Simulated seconds the replica has stepped through so far."""
        return self._sim.now_s

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"sim-{self.preset.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for stream in self._streams.values():
            stream.failed = "the simulated engine stopped"
            stream.changed.set()

    async def healthy(self) -> bool:
        return self._task is not None and not self._task.done()

    async def tokenize(self, texts: list[str]) -> list[int]:
        return [count_tokens(text) for text in texts]

    async def load(self) -> EngineLoad:
        load = self._sim.load()
        return EngineLoad(
            kv_usage=load.kv_usage,
            free_kv_tokens=load.free_kv_tokens,
            kv_capacity_tokens=load.kv_capacity_tokens,
            queued_prefill_tokens=load.queued_prefill_tokens,
            running_requests=load.running_requests,
            waiting_requests=load.waiting_requests,
            prefix_hit_rate=load.prefix_hit_rate,
            prefill_tokens_per_s=self.prefill_tokens_per_s,
            decode_step_s=self.decode_step_s,
            answer_s=self._answers.answer_s,
        )

    @property
    def prefill_tokens_per_s(self) -> float:
        """The simulator knows its own speed: full-budget prefill steps, in real time."""
        preset = self.preset
        return preset.step_tokens / step_seconds(preset, preset.step_tokens, 0) * self._speed

    @property
    def decode_step_s(self) -> float:
        """One decode step of a lone answer, in real time."""
        return step_seconds(self.preset, 1, 0) / self._speed

    # --- one answer ---

    def _plan(self, request: GenerationRequest) -> _Plan:
        turns = request.turns
        calls = sim_documents.tool_calls(
            request.options,
            turns[-1].role is Role.TOOL,
            _seeded(turns),
            newest_user_text(turns),
        )
        if calls:
            tokens = count_tokens("".join(c.name + c.arguments for c in calls))
            return _Plan(prompt_tokens(turns), ["x"] * tokens, [], Finish.STOP, tuple(calls))
        if request.options.json_object:
            text = sim_documents.document(request.options.json_schema, _seeded(turns))
        else:
            text = planned_text(turns, self._answer_lengths, request.options)
        return self._text_plan(request, text)

    def _text_plan(self, request: GenerationRequest, text: str) -> _Plan:
        """The whole answer, one token a chunk (with the blank before it), from where a
        continuation left off; past the cap, its start (as a real engine cut off by
        max_tokens leaves it)."""
        whole = sim_documents.chunks(text)
        already = count_tokens(request.continue_from)
        rest = whole[already:]
        chunks = rest[: request.max_tokens]
        finish = Finish.LENGTH if len(rest) > request.max_tokens else Finish.STOP
        # The tokens as the next turn's prompt will read them: no blanks.
        answer = [chunk.lstrip() for chunk in chunks]
        return _Plan(prompt_tokens(request.turns, request.continue_from), answer, chunks, finish)

    def _submit(self, request: GenerationRequest, plan: _Plan, key: Hashable) -> _Stream:
        if self._task is None or self._task.done():
            raise EngineError("the simulated engine is not started")
        if request.request_id in self._streams:
            raise EngineError(f"request {request.request_id!r} is already running")
        cached = self._contents.get(key)
        try:
            self._sim.submit(
                request.request_id,
                len(plan.prompt),
                len(plan.answer),
                paid=request.tier is Tier.PLUS,
                conversation=key,
                reusable_prefix_tokens=common_prefix(cached, plan.prompt) if cached else 0,
            )
        except ValueError as exc:
            raise EngineError(str(exc)) from exc
        stream = self._streams[request.request_id] = _Stream()
        self._wake.set()
        return stream

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Chunk | Finished]:
        plan = self._plan(request)
        if not plan.answer:  # a continuation of an answer that was already complete
            yield Finished(plan.finish, Usage(input_tokens=len(plan.prompt)))
            return
        key = conversation_key(request.turns)
        stream = self._submit(request, plan, key)
        sent = 0
        try:
            while not stream.finished:
                await stream.changed.wait()
                stream.changed.clear()
                if stream.failed:
                    raise EngineError(stream.failed)
                while sent < min(stream.emitted, len(plan.chunks)):
                    yield Chunk(plan.chunks[sent])
                    sent += 1
        finally:
            self._streams.pop(request.request_id, None)
            if not stream.finished:
                self._sim.cancel(request.request_id)  # its KV blocks go back at once
            self._remember(key, [*plan.prompt, *plan.answer[: stream.emitted]])
        usage = Usage(len(plan.prompt), stream.cached_tokens, len(plan.answer))
        yield Finished(plan.finish, usage, plan.tool_calls)

    def _remember(self, key: Hashable, tokens: list[str]) -> None:
        self._contents[key] = tokens
        self._contents.move_to_end(key)
        if len(self._contents) > self._remembered:
            self._contents.popitem(last=False)

    # --- the step loop ---

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if self._sim.idle:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
                continue
            result = self._sim.step()
            # Sleep to a deadline, not for a duration, so the loop's own time does not add up.
            deadline = max(deadline + result.duration_s / self._speed, loop.time() - _MAX_LAG_S)
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            self._deliver(result)

    def _deliver(self, result: StepResult) -> None:
        """Tokens appear when the step that made them ends."""
        streams = self._streams
        for request_id in (*result.started, *result.decoded):
            stream = streams.get(request_id)
            if stream is not None:  # None: cancelled while the step ran
                stream.emitted += 1
                stream.changed.set()
        for record in result.finished:
            stream = streams.get(record.request_id)
            if stream is not None:
                stream.finished = True
                stream.cached_tokens = record.cached_tokens
                stream.changed.set()
            if not record.cancelled:
                self._answers.answered((record.finished_s - record.submitted_s) / self._speed)
