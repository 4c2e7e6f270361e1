"""Personal memory's policy: what an entry may hold, how many a user keeps, which of them enter
a turn, and the block they make in the prompt (docs/decisions.md, "Memory is written on
purpose").

An entry is written only by a deliberate step: the user's own list (/v1/memories) or the
model's `remember` call. A turn reads only the entries lexically relevant to its message, at
most the tier's k, and none that has aged (unless the user pinned it), so a stale or
unrelated entry does not follow the user into every conversation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from domain.errors import InvalidArgument
from domain.types import Tier

# Letters and digits only: a term reaches the stores' full-text query languages (FTS5's
# MATCH, PostgreSQL's to_tsquery), where anything else is syntax.
_WORD = re.compile(r"[^\W_]+")
# Words that say nothing of a subject: a message sharing only these with an entry is not
# about it. The stores' own stemmers do the rest.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself no nor not now of off on once only or other our
    ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your yours yourself
    yourselves please tell know remember like get got also one let lets much many""".split()
)
# Terms past this are dropped: a long message is about its first words as much as its last,
# and each term is one more OR in the index's query.
MAX_TERMS = 32


@dataclass(frozen=True, slots=True)
class MemoryPolicy:
    # Entries that enter one turn, per tier (0: none read).
    top_k: Mapping[Tier, int]
    # An entry not written for this long is aged: kept and listed, never retrieved unless
    # pinned. 0: entries never age.
    max_age_s: float
    max_chars: int = 500
    max_entries: int = 200

    def k(self, tier: Tier) -> int:
        return self.top_k.get(tier, 0)

    def fresh_since(self, now: float) -> float:
        """The oldest write time an unpinned entry may have and still be retrieved."""
        return now - self.max_age_s if self.max_age_s > 0 else float("-inf")

    def aged(self, updated_at: float, pinned: bool, now: float) -> bool:
        return not pinned and updated_at < self.fresh_since(now)

    def checked_text(self, text: str) -> str:
        """The entry's text as kept (trimmed); InvalidArgument when it cannot be kept."""
        kept = text.strip()
        if not kept:
            raise InvalidArgument("a memory needs some text")
        if len(kept) > self.max_chars:
            raise InvalidArgument(f"a memory holds at most {self.max_chars} characters "
                                  f"(this one has {len(kept)})")  # fmt: skip
        return kept


def search_terms(text: str) -> list[str]:
    """The message's words that may name a subject, lowercased, each once, in order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if len(word) > 1 and word not in STOP_WORDS:
            seen.setdefault(word, None)
    return list(seen)[:MAX_TERMS]


MEMORY_HEADER = (
    "Things the user asked you to remember (from earlier conversations; use them only where "
    "they bear on this one):"
)


def memory_block(texts: Iterable[str]) -> str:
    """The prompt's memory turn. The caller orders the entries by when they were written,
    not by score: the same entries make the same bytes turn after turn, so the replica's
    prefix cache keeps the conversation after them."""
    lines = [f"- {' '.join(text.split())}" for text in texts]
    return "\n".join([MEMORY_HEADER, *lines]) if lines else ""
