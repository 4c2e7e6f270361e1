"""Token counts made in the gateway with each node's own tokenizer file (docs/decisions.md,
"Gateways count with the node's tokenizer"): no Tokenize call before an answer.

A node is asked once for its tokenizer. Until it has answered, and for a node that offers none
(an older node, the simulated engine, a file that counts unlike its engine), the caller asks
the node to count, as before; a node that offered none is asked again after retry_s, so an
upgraded node is found. Nodes that serve the same file (by its digest) share one loaded
tokenizer and one cache of counts, and a node whose file is held already does not send it
again. A node that names another model than the one it offered a tokenizer for (restarted
with another model on the same address) is asked again.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog
from tokenizers import Tokenizer

from domain.errors import Unavailable
from domain.token_counts import TokenCounts


@dataclass(frozen=True)
class OfferedTokenizer:
    """What a node sent: its model, the file and the file's SHA-256 (hex) as the node gave it."""

    model: str
    sha256: str
    data: bytes


# The node's offer, None when it offers none; Unavailable when it could not be asked. The
# second argument: the digests of the files held here, which the node need not send again
# (its offer's data is empty then).
Fetch = Callable[[str, Sequence[str]], Awaitable[OfferedTokenizer | None]]

# Past this many characters a batch is encoded on a thread, off the event loop (about 1 ms).
INLINE_CHARS = 8_192


class _Loaded:
    """One tokenizer file, loaded, with the counts it made."""

    def __init__(self, tokenizer: Tokenizer, cache_texts: int) -> None:
        self._tokenizer = tokenizer
        self.counts = TokenCounts(cache_texts)

    async def encode(self, texts: list[str]) -> list[int]:
        if sum(len(text) for text in texts) <= INLINE_CHARS:
            return self._lengths(texts)
        return await asyncio.to_thread(self._lengths, texts)

    def _lengths(self, texts: list[str]) -> list[int]:
        # No special tokens: the count of the text itself, as the node's Tokenize gives it.
        return [len(e.ids) for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]


@dataclass(frozen=True)
class _Node:
    model: str
    loaded: _Loaded


class LocalTokenizers:
    def __init__(
        self,
        fetch: Fetch,
        retry_s: float = 60.0,
        cache_texts: int = 16_384,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._retry_s = retry_s
        self._cache_texts = cache_texts
        self._clock = clock
        self._nodes: dict[str, _Node] = {}
        self._files: dict[str, _Loaded] = {}  # by the file's SHA-256
        self._asking: dict[str, asyncio.Task[None]] = {}
        self._offered_none: dict[str, float] = {}  # address -> when
        self._log = structlog.get_logger(component="local-tokenizers")

    async def count(self, address: str, texts: Sequence[str], model: str = "") -> list[int] | None:
        """Each text's token count in the node's tokenizer, or None: the node is to count."""
        node = self._nodes.get(address)
        if node is not None and model and model != node.model:
            self.forget(address)
            node = None
        if node is None:
            self._ask(address)
            return None
        return await node.loaded.counts.count(list(texts), node.loaded.encode)

    def knows(self, address: str) -> bool:
        return address in self._nodes

    async def asked(self, address: str) -> None:
        """Returns once the node at address is not being asked (at once when it is not)."""
        asking = self._asking.get(address)
        if asking is not None:
            await asyncio.wait([asking])

    def forget(self, address: str) -> None:
        """Drops what the node at address offered: it is asked again at the next count."""
        self._nodes.pop(address, None)
        self._offered_none.pop(address, None)

    async def close(self) -> None:
        for task in list(self._asking.values()):
            task.cancel()
        await asyncio.gather(*self._asking.values(), return_exceptions=True)

    def _ask(self, address: str) -> None:
        if address in self._asking:
            return
        offered_none = self._offered_none.get(address)
        if offered_none is not None and self._clock() - offered_none < self._retry_s:
            return
        task = asyncio.create_task(self._load(address))
        self._asking[address] = task
        task.add_done_callback(lambda _: self._asking.pop(address, None))

    async def _load(self, address: str) -> None:
        try:
            offered = await self._fetch(address, list(self._files))
            if offered is not None:
                self._nodes[address] = _Node(offered.model, await self._loaded(offered))
                return
        except Unavailable as error:
            self._log.info("a node's tokenizer was not fetched", node=address, reason=str(error))
        self._offered_none[address] = self._clock()

    async def _loaded(self, offered: OfferedTokenizer) -> _Loaded:
        loaded = self._files.get(offered.sha256)
        if loaded is not None:
            return loaded
        # Off the event loop: hashing and parsing a file of several MB takes tens of ms.
        tokenizer = await asyncio.to_thread(_checked_tokenizer, offered)
        loaded = self._files[offered.sha256] = _Loaded(tokenizer, self._cache_texts)
        return loaded


def _checked_tokenizer(offered: OfferedTokenizer) -> Tokenizer:
    if hashlib.sha256(offered.data).hexdigest() != offered.sha256:
        raise Unavailable("the tokenizer file arrived unlike its digest")
    try:
        return Tokenizer.from_buffer(offered.data)
    except Exception as error:  # the library raises bare Exception for a bad file
        raise Unavailable(f"the tokenizer file does not load: {error}") from error
