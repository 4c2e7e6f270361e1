"""The engine model's tokenizer file, which the node hands to gateways so that they count tokens
without a Tokenize call before each answer (docs/decisions.md, "Gateways count with the node's
tokenizer").

A node vouches only for a file that counts exactly as its engine does: at start it counts a
fixed set of texts (prose, code, whitespace runs, accents, CJK, emoji, the chat template's
special markers) both ways, and keeps the file only when every count agrees. A wrong file (the
base model's beside an instruct engine, another model's) is logged and not served: the gateways
then ask the node, as before.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog
from tokenizers import Tokenizer

# Texts whose counts differ between tokenizers that merely look alike.
PROBES = (
    "Hello, world! How are you today?",
    "  two leading spaces,\ttabs\tand\n\nblank lines  ",
    "naïve café \u2013 \u201cquoted\u201d ÀÉÎÕÜ ßøåæ \ufb01",
    "日本語のテキストと中文文本",
    "emoji 🙂🚀 and a zero\u200bwidth space",
    "def square(x):\n    return x ** 2  # code\n",
    "1234567890 3.14159 1e-9 $42.00",
    "<|im_start|>user\nhi<|im_end|>",
    "<s>[INST] hi [/INST]</s>",
    "",
    " ",
)
PART_BYTES = 1 << 20  # a part of the file in one message: gRPC's default limit is 4 MiB

Count = Callable[[list[str]], Awaitable[list[int]]]


@dataclass(frozen=True)
class ServedTokenizer:
    model: str
    data: bytes
    sha256: str

    def parts(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), PART_BYTES):
            yield self.data[start : start + PART_BYTES]


async def vouch(model: str, path: Path, engine_count: Count) -> ServedTokenizer | None:
    """The file at path, if it counts every probe as the engine does; None otherwise (why is
    logged)."""
    log = structlog.get_logger(component="served-tokenizer").bind(path=str(path))
    try:
        data = await asyncio.to_thread(path.read_bytes)
        tokenizer = await asyncio.to_thread(Tokenizer.from_buffer, data)
    except Exception as error:  # OSError, or the library's bare Exception for a bad file
        log.warning("the tokenizer file is not served: it does not load", reason=str(error))
        return None
    ours = [len(e.ids) for e in tokenizer.encode_batch(list(PROBES), add_special_tokens=False)]
    theirs = await engine_count(list(PROBES))
    differ = [text for text, a, b in zip(PROBES, ours, theirs, strict=True) if a != b]
    if differ:
        log.warning("the tokenizer file is not served: it counts unlike the engine",
                    texts=differ)  # fmt: skip
        return None
    return ServedTokenizer(model, data, hashlib.sha256(data).hexdigest())
