"""What personal memory costs and what its place in the prompt is worth, side by side.

1. The order: cached prompt tokens when the memory block follows the shared system prompt and
   tools (as the platform builds it, domain/context.py) against the block placed first, and
   against no memory at all (today's prompts). Prompts are the real ContextBuilder's, read as
   the simulated engine reads them (nodeagent/sim.py's tokens: a word or mark each), and
   cached as vLLM's automatic prefix caching caches them: 16-token blocks, each named by its
   content and every block before it, evicted least recently used, the answer's blocks kept
   too. Many users with a few conversations each, their turns interleaved. (The nodeagent's
   own simulated cache is kept per conversation, so it cannot show one user's prompt reusing
   another's system prompt, which is what the order decides.)
2. The gateway's CPU per message on a real platform (scheduler, gateway, nodeagent with the
   simulated engine, mutual TLS, production policies; bench/gateway_cost.py's): memory off (no
   tier reads any), on for a user with no entries (every user of today), and on for a user
   with 50 entries, a few on each message's subject. The settings alternate, several rounds.
3. The store: bytes an entry adds and the search's time, on SQLite and PostgreSQL.

    .venv/bin/python bench/memory.py [--messages 200] [--rounds 3] [--users 200]

Prints a table and ends with one JSON line; results land in bench/results/memory.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from benchkit import publish
from gateway_cost import TOPICS, gateway_cost

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prompt_capture import on_both_stores, table_bytes

from clients.chatctl.platform import LocalPlatform
from clients.memory_client import MemoryClient
from domain.context import ContextBuilder
from domain.memory import memory_block, search_terms
from domain.types import Role, Turn
from nodeagent.engine import PromptTurn
from nodeagent.sim import prompt_tokens
from store.factory import open_store
from store.records import MemoryRecord

BLOCK = 16
POSTGRES_SIZE = "SELECT pg_total_relation_size('memories')"
WORDS = (
    "river stone cloud paper light water green quiet early bright small garden train bread "
    "coffee music winter summer city house friend doctor school market"
).split()
SETTINGS = {
    "off": {"CHAT_GATEWAY_MEMORY_FREE_TOP_K": "0"},
    "no entries": {},
    "50 entries": {},
}


# 1. The order ------------------------------------------------------------------------------------


class BlockCache:
    """vLLM's automatic prefix cache, in counts: full blocks named by their chain of content."""

    def __init__(self, capacity_blocks: int | None) -> None:
        self._capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def read(self, tokens: list[str]) -> int:
        """Tokens of the prompt found cached (whole blocks from its start)."""
        found = 0
        for name in _chain(tokens):
            if name not in self._blocks:
                break
            self._blocks.move_to_end(name)
            found += BLOCK
        return found

    def keep(self, tokens: list[str]) -> None:
        for name in _chain(tokens):
            self._blocks[name] = None
            self._blocks.move_to_end(name)
        while self._capacity is not None and len(self._blocks) > self._capacity:
            self._blocks.popitem(last=False)


def _chain(tokens: list[str]) -> Iterator[int]:
    name = 0
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        name = hash((name, tuple(tokens[start : start + BLOCK])))
        yield name


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def _prompt(order: str, system: Turn, memories: Turn | None, history: list[Turn],
            new: Turn) -> list[PromptTurn]:  # fmt: skip
    builder = ContextBuilder(system, window_tokens=32_000, answer_reserve_tokens=1_000)
    if order == "none":
        memories = None
    turns = builder.build(None, history, new, None, memories).turns
    if order == "memory first" and memories is not None:
        turns = (memories, system, *turns[2:])
    return [PromptTurn(turn.role, turn.text) for turn in turns]


def order_worth(users: int, capacity_blocks: int | None, seed: int = 7) -> dict[str, float]:
    """Cached share of prompt tokens for each order, on the same interleaved workload."""
    rng = random.Random(seed)
    system = Turn(Role.SYSTEM, _text(rng, 1_000), 1_000)  # a system prompt with its tools
    conversations = []
    for user in range(users):
        entries = [_text(rng, 15) for _ in range(3)]
        block = memory_block(entries)
        memories = Turn(Role.SYSTEM, block, len(block.split()))
        for _ in range(2):
            turns = [(_text(rng, 30), _text(rng, 120)) for _ in range(4)]
            conversations.append((user, memories, turns))
    # Turns interleaved at random, each conversation's in order.
    schedule = [index for index, (_, _, turns) in enumerate(conversations) for _ in turns]
    rng.shuffle(schedule)
    result = {}
    for order in ("after the system prompt", "memory first", "none"):
        cache = BlockCache(capacity_blocks)
        done = [0] * len(conversations)
        cached = total = 0
        for index in schedule:
            _, memories, turns = conversations[index]
            history: list[Turn] = []
            for question, answer in turns[: done[index]]:
                history += [Turn(Role.USER, question, 30), Turn(Role.ASSISTANT, answer, 120)]
            question, answer = turns[done[index]]
            tokens = prompt_tokens(_prompt(order, system, memories, history,
                                           Turn(Role.USER, question, 30)))  # fmt: skip
            cached += cache.read(tokens)
            total += len(tokens)
            cache.keep(tokens + answer.split())
            done[index] += 1
        result[order] = cached / total
    return result


