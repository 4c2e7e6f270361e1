"""Token counts already made, kept so the same text is not counted twice.

A gateway counts every turn of a prompt on each message: an OpenAI-style client resends its
whole history, so the fourth message of a conversation asks again for the system prompt and six
turns it asked for before. Each count costs a call to the engine (llama-server's /tokenize: one
text a call, on the CPU the engine generates on) on a node, a pass of the tokenizer in a
gateway. The counts of a text never change for one tokenizer, so they are kept here, least
recently used first out, by a digest of the text (not the text: a pasted document would stay
in memory with it).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from domain.errors import Unavailable

Tokenize = Callable[[list[str]], Awaitable[list[int]]]

DEFAULT_CAPACITY = 16_384  # texts: about 1.5 MB of digests and counts


class TokenCounts:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be 0 or more texts, not {capacity}")
        self.capacity = capacity
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self.hits = 0  # texts answered from here
        self.misses = 0  # texts the counter counted

    def __len__(self) -> int:
        return len(self._counts)

    async def count(self, texts: list[str], tokenize: Tokenize) -> list[int]:
        """The token count of each text: kept ones at once, the rest (each distinct text
        once) from `tokenize` in one call, then kept."""
        keys = [_digest(text) for text in texts]
        known: dict[bytes, int] = {}
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            count = self._counts.get(key)
            if count is None:
                missing.setdefault(key, text)
            else:
                self._counts.move_to_end(key)
                known[key] = count
        if missing:
            counted = await tokenize(list(missing.values()))
            if len(counted) != len(missing):
                raise Unavailable(f"asked for {len(missing)} counts, got {len(counted)}")
            for key, count in zip(missing, counted, strict=True):
                known[key] = count
                self._keep(key, count)
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        return [known[key] for key in keys]

    def _keep(self, key: bytes, count: int) -> None:
        if not self.capacity:
            return
        self._counts[key] = count
        self._counts.move_to_end(key)
        while len(self._counts) > self.capacity:
            self._counts.popitem(last=False)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()
