"""The llama.cpp adapter against a real llama-server."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from domain.answer_options import AnswerOptions
from domain.types import Finish, Role
from nodeagent.engine import Chunk, EngineError, EngineLost, Finished, GenerationRequest, PromptTurn
from nodeagent.llamacpp import HEALTH_TIMEOUT_S, LlamaCppEngine
from nodeagent.request_registry import RequestRegistry
from tests.citation_prompt import (
    ALLOWED,
    ANSWER_STEP_TURNS,
    NOT_ALLOWED,
    PASSAGE_ID,
    TURNS,
    cites_only_allowed_ids,
)


def request(rid: str, text: str, max_tokens: int = 16, **extra) -> GenerationRequest:
    turns = (PromptTurn(Role.SYSTEM, "You are brief."), PromptTurn(Role.USER, text))
    return GenerationRequest(rid, turns, max_tokens, prompt_tokens=30, **extra)


async def test_tokenize_counts_with_the_models_own_tokenizer(engine: LlamaCppEngine) -> None:
    counts = await engine.tokenize(["hello world", "", "hello world hello world"])
    assert counts[0] == 2 and counts[1] == 0 and counts[2] == 4


async def test_generate_streams_chunks_then_usage(engine: LlamaCppEngine) -> None:
    items = [item async for item in engine.generate(request("g1", "Name a colour."))]
    chunks = [i for i in items if isinstance(i, Chunk)]
    finished = items[-1]
    assert isinstance(finished, Finished) and chunks
    assert finished.finish in (Finish.STOP, Finish.LENGTH)
    # The end-of-turn token is counted but carries no text.
    assert len(chunks) <= finished.usage.output_tokens <= min(16, len(chunks) + 1)
    assert finished.usage.input_tokens > 10


async def test_max_tokens_cuts_the_answer_with_finish_length(engine: LlamaCppEngine) -> None:
    items = [i async for i in engine.generate(request("g2", "Tell a long story.", 5))]
    assert items[-1] == Finished(Finish.LENGTH, items[-1].usage)
    assert items[-1].usage.output_tokens == 5


async def test_the_same_prefix_is_served_from_the_cache(engine: LlamaCppEngine) -> None:
    text = "Remember this list: apples, pears, plums, cherries, figs, dates, limes."
    [_ async for _ in engine.generate(request("c1", text, 4))]
    items = [i async for i in engine.generate(request("c2", text + " Which is first?", 4))]
    usage = items[-1].usage
    assert 0 < usage.cached_tokens < usage.input_tokens


async def test_continue_from_a_partial_answer(engine: LlamaCppEngine) -> None:
    items = [
        i
        async for i in engine.generate(
            request("p1", "Count from one to ten in words.", 6, continue_from="one, two, three,")
        )
    ]
    text = "".join(i.text for i in items if isinstance(i, Chunk))
    assert "one" not in text.split(",")[0].lower()  # it went on, it did not start again


async def test_an_answer_under_citation_ids_cites_no_other_id(engine: LlamaCppEngine) -> None:
    """Shown a marker to copy that the grammar does not allow, the model copies it when free
    (so the prompt can tell) and never under the grammar."""
    seeded = AnswerOptions(seed=1)
    free = GenerationRequest("k1", TURNS, 40, temperature=0.0, options=seeded)
    text = "".join([i.text async for i in engine.generate(free) if isinstance(i, Chunk)])
    assert NOT_ALLOWED in text
    bound = replace(free, request_id="k2", options=replace(seeded, citation_ids=ALLOWED))
    text = "".join([i.text async for i in engine.generate(bound) if isinstance(i, Chunk)])
    assert cites_only_allowed_ids(text) and NOT_ALLOWED not in text, text


async def test_the_answer_step_after_a_search_answers_under_the_grammar() -> None:
    """The tool loop's step after a file_search: a history with a tool call and its result,
    no tools offered, and the grammar of the passage read. llama-server takes it, answers
    from the result (the passage's "May": the history reached the model) and holds to the
    grammar. On a server of its own: what it leaves in the shared one's slot cache changed
    the text later tests' counting prompts got (tests/nodeagent/test_servicer.py)."""
    options = AnswerOptions(seed=1, citation_ids=(PASSAGE_ID,))
    step = GenerationRequest("a1", ANSWER_STEP_TURNS, 40, temperature=0.0, options=options)
    fresh = LlamaCppEngine("smollm2-135m-instruct", slot_context_tokens=2048, parallel=1)
    await fresh.start()
    try:
        items = [i async for i in fresh.generate(step)]
    finally:
        await fresh.stop()
    text = "".join(i.text for i in items if isinstance(i, Chunk))
    assert isinstance(items[-1], Finished) and items[-1].finish in (Finish.STOP, Finish.LENGTH)
    assert items[-1].tool_calls == () and "May" in text, text
    assert cites_only_allowed_ids(text, (PASSAGE_ID,)), text


async def llama_speeds(engine: LlamaCppEngine) -> tuple[float, float, float]:
    """llama-server's own prompt and decode speeds, and the seconds its slots spent on
    prompts and answers in all, from one scrape of its /metrics, once it has counted a
    request: it books a request's timings after the answer's last chunk is sent, so a scrape
    right after the answer can still read 0."""
    async with aiohttp.ClientSession() as http:
        async with asyncio.timeout(30):
            while True:
                async with http.get(f"{engine.base_url}/metrics") as response:
                    text = await response.text()
                figures = {
                    line.split()[0]: float(line.split()[-1])
                    for line in text.splitlines()
                    if line.startswith("llamacpp:")
                }
                prompt = figures["llamacpp:prompt_tokens_seconds"]
                predicted = figures["llamacpp:predicted_tokens_seconds"]
                busy = (
                    figures["llamacpp:prompt_seconds_total"]
                    + figures["llamacpp:tokens_predicted_seconds_total"]
                )
                if prompt > 0 and predicted > 0:
                    return prompt, predicted, busy
                await asyncio.sleep(0.05)


async def test_the_load_carries_the_speeds_llama_server_measured() -> None:
    fresh = LlamaCppEngine("smollm2-135m-instruct", slot_context_tokens=2048, parallel=1)
    await fresh.start()
    try:
        unmeasured = await fresh.load()
        assert (unmeasured.prefill_tokens_per_s, unmeasured.answer_s) == (0.0, 0.0)
        [_ async for _ in fresh.generate(request("s1", "Name three rivers of Europe.", 8))]
        load = await fresh.load()
        # Its only request: llama-server's own averages are that request's timings too.
        prompt, predicted, busy = await llama_speeds(fresh)
        # Within 2 %: the metric is llama-server's running total, the timings its per-answer
        # report of the same request; the two were seen 0.5 % apart (208.0 against 209.1).
        assert load.prefill_tokens_per_s == pytest.approx(prompt, rel=0.02)
        assert 1 / load.decode_step_s == pytest.approx(predicted, rel=0.02)
        # The slot was held for the prompt and the answer: one request, so the totals are its.
        assert load.answer_s == pytest.approx(busy, rel=0.02)
    finally:
        await fresh.stop()


@pytest.fixture(scope="module")
async def one_slot() -> AsyncIterator[LlamaCppEngine]:
    """llama-server with a single slot: a request left running there blocks every other."""
    started = LlamaCppEngine("smollm2-135m-instruct", slot_context_tokens=2048, parallel=1)
    await started.start()
    yield started
    await started.stop()


async def busy_slots(engine: LlamaCppEngine) -> list[bool]:
    """What llama-server itself says of its slots (its /slots endpoint)."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{engine.base_url}/slots") as response,
    ):
        return [bool(slot["is_processing"]) for slot in await response.json()]


async def test_closing_the_stream_frees_the_engines_slot(one_slot: LlamaCppEngine) -> None:
    stream = one_slot.generate(request("x1", "Write a very long poem about rain.", 2000))
    async for item in stream:
        assert isinstance(item, Chunk)
        break
    assert await busy_slots(one_slot) == [True]
    await stream.aclose()
    deadline = asyncio.get_running_loop().time() + 5.0
    while await busy_slots(one_slot) != [False]:
        assert asyncio.get_running_loop().time() < deadline, "the slot is still generating"
        await asyncio.sleep(0.05)
    # The one slot is free: a new request starts and ends while the first would still be
    # generating its 2,000 tokens.
    items = await asyncio.wait_for(_collect(one_slot.generate(request("x2", "Hi", 3))), 10)
    assert isinstance(items[-1], Finished)
    assert await busy_slots(one_slot) == [False]


async def _until_stopped(pid: int) -> None:
    deadline = asyncio.get_running_loop().time() + 5.0
    status = Path(f"/proc/{pid}/status")
    while "T (stopped)" not in await asyncio.to_thread(status.read_text):
        assert asyncio.get_running_loop().time() < deadline, "the process did not stop"
        await asyncio.sleep(0.01)


async def _collect(stream):
    return [i async for i in stream]


async def test_a_hung_engine_is_unhealthy_within_the_checks_bound(one_slot: LlamaCppEngine) -> None:
    """A stopped llama-server accepts connections (the kernel does) but answers nothing: the
    health check must give up, or the node would go on reporting the engine as ready."""
    pid = one_slot.process_id
    assert pid is not None and await one_slot.healthy()
    os.kill(pid, signal.SIGSTOP)
    try:
        # The stop takes effect once every thread has reached it: until then a kept-alive
        # connection's thread may still answer.
        await _until_stopped(pid)
        # Without its bound the check waits for ever: this wait fails the test instead.
        assert not await asyncio.wait_for(one_slot.healthy(), HEALTH_TIMEOUT_S + 5.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert await one_slot.healthy()


async def test_a_killed_llama_server_ends_its_answers_as_engine_lost() -> None:
    """The node stays up and its engine dies mid-answer: the answer ends as lost with its
    engine, which the gateway continues elsewhere; an engine that refuses a request (an
    error status) ends it as a plain error, which the gateway does not."""
    fresh = LlamaCppEngine("smollm2-135m-instruct", slot_context_tokens=2048, parallel=1)
    await fresh.start()
    try:
        # Longer than the slot's context: llama-server answers 400.
        with pytest.raises(EngineError) as refused:
            [_ async for _ in fresh.generate(request("r0", "rain " * 3000, 8))]
        assert not isinstance(refused.value, EngineLost)
        running = RequestRegistry(fresh).start(
            request("k1", "Write a very long poem about rain.", 2000)
        )
        follow = running.follow(0, 0.0)
        first = await asyncio.wait_for(anext(follow), 30.0)  # the answer under way
        await follow.aclose()
        assert not isinstance(first, Finished)
        assert fresh.process_id is not None
        os.kill(fresh.process_id, signal.SIGKILL)
        finished = await asyncio.wait_for(running.until_finished(), 30.0)
        assert (finished.finish, finished.engine_lost) == (Finish.ERROR, True)
    finally:
        await fresh.stop()
