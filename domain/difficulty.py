"""How likely a message needs the large model: a small logistic regression, local and fast.

Features are hashed word unigrams and bigrams, hashed character trigrams of words, and a few
dense signals (length, code, math, questions, "write/prove/debug" verbs). Hashing keeps the
model a fixed size whatever the vocabulary, so the weights ship as one small JSON file and
scoring is a few hundred additions. Training lives in scripts/train_router.py; what is here is
shared by training and serving so both see exactly the same features. The file is read where
the gateway is composed (gateway/main.py); this module builds the model from its contents.
"""

from __future__ import annotations

import itertools
import math
import re
import string
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FORMAT_VERSION = 1
# Only the start of a long message is hashed: a pasted document is long, which the dense
# features already say, and hashing all of it would blow the per-message time budget.
MAX_HASHED_TOKENS = 256
MAX_CHAR_GRAM_WORDS = 64
CHAR_GRAM = 3
# Distinct crc32 start values keep unigram, bigram and char-gram buckets independent.
_UNIGRAM_SEED, _BIGRAM_SEED, _CHAR_SEED = 0x5EED1, 0x5EED2, 0x5EED3
# Past this a logit's probability is 0 or 1 in float64 anyway; clamping avoids OverflowError.
_MAX_LOGIT = 30.0

# Every ASCII symbol becomes a token of its own ("f(x);" -> "f ( x ) ;"): a translate and a
# split run at C speed, where a tokenising regex cost more than everything else together.
_SPLIT_SYMBOLS = str.maketrans({symbol: f" {symbol} " for symbol in string.punctuation})
# Cheap substring tests first; the line-shape regex only runs when none of them hits.
_CODE_MARKS = ("```", "::", "#include", "</")
# Line starts that prose rarely has ("let me know" or "Select one" would, so those are out).
_CODE_LINE = re.compile(
    r"^[ \t]*(?:def \w+\(|class \w+[:(]|import \w+$|from [\w.]+ import |(?:public|private) "
    r"(?:static|class|void|final) |func |fn |SELECT |INSERT INTO |UPDATE \w+ SET |CREATE TABLE|"
    r"const \w+ =|var \w+ =)|[;{}][ \t]*$",
    re.MULTILINE,
)
_SYMBOLS = frozenset(string.punctuation)
# str.translate tables that delete the symbols: the length lost counts them at C speed.
_CODE_SYMBOLS = str.maketrans("", "", "{}[]();=<>_\\|&#$`")
_MATH_SYMBOLS = str.maketrans("", "", "0123456789+-*/^=<>%√∑∫π≤≥≠±")
# A set lookup per word: an alternation regex over the whole text cost more than all else.
_HARD_VERBS = frozenset(
    "write implement prove derive debug fix optimize optimise refactor analyze analyse design "
    "compare evaluate justify plan solve review draft".split()
)

# The file names each dense weight; this order is the order of Features.dense.
DENSE_FEATURES = (
    "log_words",
    "log_lines",
    "has_code",
    "code_symbol_share",
    "math_symbol_share",
    "questions",
    "hard_verbs",
)


def looks_like_code(text: str) -> bool:
    """A code fence or a line that reads like a program; the router's fallback uses it too."""
    return any(mark in text for mark in _CODE_MARKS) or _CODE_LINE.search(text) is not None


def word_count(text: str) -> int:
    return len(text.split())


@dataclass(frozen=True, slots=True)
class Features:
    # Bucket indices with repeats: a token seen twice counts twice in word_buckets; char
    # buckets come from distinct words.
    word_buckets: tuple[int, ...]
    char_buckets: tuple[int, ...]
    dense: tuple[float, ...]


def _share(text: str, symbols: dict[int, int | None]) -> float:
    return (len(text) - len(text.translate(symbols))) / max(len(text), 1)


def _dense(text: str) -> tuple[float, ...]:
    # Each value is scaled to roughly [0, 1] so one regularisation strength suits them all.
    lowered_words = text.lower().split()
    return (
        math.log1p(len(lowered_words)) / math.log(1000.0),
        math.log1p(text.count("\n")) / math.log(100.0),
        1.0 if looks_like_code(text) else 0.0,
        min(_share(text, _CODE_SYMBOLS) * 10.0, 1.0),
        min(_share(text, _MATH_SYMBOLS) * 5.0, 1.0),
        min(text.count("?"), 5) / 5.0,
        min(sum(word.strip(string.punctuation) in _HARD_VERBS for word in lowered_words), 3) / 3.0,
    )


