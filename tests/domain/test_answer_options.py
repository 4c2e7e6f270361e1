"""Options that came over gRPC are checked before an engine sees them."""

from __future__ import annotations

import pytest

from domain.answer_options import AnswerOptions, ToolChoice, ToolDefinition, check
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