# 2. The gateway's CPU ----------------------------------------------------------------------------


ENTRY_TOPICS = [f"I once wrote a short poem about {topic}" for topic in TOPICS]


async def fifty_entries(platform: LocalPlatform) -> None:
    """The bench's user (dev-free) with 50 entries: one on each message topic, the others not."""
    rng = random.Random(3)
    async with MemoryClient(platform.gateway_address, platform.tokens["free"],
                            tls=platform.tls("client")) as memory:  # fmt: skip
        for text in ENTRY_TOPICS:
            await memory.create(text)
        for _ in range(50 - len(ENTRY_TOPICS)):
            await memory.create(_text(rng, 12))


# 3. The store -------------------------------------------------------------------------------------


async def store_cost(url: str, entries: int, size_of: str) -> dict[str, float]:
    rng = random.Random(5)
    store = await open_store(url)
    try:
        before = await table_bytes(url, size_of)
        for i in range(entries):
            now = time.time()
            await store.add_memory("u", MemoryRecord(f"m{i}", _text(rng, 15), False, "user",
                                                     now, now))  # fmt: skip
        after = await table_bytes(url, size_of)
        times = []
        for _ in range(200):
            terms = search_terms(_text(rng, 20))
            start = time.perf_counter()
            await store.search_memories("u", terms, 5, 0.0)
            times.append(time.perf_counter() - start)
    finally:
        await store.close()
    return {"bytes_per_entry": (after - before) / entries,
            "search_ms_p50": statistics.median(times) * 1000}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--entries", type=int, default=200)
    args = parser.parse_args()
    capacities = {"unbounded": None, "64k tokens": 64_000 // BLOCK}
    worth = {name: order_worth(args.users, blocks) for name, blocks in capacities.items()}
    cpu: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for round_ in range(args.rounds):
        order = list(SETTINGS) if round_ % 2 == 0 else list(reversed(SETTINGS))
        for name in order:
            prepare = fifty_entries if name == "50 entries" else None
            cost = asyncio.run(gateway_cost(args.messages, 4, args.concurrency, SETTINGS[name],
                                            insecure=False, prepare=prepare))  # fmt: skip
            cpu[name].append(cost["gateway_cpu_ms_per_message"])
    store = asyncio.run(on_both_stores(store_cost, args.entries, POSTGRES_SIZE))
    medians = {name: statistics.median(values) for name, values in cpu.items()}
    order_rows = [
        f"{name:<12} {w['after the system prompt']:>13.1%} {w['memory first']:>13.1%} "
        f"{w['none']:>10.1%}"
        for name, w in worth.items()
    ]
    cpu_rows = [
        f"{name:<11} {' '.join(f'{v:.2f}' for v in values):<26} {medians[name]:>7.2f}"
        for name, values in cpu.items()
    ]
    store_rows = [
        f"{name:<9} {s['bytes_per_entry']:>11.0f} {s['search_ms_p50']:>14.3f}"
        for name, s in store.items()
    ]
    lines = [
        f"cached share of prompt tokens by where the memory block sits ({args.users} users, "
        "2 conversations of 4 turns each, turns interleaved; a 1,000-token system prompt with "
        "tools, 3 memory entries of 15 words, 30-word messages, 120-word answers; vLLM-style "
        "16-token prefix blocks, LRU)",
        f"{'cache':<12} {'after system':>13} {'memory first':>13} {'no memory':>10}",
        *order_rows,
        "",
        f"gateway CPU per message ({args.rounds} rounds alternating, {args.messages} one-turn "
        f"messages, {args.concurrency} at once, simulated 8B engine, mutual TLS, production "
        "policies; SQLite store)",
        f"{'memory':<11} {'CPU ms/msg by round':<26} {'median':>7}",
        *cpu_rows,
        f"a user with no entries: {medians['no entries'] - medians['off']:+.2f} ms against "
        f"off; with 50: {medians['50 entries'] - medians['off']:+.2f} ms",
        "",
        f"store, {args.entries} entries of 15 words, top-5 searches of 20-word messages:",
        f"{'store':<9} {'bytes/entry':>11} {'search p50 ms':>14}",
        *store_rows,
    ]
    result = {
        "bench": "memory",
        "cached_share": {name: {k: round(v, 4) for k, v in w.items()} for name, w in worth.items()},
        "gateway_cpu_ms_per_message": {name: round(v, 3) for name, v in medians.items()},
        "gateway_cpu_by_round": cpu,
        "store": {k: {m: round(v, 3) for m, v in s.items()} for k, s in store.items()},
    }
    lines.append(json.dumps(result))
    publish("memory", "\n".join(lines))


if __name__ == "__main__":
    main()
