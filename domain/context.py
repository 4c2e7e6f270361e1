"""Fits a conversation into the model's window on purpose instead of letting the engine cut it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.types import Turn


@dataclass(frozen=True, slots=True)
class Prompt:
    turns: tuple[Turn, ...]
    # Older turns left out; compaction folds them into the summary later.
    dropped_turns: int

    @property
    def tokens(self) -> int:
        return sum(turn.tokens for turn in self.turns)


SEGMENT_TONE_HEADER = "How to answer:"
SEGMENT_FACTS_HEADER = "About the user:"


def segment_text(tone: str, facts: Sequence[str]) -> str:
    """The segment's turn (its tone template, then its profile facts); '' for neither."""
    parts = [f"{SEGMENT_TONE_HEADER}\n{tone.strip()}"] if tone.strip() else []
    kept = [fact.strip() for fact in facts if fact.strip()]
    if kept:
        parts.append("\n".join([SEGMENT_FACTS_HEADER, *(f"- {fact}" for fact in kept)]))
    return "\n\n".join(parts)


@dataclass(frozen=True, slots=True)
class ContextBuilder:
    system: Turn
    window_tokens: int
    answer_reserve_tokens: int
    # The user's segment's turn (tone template and profile facts, the operator's), kept
    # whatever else is left out: it follows the system prompt, shared by the segment.
    segment: Turn | None = None

    def build(
        self,
        summary: Turn | None,
        history: list[Turn],
        new: Turn,
        pinned: Turn | None = None,
        memories: Turn | None = None,
    ) -> Prompt:
        """System prompt, the segment's turn, the user's memories, summary, the newest turns
        that fit, pinned constraints (the task re-anchored after a compaction), new message.

        Stable to volatile: the system prompt (and the tools an engine renders with it) is
        every user's, so it leads and its cache is shared; the segment's turn is every user's
        of the segment; the memory block is this user's, then the conversation's summary and
        turns. Memories placed before the system prompt
        would make every user's copy of it private in the replica's cache.

        Pinned constraints sit just before the new message: recall is highest at the end of
        a prompt, and the middle is where a turn-2 constraint gets lost. They are
        re-read every turn, which costs their few tokens of prefill each time.
        """
        summary, pinned, memories = self._extras_that_fit(summary, pinned, memories, new)
        leading = [self.system, *[turn for turn in (self.segment, memories, summary) if turn]]
        trailing = [*([pinned] if pinned else []), new]
        budget = (
            self.window_tokens
            - self.answer_reserve_tokens
            - sum(turn.tokens for turn in (*leading, *trailing))
        )
        first_kept = len(history)
        # Walk back from the newest turn and stop at the first that does not fit: keeping an
        # older turn past a dropped one would give the model a conversation with a gap in it.
        while first_kept > 0 and history[first_kept - 1].tokens <= budget:
            first_kept -= 1
            budget -= history[first_kept].tokens
        # Stable parts lead so the replica's prefix cache keeps matching turn after turn.
        return Prompt((*leading, *history[first_kept:], *trailing), dropped_turns=first_kept)

    def _extras_that_fit(
        self, summary: Turn | None, pinned: Turn | None, memories: Turn | None, new: Turn
    ) -> tuple[Turn | None, Turn | None, Turn | None]:
        """Summary, pinned turn and memory block, less what the window cannot hold beside the
        new message. The memories go first (notes from other conversations), then the
        summary (a digest of this one); pinned turns are the user's own rules."""
        room = self.window_tokens - self.answer_reserve_tokens - self._head_tokens() - new.tokens
        pinned_tokens = pinned.tokens if pinned else 0
        summary_tokens = summary.tokens if summary else 0
        if memories is not None and memories.tokens + summary_tokens + pinned_tokens > room:
            memories = None
        if summary is not None and summary.tokens + pinned_tokens > room:
            summary = None
        if pinned is not None and pinned_tokens > room:
            pinned = None
        return summary, pinned, memories

    def fits_alone(self, new: Turn) -> bool:
        """Whether a message fits the window with only the system prompt (and the segment's
        turn) beside it."""
        return self._head_tokens() + new.tokens + self.answer_reserve_tokens <= self.window_tokens

    def _head_tokens(self) -> int:
        return self.system.tokens + (self.segment.tokens if self.segment else 0)
