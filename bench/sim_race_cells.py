"""One cell of the GPU-scale race (bench/sim_race.py): one system serving one workload's users,
in slowed time, and the figures of a cell. Every time the client measures is real; the report
divides it by the slow-down factor, so its figures are a GPU fleet's (simulated) seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import defaultdict
from dataclasses import dataclass

import aiohttp
from race_workloads import SYSTEM_PROMPT, UserScript, salted

MAX_ATTEMPTS = 3  # the openai SDK's default: one try and two retries


@dataclass
class Turn:
    system: str
    workload: str
    conversation: str
    turn: int
    ok: bool
    ttft_s: float  # simulated seconds: real ones over the slow-down factor
    e2e_s: float
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    replica: str
    error: str = ""


@dataclass
class Target:
    name: str
    url: str
    token: str = ""
    model: str = "small"

    def headers(self, conversation: str) -> dict[str, str]:
        headers = {"X-Session-Id": conversation, "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


async def one_try(
    http: aiohttp.ClientSession, target: Target, conversation: str, body: dict
) -> tuple[float | None, str, dict, str]:
    """(first-token time, text, usage, replica): the replica from the X-Replica header, else
    from the chunks' system_fingerprint (the simulated replicas name themselves in both)."""
    first, texts, usage, replica = None, [], {}, ""
    async with http.post(
        target.url + "/v1/chat/completions", json=body, headers=target.headers(conversation)
    ) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:120]}")
        replica = response.headers.get("X-Replica", "")
        async for raw in response.content:
            if not raw.startswith(b"data: {"):
                continue
            event = json.loads(raw[6:])
            if "error" in event:
                raise RuntimeError(f"stream error: {str(event['error'])[:120]}")
            replica = replica or event.get("system_fingerprint") or ""
            for choice in event.get("choices") or ():
                text = (choice.get("delta") or {}).get("content")
                if text:
                    first = first or time.perf_counter()
                    texts.append(text)
            usage = event.get("usage") or usage
    return first, "".join(texts), usage, replica


async def one_turn(
    http: aiohttp.ClientSession, target: Target, workload: str, conversation: str, turn: int,
    messages: list[dict], max_tokens: int, slow: float,
) -> tuple[Turn, str]:  # fmt: skip
    body = {"model": target.model, "messages": messages, "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    start, error = time.perf_counter(), ""
    for attempt in range(MAX_ATTEMPTS):
        if attempt:
            await asyncio.sleep(0.5 * slow)
        try:
            first, text, usage, replica = await one_try(http, target, conversation, body)
        except (aiohttp.ClientError, TimeoutError, RuntimeError, json.JSONDecodeError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:160]
            continue
        end = time.perf_counter()
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
        done = Turn(target.name, workload, conversation, turn, True,
                    ((first or end) - start) / slow, (end - start) / slow,
                    int(usage.get("prompt_tokens", 0)), cached,
                    int(usage.get("completion_tokens", 0)), replica, error)  # fmt: skip
        return done, text
    lost = (time.perf_counter() - start) / slow
    return Turn(
        target.name, workload, conversation, turn, False, lost, lost, 0, 0, 0, "", error
    ), ""


async def run_cell(
    target: Target, workload: str, scripts: list[UserScript], max_tokens: int, slow: float,
    salt_key: str,
) -> list[Turn]:  # fmt: skip
    """Every user's conversations, side by side; think times and starts slowed by `slow`."""
    salt = hashlib.sha256(f"{target.name}/{workload}/{salt_key}".encode()).hexdigest()[:8]
    turns: list[Turn] = []
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:

        async def user(script: UserScript) -> None:
            await asyncio.sleep(script.start_s * slow)
            for conversation in script.conversations:
                cid = f"{salt}-{conversation.conversation_id}"
                messages = [{"role": "system", "content": SYSTEM_PROMPT}]
                for index, text in enumerate(conversation.messages):
                    content = salted(text, salt) if index == 0 else text
                    messages.append({"role": "user", "content": content})
                    done, answer = await one_turn(
                        http, target, workload, cid, index, messages, max_tokens, slow
                    )
                    turns.append(done)
                    messages.append({"role": "assistant", "content": answer})
                    await asyncio.sleep(conversation.think_s[index] * slow)

        await asyncio.gather(*(user(s) for s in scripts))
    return turns


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(turns: list[Turn], replicas: int) -> dict:
    """A cell's row: latencies in simulated ms, cached share, hot spot, stay share."""
    good = [t for t in turns if t.ok]
    prompt = sum(t.prompt_tokens for t in good)
    read: dict[str, int] = defaultdict(int)  # prompt tokens each replica read (not cached)
    for t in good:
        read[t.replica] += t.prompt_tokens - t.cached_tokens
    mean_read = sum(read.values()) / replicas if replicas else 0.0
    stays = moves = 0
    last: dict[str, str] = {}
    for t in sorted(good, key=lambda t: (t.conversation, t.turn)):
        if t.replica and t.conversation in last:
            stays += last[t.conversation] == t.replica
            moves += last[t.conversation] != t.replica
        if t.replica:
            last[t.conversation] = t.replica
    ttft = [t.ttft_s * 1000 for t in good]
    e2e = [t.e2e_s * 1000 for t in good]
    return {
        "turns": len(turns),
        "failed": len(turns) - len(good),
        "ttft_p50_ms": pct(ttft, 0.5),
        "ttft_p95_ms": pct(ttft, 0.95),
        "e2e_p50_ms": pct(e2e, 0.5),
        "e2e_p95_ms": pct(e2e, 0.95),
        "cached_share": sum(t.cached_tokens for t in good) / prompt if prompt else 0.0,
        "hot_spot": max(read.values()) / mean_read if mean_read else 0.0,
        "replicas_used": len([r for r in read if r]),
        "stay_share": stays / (stays + moves) if stays + moves else None,
        "mean_prompt_tokens": prompt / len(good) if good else 0.0,
        "unnamed_replica_turns": sum(not t.replica for t in good),
    }
