"""Message and conversation ids as the gateway accepts them, and the id an answer is stored
under. Apart from the pipeline so that the servicers can check an id without loading it."""

from __future__ import annotations

import re

from domain.errors import InvalidArgument

ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ANSWER_SUFFIX = ".answer"
# A message may follow a user's message or an answer, whose id is the question's plus a suffix.
PARENT_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}(\.answer)?$")


def check_id(name: str, value: str) -> None:
    if not ID_PATTERN.match(value):
        raise InvalidArgument(f"{name} must be 1-64 characters of A-Z, a-z, 0-9, '_' or '-'")


def check_parent_id(value: str) -> None:
    """'' (the conversation's newest message) or a message id, with or without the suffix."""
    if value and not PARENT_PATTERN.match(value):
        raise InvalidArgument("parent id must be a message id, or one followed by '.answer'")
