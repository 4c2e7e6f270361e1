"""The prompt the citation-grammar tests on both engines decode: SmolLM2-135M copies the
marker it was shown (`[[cite:zz-9]]`) at temperature 0 on llama-server and on vLLM, so a
decode under a grammar that does not allow that id is seen to hold."""

from __future__ import annotations

import re

from domain.types import Role
from nodeagent.engine import PromptTurn

ALLOWED = ("doc-1#0", "doc-2#3")
NOT_ALLOWED = "[[cite:zz-9"
# Two worked turns: asked only to end with the marker, the small model does not copy it.
TURNS = (
    PromptTurn(Role.SYSTEM, "Answer in one sentence and end with the marker [[cite:zz-9]]."),
    PromptTurn(Role.USER, "What is water?"),
    PromptTurn(Role.ASSISTANT, "Water is a liquid [[cite:zz-9]]"),
    PromptTurn(Role.USER, "What is fire?"),
    PromptTurn(Role.ASSISTANT, "Fire is hot [[cite:zz-9]]"),
    PromptTurn(Role.USER, "What colour is the sky?"),
)
# The whole text, read as the grammar allows it: a "[" not followed by another, or a
# citation of an allowed id.
_UNDER_THE_GRAMMAR = re.compile(
    r"(?:[^\[]|\[(?!\[)|\[\[cite:(?:" + "|".join(map(re.escape, ALLOWED)) + r")\]\])*"
)


def cites_only_allowed_ids(text: str) -> bool:
    """Every `[[` in text opens a citation of an allowed id."""
    return _UNDER_THE_GRAMMAR.fullmatch(text) is not None