def features(text: str, buckets: int) -> Features:
    """The model's view of one message. `buckets` must be a power of two."""
    mask = buckets - 1
    # Only the head is tokenised: MAX_HASHED_TOKENS never need more characters than this.
    head = text[: MAX_HASHED_TOKENS * 16].lower()
    tokens = head.translate(_SPLIT_SYMBOLS).split()[:MAX_HASHED_TOKENS]
    # A trailing NUL ends each token, so the bigram ("ab", "c") never hashes like ("a", "bc").
    encoded = [f"{token}\0".encode() for token in tokens]
    word = [zlib.crc32(token, _UNIGRAM_SEED) & mask for token in encoded]
    word += [
        zlib.crc32(second, zlib.crc32(first, _BIGRAM_SEED)) & mask
        for first, second in itertools.pairwise(encoded)
    ]
    char: list[int] = []
    # Distinct words only, in first-seen order: spelling is what char-grams add, and a word's
    # spelling says the same thing the second time.
    distinct = (token for token in dict.fromkeys(tokens) if token not in _SYMBOLS)
    for token in itertools.islice(distinct, MAX_CHAR_GRAM_WORDS):
        # Boundary marks let "ing" at a word's end differ from "ing" inside one.
        padded = f"<{token}>".encode()
        char += [
            zlib.crc32(padded[i : i + CHAR_GRAM], _CHAR_SEED) & mask
            for i in range(len(padded) - CHAR_GRAM + 1)
        ]
    return Features(tuple(word), tuple(char), _dense(text))


def _group_scale(count: int) -> float:
    # Dividing a group's sum by sqrt(count) keeps a long message from swamping the logit just
    # by having many n-grams; training uses the same scale.
    return 1.0 / math.sqrt(count) if count else 0.0


@dataclass(frozen=True, slots=True)
class DifficultyModel:
    bias: float
    hashed_weights: tuple[float, ...]
    dense_weights: tuple[float, ...]
    # Scores below this go to the small pool; chosen on the held-out split by training.
    threshold: float

    @property
    def buckets(self) -> int:
        return len(self.hashed_weights)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DifficultyModel:
        if data.get("format") != FORMAT_VERSION:
            raise ValueError(f"difficulty model format {data.get('format')!r} is not supported")
        buckets = int(data["buckets"])
        if buckets <= 0 or buckets & (buckets - 1):
            raise ValueError(f"buckets must be a power of two, got {buckets}")
        if set(data["dense"]) != set(DENSE_FEATURES):
            raise ValueError("dense features in the file do not match this code's features")
        hashed = [0.0] * buckets
        # Stored sparse: buckets no training message touched keep weight 0.
        for index, weight in data["hashed"]:
            hashed[int(index)] = float(weight)
        return cls(
            bias=float(data["bias"]),
            hashed_weights=tuple(hashed),
            dense_weights=tuple(float(data["dense"][name]) for name in DENSE_FEATURES),
            threshold=float(data["threshold"]),
        )

    def logit(self, found: Features) -> float:
        weights = self.hashed_weights
        word = sum(map(weights.__getitem__, found.word_buckets))
        char = sum(map(weights.__getitem__, found.char_buckets))
        word *= _group_scale(len(found.word_buckets))
        char *= _group_scale(len(found.char_buckets))
        dense = sum(w * x for w, x in zip(self.dense_weights, found.dense, strict=True))
        return self.bias + word + char + dense

    def score(self, text: str) -> float:
        """The probability that the message is hard, i.e. needs the large model."""
        logit = max(-_MAX_LOGIT, min(_MAX_LOGIT, self.logit(features(text, self.buckets))))
        return 1.0 / (1.0 + math.exp(-logit))


def split_heldout(texts: Sequence[str], labels: Sequence[str]) -> tuple[list[int], list[int]]:
    """Row indices of the training and held-out parts: a quarter of each label held out.

    Rows are ordered by a hash of their text, not drawn at random, so a row's side depends on
    nothing but the data and adding rows moves few others: the split is stratified and
    anyone (the tests included) recomputes it exactly.
    """
    train: list[int] = []
    heldout: list[int] = []
    for label in sorted(set(labels)):
        rows = [i for i, row_label in enumerate(labels) if row_label == label]
        rows.sort(key=lambda i: (zlib.crc32(texts[i].encode()), texts[i]))
        cut = len(rows) // 4
        heldout += rows[:cut]
        train += rows[cut:]
    return sorted(train), sorted(heldout)


def choose_threshold(hard_scores: Sequence[float], max_hard_share: float) -> float:
    """The highest line with at most `max_hard_share` of the hard scores strictly below it.

    Everything below the line goes small, so the highest such line sends the most easy
    messages small while the hard ones that go small stay within the allowance.
    """
    if not hard_scores:
        raise ValueError("choosing a threshold needs hard examples")
    allowed = math.floor(max_hard_share * len(hard_scores) + 1e-9)
    ordered = sorted(hard_scores)
    return ordered[allowed] if allowed < len(ordered) else math.inf


def routed_small_share(scores: Sequence[float], threshold: float) -> float:
    return sum(score < threshold for score in scores) / max(len(scores), 1)
