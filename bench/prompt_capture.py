"""What prompt capture costs per message, side by side with it off.

1. The gateway's CPU per message with capture on and off: bench/gateway_cost.py's platform (a
   real scheduler, gateway and nodeagent with the simulated engine, mutual TLS, production
   policies), messages straight to the gateway over gRPC, the gateway process's CPU over them;
   the two settings alternate, several rounds each, so the machine's drift hits both alike.
2. The store's side: one capture of a 12-turn prompt (system prompt, five earlier exchanges
   of about 600 characters each, the new message) written to SQLite and to PostgreSQL, the
   time each write takes and the bytes each row adds on disk (the table and its indexes).

    .venv/bin/python bench/prompt_capture.py [--messages 200] [--rounds 3] [--captures 500]

Prints a table and ends with one JSON line; results land in bench/results/prompt_capture.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from benchkit import publish
from gateway_cost import gateway_cost

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from domain.types import Role, Turn
from store.factory import open_store
from store.records import CapturedPrompt, NewMessage
from tests.servers import run_postgres

SETTINGS = {"on": {}, "off": {"CHAT_GATEWAY_PROMPT_CAPTURE_DAYS": "0"}}
EARLIER_EXCHANGES = 5
TURN_CHARS = 600
LETTERS = "etaoinshrdlucmfwypvbgkqjxz"


def long_prompt(i: int) -> tuple[Turn, ...]:
    """Words drawn at random, so the store cannot compress the text much better than it would
    a real conversation's."""
    rng = random.Random(i)

    def text(chars: int) -> str:
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append("".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 9))))
        return " ".join(words)[:chars]

    turns = [Turn(Role.SYSTEM, "You are a helpful assistant. Answer clearly and briefly.", 12)]
    for _ in range(EARLIER_EXCHANGES):
        turns += [
            Turn(Role.USER, text(TURN_CHARS), 150),
            Turn(Role.ASSISTANT, text(TURN_CHARS), 150),
        ]
    turns.append(Turn(Role.USER, f"Message {i}: and then?", 8))
    return tuple(turns)


async def store_cost(url: str, captures: int, size_of: str) -> dict:
    """ms per capture write and bytes per row, on a store with nothing else in it."""
    store = await open_store(url)
    try:
        for i in range(captures):
            await store.add_message("u", f"c{i}", NewMessage(f"m{i}", Role.USER, "hi", 1, None))
        before = await table_bytes(url, size_of)
        times = []
        for i in range(captures):
            prompt = CapturedPrompt(f"m{i}", f"c{i}", "base", "m", "node-a", 0.7, 1000,
                                    long_prompt(i))  # fmt: skip
            start = time.perf_counter()
            await store.capture_prompt("u", prompt)
            times.append(time.perf_counter() - start)
        after = await table_bytes(url, size_of)
    finally:
        await store.close()
    return {
        "capture_ms_p50": statistics.median(times) * 1000,
        "capture_ms_mean": statistics.fmean(times) * 1000,
        "bytes_per_row": (after - before) / captures,
        "text_chars": sum(len(t.text) for t in long_prompt(0)),
    }


async def table_bytes(url: str, size_of: str) -> int:
    if url.startswith("sqlite:///"):
        return await asyncio.to_thread(_sqlite_bytes, url.removeprefix("sqlite:///"))
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(size_of))
    finally:
        await conn.close()


def _sqlite_bytes(path: str) -> int:
    """The database's size in pages as a reader sees it (the WAL's pages included): only the
    captures are written between the two reads."""
    conn = sqlite3.connect(path)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        return int(pages * conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


POSTGRES_SIZE = "SELECT pg_total_relation_size('captured_prompts')"


async def on_both_stores(
    cost: Callable[[str, int, str], Awaitable[dict]], count: int, postgres_size: str
) -> dict:
    """cost(url, count, size query) on a new SQLite file and a new PostgreSQL server."""
    with tempfile.TemporaryDirectory() as folder:
        sqlite = await cost(f"sqlite:///{folder}/chat.db", count, "")
    with run_postgres() as server:
        postgres = await cost(server.dsn, count, postgres_size)
    return {"sqlite": sqlite, "postgres": postgres}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--captures", type=int, default=500)
    args = parser.parse_args()
    cpu: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for round_ in range(args.rounds):
        order = list(SETTINGS) if round_ % 2 == 0 else list(reversed(SETTINGS))
        for name in order:
            cost = asyncio.run(gateway_cost(args.messages, 4, args.concurrency, SETTINGS[name],
                                            insecure=False))  # fmt: skip
            cpu[name].append(cost["gateway_cpu_ms_per_message"])
    store = asyncio.run(on_both_stores(store_cost, args.captures, POSTGRES_SIZE))
    on, off = statistics.median(cpu["on"]), statistics.median(cpu["off"])
    rows = [f"{name:<8} {' '.join(f'{v:.2f}' for v in cpu[name]):<32} "
            f"{statistics.median(cpu[name]):>7.2f}" for name in SETTINGS]  # fmt: skip
    store_rows = [f"{name:<9} {s['capture_ms_p50']:>12.2f} {s['capture_ms_mean']:>7.2f} "
                  f"{s['bytes_per_row']:>10.0f}" for name, s in store.items()]  # fmt: skip
    added = f"{on - off:+.2f} ms of gateway CPU per message ({(on / off - 1) * 100:+.1f} %)"
    lines = [
        f"gateway CPU per message, capture on and off alternating ({args.rounds} rounds of "
        f"{args.messages} one-turn messages, {args.concurrency} at once, simulated 8B engine, "
        "mutual TLS, production policies; SQLite store)",
        f"{'capture':<8} {'CPU ms/msg by round':<32} {'median':>7}",
        *rows,
        f"capture adds {added}",
        f"store, one capture of a {len(long_prompt(0))}-turn prompt "
        f"({store['sqlite']['text_chars']} characters of text), {args.captures} writes:",
        f"{'store':<9} {'write p50 ms':>12} {'mean':>7} {'bytes/row':>10}",
        *store_rows,
    ]
    result = {
        "bench": "prompt_capture",
        "gateway_cpu_ms_per_message_on": round(on, 3),
        "gateway_cpu_ms_per_message_off": round(off, 3),
        "gateway_cpu_by_round": cpu,
        "store": {k: {m: round(v, 3) for m, v in s.items()} for k, s in store.items()},
    }
    lines.append(json.dumps(result))
    publish("prompt_capture", "\n".join(lines))


if __name__ == "__main__":
    main()
