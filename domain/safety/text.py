"""Text folding for the safety rules, and the cheap token estimate the stream check counts in.

Both run on the gateway's hot path, so neither uses the model's tokenizer."""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

# Invisible format characters (zero-width space/joiners, bidi marks, soft hyphen, BOM...):
# inserted between letters they hide a phrase from a plain match while rendering identically.
_FORMAT_RANGES = (
    (0x00AD, 0x00AD),
    (0x061C, 0x061C),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x206A, 0x206F),
    (0xFEFF, 0xFEFF),
)
_FORMAT_CLASS = "".join(f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in _FORMAT_RANGES)

# One estimated token: a run of at most 16 word characters, or one visible symbol. Capping the
# run keeps a growing word cheap to re-read and roughly follows how BPE splits long words;
# invisible format characters count for nothing, so padding with them cannot stretch a phrase.
TOKEN = re.compile(rf"\w{{1,16}}|[^\w\s{_FORMAT_CLASS}]")

# Combining marks of the Latin, Greek and Cyrillic scripts (accents, umlauts, overlays): after
# NFKD splits them off their letters, dropping them leaves the plain letter. A regex does it at C
# speed, where checking unicodedata.combining() per character would not.
_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")

# Three one-character words in a row, in Folded.padded form: the sign of a spelled-out word
# ("b o m b", "b.o.m.b"). Searching for it is cheap, so the joining pass runs only when needed.
_SPELLED = re.compile(r" \S \S \S ")
_MIN_SPELLED_RUN = 3  # fewer would join ordinary pairs such as "a I"


@dataclass(frozen=True, slots=True)
class Folded:
    """One text as the rules see it: lowercase letters and digits, look-alikes folded."""

    words: tuple[str, ...]
    # The words between single spaces, with a space at each end, so " nerve agent" finds the
    # phrase at word starts only.
    padded: str
    vocabulary: frozenset[str]
    # Indices of words joined from spelled-out letters. Their inner word boundaries are lost
    # ("a n u c l e a r" -> "anuclear"), so rules also look for terms inside them.
    spelled: tuple[int, ...]
    # Every letter and digit with nothing between: defeats any separator an evasion inserts.
    squashed: str

    def word_indices(self, padded_offsets: list[int]) -> list[int]:
        """The indices of the words starting just after the spaces at these sorted offsets,
        counting spaces once across all of them rather than from the start for each."""
        indices: list[int] = []
        index, counted_to = -1, 0
        for offset in padded_offsets:
            index += self.padded.count(" ", counted_to, offset + 1)
            counted_to = offset + 1
            indices.append(index)
        return indices


class Folder:
    """Folds text so that case, Unicode look-alikes, leetspeak and inserted spacing or
    punctuation do not change what a rule matches. Built once from the blocklist's char map."""

    def __init__(self, char_map: Mapping[str, str]) -> None:
        # ASCII goes through one byte table, at C speed whatever else the text holds: capitals
        # become small letters, punctuation and control characters word breaks, and leetspeak
        # digits the letters they stand for. UTF-8 bytes of other characters are all >= 0x80,
        # so the table cannot touch them.
        ascii_map = {c: " " for c in string.punctuation + "".join(map(chr, range(32)))}
        ascii_map.update({c: c.lower() for c in string.ascii_uppercase})
        other_map: dict[str, str] = {}
        for lo, hi in _FORMAT_RANGES:  # invisible characters vanish
            other_map.update(dict.fromkeys(map(chr, range(lo, hi + 1)), ""))
        for key, value in char_map.items():
            if len(key) != 1 or len(value) != 1 or not value.isascii():
                raise ValueError(f"char_map maps one character to one ASCII one: {key!r}")
            (ascii_map if key.isascii() else other_map)[key] = value
        table = bytearray(range(256))
        for key, value in ascii_map.items():
            table[ord(key)] = ord(value)
        self._ascii_table = bytes(table)
        self._other_map = other_map

    def fold(self, text: str) -> Folded:
        if not text.isascii():  # most answers are ASCII and skip these costlier passes
            text = _COMBINING.sub("", unicodedata.normalize("NFKD", text.casefold()))
            text = _NON_ASCII.sub(self._fold_non_ascii, text)
        words = text.encode().translate(self._ascii_table).decode().split()
        padded = f" {' '.join(words)} "
        spelled: list[int] = []
        if _SPELLED.search(padded):
            words, spelled = _join_spelled(words)
            padded = f" {' '.join(words)} "
        return Folded(
            tuple(words), padded, frozenset(words), tuple(spelled), padded.replace(" ", "")
        )

    def _fold_non_ascii(self, run: re.Match[str]) -> str:
        # Look-alikes become the letters they imitate; other letters and digits (any script)
        # stay; symbols ("—", "·") become word breaks. Called once per run of non-ASCII text.
        other = self._other_map
        return "".join(other.get(c, c if c.isalnum() else " ") for c in run.group())


def _join_spelled(tokens: list[str]) -> tuple[list[str], list[int]]:
    words: list[str] = []
    spelled: list[int] = []
    run: list[str] = []
    for token in [*tokens, ""]:  # the empty sentinel flushes a trailing run
        if len(token) == 1:
            run.append(token)
            continue
        if len(run) >= _MIN_SPELLED_RUN:
            spelled.append(len(words))
            words.append("".join(run))
        else:
            words.extend(run)
        run = []
        if token:
            words.append(token)
    return words, spelled
