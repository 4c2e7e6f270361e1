"""A document cut into passages: the units file_search finds and an answer cites
(domain/citations.py). A passage is short enough that a search result of a few of them fits
the window beside the conversation, and ends where the text does (a paragraph, else a
sentence, else a blank) so it reads whole when it is quoted alone."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def passages(text: str, most_chars: int) -> list[str]:
    """The text's passages in order, each at most `most_chars` characters, blank-only parts
    dropped; paragraphs that fit together share a passage."""
    if most_chars < 1:
        raise ValueError("most_chars must be at least 1")
    pieces = [piece for paragraph in re.split(r"\n\s*\n", text)
              for piece in _fitted(paragraph.strip(), most_chars)]  # fmt: skip
    joined: list[str] = []
    for piece in pieces:
        if joined and len(joined[-1]) + 2 + len(piece) <= most_chars:
            joined[-1] += "\n\n" + piece
        else:
            joined.append(piece)
    return joined


def _fitted(paragraph: str, most_chars: int) -> list[str]:
    """A paragraph in pieces that fit: whole, else sentences gathered, else cut at blanks."""
    if not paragraph:
        return []
    if len(paragraph) <= most_chars:
        return [paragraph]
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(paragraph):
        for part in _cut(sentence, most_chars):
            if pieces and len(pieces[-1]) + 1 + len(part) <= most_chars:
                pieces[-1] += " " + part
            else:
                pieces.append(part)
    return pieces


def _cut(sentence: str, most_chars: int) -> list[str]:
    parts = []
    while len(sentence) > most_chars:
        blank = sentence.rfind(" ", 0, most_chars + 1)
        at = blank if blank > 0 else most_chars
        parts.append(sentence[:at].rstrip())
        sentence = sentence[at:].lstrip()
    if sentence:
        parts.append(sentence)
    return parts
