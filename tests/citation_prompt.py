"""The prompts the citation-grammar tests on both engines decode. TURNS: SmolLM2-135M copies
the marker it was shown (`[[cite:zz-9]]`) at temperature 0 on llama-server and on vLLM, so a
decode under a grammar that does not allow that id is seen to hold. ANSWER_STEP_TURNS: the
tool loop's answer step after a file_search (gateway/turn_citations.py), whose history holds
a tool call and its result while the request offers no tools."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from domain.answer_options import ToolCall
from domain.citations import cite
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

# The answer step: the question, the model's file_search call, and the search's result as
# gateway/files.py's search_result writes it.
PASSAGE_ID = "file-0123456789abcdef01234567#0"
_QUESTION = "When does the gateway ship, according to my notes?"
_SEARCH = ToolCall("call_0_search01", "file_search", json.dumps({"query": _QUESTION}))
ANSWER_STEP_TURNS = (
    PromptTurn(Role.SYSTEM, "You are a careful assistant. Cite passages you use."),
    PromptTurn(Role.USER, _QUESTION),
    PromptTurn(Role.ASSISTANT, "", tool_calls=(_SEARCH,)),
    PromptTurn(
        Role.TOOL,
        "Passages from the user's files. To use one, cite it by writing its marker, exactly "
        f"as shown, after the sentence it supports.\n\n{cite(PASSAGE_ID)} (notes.txt, passage 1)"
        "\nThe gateway ships in May, after the load tests pass.",
        tool_call_id=_SEARCH.call_id,
    ),
)


def cites_only_allowed_ids(text: str, allowed: Sequence[str] = ALLOWED) -> bool:
    """Every `[[` in text opens a citation of an allowed id: the whole text, read as the
    grammar allows it, is "[" not followed by another, or a citation of an allowed id."""
    ids = "|".join(map(re.escape, allowed))
    return re.fullmatch(r"(?:[^\[]|\[(?!\[)|\[\[cite:(?:" + ids + r")\]\])*", text) is not None
