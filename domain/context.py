"""Fits a conversation into the model's window on purpose instead of letting the engine cut it."""

from __future__ import annotations

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


@dataclass(frozen=True, slots=True)
class ContextBuilder:
    system: Turn
    window_tokens: int
    answer_reserve_tokens: int

    def build(self, summary: Turn | None, history: list[Turn], new: Turn) -> Prompt:
        fixed = [self.system, *([summary] if summary else [])]
        budget = (
            self.window_tokens
            - self.answer_reserve_tokens
            - new.tokens
            - sum(turn.tokens for turn in fixed)
        )
        first_kept = len(history)
        # Walk back from the newest turn and stop at the first that does not fit: keeping an
        # older turn past a dropped one would give the model a conversation with a gap in it.
        while first_kept > 0 and history[first_kept - 1].tokens <= budget:
            first_kept -= 1
            budget -= history[first_kept].tokens
        # Stable parts lead so the replica's prefix cache keeps matching turn after turn.
        return Prompt((*fixed, *history[first_kept:], new), dropped_turns=first_kept)

    def fits_alone(self, new: Turn) -> bool:
        """Whether a message fits the window with only the system prompt beside it."""
        return self.system.tokens + new.tokens + self.answer_reserve_tokens <= self.window_tokens
