"""Options that came over gRPC are checked before an engine sees them."""

from __future__ import annotations

import pytest

from domain.answer_options import AnswerOptions, ToolChoice, ToolDefinition, check
from domain.citations import MOST_IDS
from domain.errors import InvalidArgument

TOOL = ToolDefinition("weather", "", '{"type": "object"}')


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (AnswerOptions(json_schema="[1, 2]"), "options.json_schema must be a JSON object"),
        (AnswerOptions(json_schema="{nope"), "options.json_schema must be a JSON object"),
        (AnswerOptions(tools=(ToolDefinition(""),)), "every tool needs a name"),
        (
            AnswerOptions(tools=(ToolDefinition("f", "", "3"),)),
            "the parameters of tool 'f' must be a JSON object",
        ),
        (
            AnswerOptions(tools=(TOOL,), tool_choice=ToolChoice.NAMED, tool_choice_name="time"),
            "tool_choice names 'time', not a tool",
        ),
        (
            AnswerOptions(tool_choice=ToolChoice.REQUIRED),
            "tool_choice is required but there are no tools",
        ),
        (
            AnswerOptions(citation_ids=tuple(f"doc-{i}#0" for i in range(MOST_IDS + 1))),
            f"options.citation_ids holds more than {MOST_IDS} ids",
        ),
        (
            AnswerOptions(citation_ids=("doc-1#0", "two words")),
            "options.citation_ids: 'two words' is not a passage id",
        ),
        (
            AnswerOptions(citation_ids=("doc]]",)),
            "options.citation_ids: 'doc]]' is not a passage id",
        ),
        (
            AnswerOptions(citation_ids=("",)),
            "options.citation_ids: '' is not a passage id",
        ),
        (
            AnswerOptions(citation_ids=("-doc",)),
            "options.citation_ids: '-doc' is not a passage id",
        ),
        (
            AnswerOptions(citation_ids=("d" * 81,)),
            f"options.citation_ids: {'d' * 81!r} is not a passage id",
        ),
        (
            AnswerOptions(json_object=True, citation_ids=("doc-1#0",)),
            "options.citation_ids cannot go with a JSON answer",
        ),
        (
            AnswerOptions(json_schema='{"type": "object"}', citation_ids=("doc-1#0",)),
            "options.citation_ids cannot go with a JSON answer",
        ),
        (
            AnswerOptions(tools=(TOOL,), citation_ids=("doc-1#0",)),
            "options.citation_ids cannot go with tools the model may call",
        ),
        (
            AnswerOptions(
                tools=(TOOL,),
                tool_choice=ToolChoice.NAMED,
                tool_choice_name="weather",
                citation_ids=("doc-1#0",),
            ),
            "options.citation_ids cannot go with tools the model may call",
        ),
    ],
)
def test_malformed_options_are_refused_with_the_reason(options, reason) -> None:
    with pytest.raises(InvalidArgument) as refused:
        check(options)
    assert str(refused.value) == reason


def test_good_options_pass_and_say_whether_a_grammar_constrains_them() -> None:
    plain = AnswerOptions()
    schema = AnswerOptions(json_object=True, json_schema='{"type": "object"}')
    tools = AnswerOptions(tools=(TOOL,), tool_choice=ToolChoice.NAMED, tool_choice_name="weather")
    for options in (plain, schema, tools):
        check(options)
    assert [o.constrained for o in (plain, schema, tools)] == [False, True, True]
    assert not AnswerOptions(tools=(TOOL,), tool_choice=ToolChoice.NONE).constrained


def test_citation_ids_pass_alone_or_beside_tools_the_model_may_not_call() -> None:
    """A citation grammar binds only the markers: the answer is continued elsewhere like any
    text (a marker cut at the failover is the resolver's to remove)."""
    most = AnswerOptions(citation_ids=tuple(f"doc-{i}#{i}" for i in range(MOST_IDS)))
    quiet = AnswerOptions(
        tools=(TOOL,), tool_choice=ToolChoice.NONE, citation_ids=("f_1.txt#0", "a:b-c")
    )
    for options in (most, quiet):
        check(options)
        assert not options.constrained
