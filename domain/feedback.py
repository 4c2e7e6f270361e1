"""A user's rating of an answer: thumbs up or down with an optional short comment. Only the
user's own answers are rated, once each (rating again replaces the rating), and the rating
counts towards the version that served the answer (the online scores of a rollout)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from domain.errors import InvalidArgument
from domain.types import Tier

# Room for a sentence or two of why; a longer text is an essay the ratings table should not
# hold per message.
MAX_COMMENT_CHARS = 2000


class Rating(StrEnum):
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class RatedAnswer:
    """One user's rating of one answer, as a gateway tells the scheduler's online scores: a
    later rating of the same answer replaces it there, so each answer counts once."""

    user_id: str
    message_id: str
    version: str
    tier: Tier
    rating: Rating


def check_comment(comment: str) -> None:
    if len(comment) > MAX_COMMENT_CHARS:
        raise InvalidArgument(
            f"a comment is at most {MAX_COMMENT_CHARS} characters (this one is {len(comment)})"
        )
