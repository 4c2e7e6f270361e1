"""Responses cut mid-stream and resumed with `starting_after`: text lost or repeated, and how long
a resume takes. The official `openai` SDK against the edge, one gateway, one simulated replica
(about 40 tokens/s an answer), text released token by token.

Each response is streamed with `client.responses.create(stream=True)` and cut (the SDK's stream
closed) after a drawn number of deltas; it is then read again with `client.responses.retrieve(
id, stream=True, starting_after=<the last sequence_number read>)`, at once (`live`: the answer
still runs) or once it has ended (`ended`: the whole log is replayed). The text read before
and after the cut, joined, is compared character for character with the simulated engine's
answer to the same prompt (a function of the prompt), so a lost or repeated word shows.

Time to resume: from the `retrieve` call to its first event (the HTTP request, the read of the
stored response, the attach at the gateway, the replay up to the cut and its translation).

    .venv/bin/python bench/responses_resume.py [--responses 40] [--concurrency 4]

Prints a table and ends with one JSON line. Results land in bench/results/responses_resume.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import openai
from benchkit import pct, publish

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.simtext import expected_answer

SYSTEM_PROMPT = "You are a careful assistant."
ANSWER_TOKENS = (100, 200)
TOPICS = ["rivers", "bridges", "owls", "volcanoes", "bread", "comets", "glass", "tides"]


@dataclass
class Resume:
    mode: str
    cut_after_deltas: int
    resume_s: float
    lost_chars: int
    repeated_chars: int
    gapless: bool


def errors(expected: str, got: str) -> tuple[int, int]:
    """Characters of the expected text missing from what was read, and extra ones read."""
    lost = repeated = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, expected, got).get_opcodes():
        if op in ("delete", "replace"):
            lost += i2 - i1
        if op in ("insert", "replace"):
            repeated += j2 - j1
    return lost, repeated


async def one(client: openai.AsyncOpenAI, index: int, mode: str, cut: int) -> Resume:
    question = f"Tell me about {TOPICS[index % len(TOPICS)]}, take {index}."
    stream = await client.responses.create(model="auto", input=question, stream=True)
    before = []
    async for event in stream:
        before.append(event)
        if sum(e.type == "response.output_text.delta" for e in before) == cut:
            break
    await stream.close()
    response_id, last = before[0].response.id, before[-1].sequence_number
    if mode == "ended":
        for _ in range(600):  # at most a minute
            if (await client.responses.retrieve(response_id)).status != "in_progress":
                break
            await asyncio.sleep(0.1)
    asked = time.monotonic()
    resumed = await client.responses.retrieve(response_id, stream=True, starting_after=last)
    after, resume_s = [], 0.0
    async for event in resumed:
        if not after:
            resume_s = time.monotonic() - asked
        after.append(event)
    events = before + after
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    lost, repeated = errors(expected_answer(question, SYSTEM_PROMPT, ANSWER_TOKENS), text)
    gapless = [e.sequence_number for e in events] == list(range(len(events)))
    return Resume(mode, cut, resume_s, lost, repeated, gapless)


async def run(responses: int, concurrency: int) -> list[Resume]:
    with tempfile.TemporaryDirectory() as state:
        platform = LocalPlatform(
            PlatformSettings(
                state_dir=Path(state),
                edge_listen="127.0.0.1:0",
                extra_env={
                    "CHAT_NODEAGENT_ENGINE": "sim",
                    "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                    "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                    "CHAT_GATEWAY_ROUTER": "false",
                    "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
                    "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
                    "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e9",
                },
            )
        )
        await platform.start()
        try:
            client = openai.AsyncOpenAI(base_url=f"{platform.edge_url}/v1",
                                        api_key=platform.tokens["plus"], max_retries=0)  # fmt: skip
            draw = random.Random(7)
            plan = [(i, "live" if i % 2 == 0 else "ended", draw.randint(1, 60))
                    for i in range(responses)]  # fmt: skip
            gate = asyncio.Semaphore(concurrency)

            async def bounded(index: int, mode: str, cut: int) -> Resume:
                async with gate:
                    return await one(client, index, mode, cut)

            results = await asyncio.gather(*(bounded(*item) for item in plan))
            await client.close()
            return list(results)
        finally:
            await platform.stop()


def report(results: list[Resume], concurrency: int) -> str:
    lines = [
        f"responses cut mid-stream and resumed with starting_after ({concurrency} at a time, "
        f"one simulated replica, answers of {ANSWER_TOKENS[0]}-{ANSWER_TOKENS[1]} tokens)",
        "",
        "| resumed | responses | chars lost | chars repeated | gapless numbering | "
        "resume p50 ms | p95 ms | max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, object] = {"bench": "responses_resume", "concurrency": concurrency}
    for mode in ("live", "ended"):
        picked = [r for r in results if r.mode == mode]
        times = [r.resume_s * 1000 for r in picked]
        row = {
            "responses": len(picked),
            "lost_chars": sum(r.lost_chars for r in picked),
            "repeated_chars": sum(r.repeated_chars for r in picked),
            "gapless": sum(r.gapless for r in picked),
            "p50_ms": round(pct(times, 0.5), 1),
            "p95_ms": round(pct(times, 0.95), 1),
            "max_ms": round(max(times), 1),
        }
        summary[mode] = row
        lines.append(
            f"| {mode} | {row['responses']} | {row['lost_chars']} | {row['repeated_chars']} | "
            f"{row['gapless']}/{row['responses']} | {row['p50_ms']} | {row['p95_ms']} | "
            f"{row['max_ms']} |"
        )
    lines += [
        "",
        "live: the cut came at the newest event, so the first resumed one is the replica's next "
        "text (a node sends tokens in 50 ms batches); ended: the whole log replayed from the "
        "gateway's memory.",
        "",
        json.dumps(summary, separators=(",", ":")),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    results = asyncio.run(run(args.responses, args.concurrency))
    publish("responses_resume", report(results, args.concurrency))


if __name__ == "__main__":
    main()
