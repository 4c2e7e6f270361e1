"""Whether a turn needs outside content: a page, a search, the user's files, anything newer
than the model knows. Decided per turn from the user's newest message, before anything is
fetched, because both errors cost: a miss is a confident, stale answer; a needless retrieval
costs the listing and the call, and brings untrusted text into a context that may hold tools.

The model is the router's kind (domain/difficulty.py: hashed words and character trigrams, a
logistic regression), trained by scripts/train_retrieval.py on data/retrieval/messages.jsonl;
its threshold lets at most 5 % of the held-out messages that need retrieval go without it, and
the file records both errors on that held-out quarter."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol

from domain.difficulty import DifficultyModel


class Retrieval(enum.StrEnum):
    NEEDED = "needed"
    SKIPPED = "skipped"


class RetrievalDecider(Protocol):
    def decide(self, message: str) -> Retrieval: ...


@dataclass(frozen=True, slots=True)
class RetrievalGate:
    model: DifficultyModel

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetrievalGate:
        return cls(DifficultyModel.from_dict(data))

    def score(self, message: str) -> float:
        """The probability that the message needs outside content."""
        return self.model.score(message)

    def decide(self, message: str) -> Retrieval:
        return (
            Retrieval.NEEDED if self.score(message) >= self.model.threshold else Retrieval.SKIPPED
        )


class AlwaysRetrieve:
    """No gate: every tool the request names is offered (an operator's choice)."""

    def decide(self, message: str) -> Retrieval:
        return Retrieval.NEEDED
