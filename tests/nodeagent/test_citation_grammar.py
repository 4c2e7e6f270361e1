"""The citation grammar's text, and the field each engine's request carries it in. Whether the
engines decode under it: tests/nodeagent/test_llamacpp.py and test_vllm.py."""

from __future__ import annotations

import pytest

from chat.v1 import node_service_pb2
from domain.answer_options import AnswerOptions, ToolChoice, ToolDefinition
from infra.convert import options_from_pb, options_to_pb
from nodeagent import chat_wire
from nodeagent.citation_grammar import Engine, grammar, request_fields
from nodeagent.convert import request_from_pb

RULES = 'root ::= (plain | cite)* "["?\nplain ::= [^\\x5B] | "[" [^\\x5B]\n'


def test_the_grammar_allows_double_brackets_only_as_a_citation_of_the_ids() -> None:
    assert grammar(["doc-1#0", "doc-2#3"]) == (
        RULES + 'cite ::= "[[cite:" ("doc-1#0" | "doc-2#3") "]]"\n'
    )


def test_awkward_characters_are_escaped_for_every_gbnf_reader() -> None:
    # Quotes, backslashes and named controls by backslash; another control character as a
    # literal of its own, since xgrammar would read a hex digit after it into the escape;
    # a repeated id once; other characters as they are.
    ids = ['a"b', "c\\d", "e\nf\tg\rh", "x\x01" + "0", "é€", "doc-1#0", "doc-1#0"]
    assert grammar(ids) == RULES + (
        'cite ::= "[[cite:" ("a\\"b" | "c\\\\d" | "e\\nf\\tg\\rh" | "x" "\\x01" "0" | "é€" '
        '| "doc-1#0") "]]"\n'
    )
    assert '"\\x7F"' in grammar(["\x7f"])


def test_a_grammar_needs_an_id() -> None:
    with pytest.raises(ValueError, match="at least one id"):
        grammar([])


def test_each_engine_gets_the_grammar_in_its_own_field() -> None:
    options = AnswerOptions(citation_ids=("doc-1#0",))
    text = grammar(["doc-1#0"])
    assert request_fields({"seed": 1}, options, Engine.LLAMA_SERVER) == {"seed": 1, "grammar": text}
    assert request_fields({}, options, Engine.VLLM) == {"structured_outputs": {"grammar": text}}


def test_option_fields_carry_the_grammar_only_when_citation_ids_are_set() -> None:
    for engine in Engine:
        assert chat_wire.option_fields(AnswerOptions(), engine) == {}
        plain = chat_wire.option_fields(AnswerOptions(seed=3, stop=("x",)), engine)
        assert plain == {"seed": 3, "stop": ["x"]}
    cited = AnswerOptions(seed=3, citation_ids=("doc-1#0", "doc-2#3"))
    text = grammar(["doc-1#0", "doc-2#3"])
    assert chat_wire.option_fields(cited, Engine.LLAMA_SERVER) == {"seed": 3, "grammar": text}
    assert chat_wire.option_fields(cited, Engine.VLLM) == {
        "seed": 3,
        "structured_outputs": {"grammar": text},
    }
    # Tools the model may not call still go in the prompt beside the grammar.
    tools = (ToolDefinition("search", "", '{"type": "object"}'),)
    quiet = AnswerOptions(tools=tools, tool_choice=ToolChoice.NONE, citation_ids=("a",))
    fields = chat_wire.option_fields(quiet)
    assert fields["tool_choice"] == "none" and fields["grammar"] == grammar(["a"])


def test_the_ids_reach_the_node_agents_request_over_the_wire() -> None:
    options = AnswerOptions(seed=2, citation_ids=("doc-1#0", "doc-2#3"))
    message = options_to_pb(options)
    assert list(message.citation_ids) == ["doc-1#0", "doc-2#3"]
    assert options_from_pb(message) == options
    start = node_service_pb2.GenerateStart(request_id="r", max_tokens=5, options=message)
    assert request_from_pb(start).options.citation_ids == ("doc-1#0", "doc-2#3")
    assert options_from_pb(options_to_pb(AnswerOptions())).citation_ids == ()
