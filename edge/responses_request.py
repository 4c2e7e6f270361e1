"""A POST /v1/responses body, checked: every field is honoured, or accepted only at the value
that asks for nothing (clients send defaults), and refused with a 400 naming it (`param`)
otherwise. A field OpenAI does not define is refused too, as OpenAI does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edge.convert import MODEL_CHOICES, CallerTurn
from edge.openai_api import OpenAIError
from edge.responses_functions import Functions, function_turn, is_function_item, parse_functions
from edge.responses_tool_input import PlatformToolAsk, is_tool_item, parse_tools, tool_item
from infra.convert import AUTO_MODEL

# Fields accepted only at these values: each asks for something the platform does not do.
DEFAULT_ONLY: dict[str, tuple[Any, ...]] = {
    "temperature": (None, 1, 1.0),
    "top_p": (None, 1, 1.0),
    "parallel_tool_calls": (None, True, False),
    "metadata": (None, {}),
    # The platform fits a stored conversation into the window by leaving its oldest turns
    # out, which is OpenAI's "auto".
    "truncation": (None, "auto"),
    "text": (None, {"format": {"type": "text"}}),
    "reasoning": (None, {}),
    "include": (None, []),
    "service_tier": (None, "auto", "default"),
    "top_logprobs": (None, 0),
    "max_tool_calls": (None,),
    "prompt": (None,),
    "conversation": (None,),
    "stream_options": (None, {}, {"include_obfuscation": False}),
}
# Fields that only describe the caller: accepted as strings, not acted on.
CALLER_TAGS = ("user", "safety_identifier", "prompt_cache_key")
HONOURED = (
    "model",
    "input",
    "instructions",
    "previous_response_id",
    "store",
    "stream",
    "background",
    "max_output_tokens",
    "tools",
    "tool_choice",
)
INPUT_ROLES = ("user", "system", "developer", "assistant")


@dataclass(frozen=True, slots=True)
class ResponseRequest:
    model: str
    # The turns the input gives, (role, text) in order: role user, system or assistant.
    turns: tuple[tuple[str, str], ...]
    instructions: str
    previous_response_id: str
    store: bool
    stream: bool
    background: bool
    max_output_tokens: int
    tools: tuple[PlatformToolAsk, ...] = ()
    # Every input item in order as the completion's turns (with store false): the messages,
    # and the calls and results an earlier response's items carry; and the person's
    # decisions on calls that asked for one (approval_request_id, approve).
    history: tuple[CallerTurn, ...] = ()
    approvals: tuple[tuple[str, bool], ...] = ()
    # Whether one model step may call several tools at once (OpenAI's default: it may).
    parallel_tool_calls: bool = True
    # Functions the caller runs, and which the model must call.
    functions: Functions = field(default_factory=Functions)

    @property
    def content(self) -> str:
        """The new message: the input's user turns, joined."""
        return "\n\n".join(text for role, text in self.turns if role == "user")

    @property
    def system(self) -> str:
        """instructions, then the input's system and developer turns."""
        parts = [self.instructions] + [text for role, text in self.turns if role == "system"]
        return "\n\n".join(part for part in parts if part)


def bad(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, None, param)


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(name, f"'{name}' must be a boolean")
    return value


def _string(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad(name, f"'{name}' must be a string")
    return value


def _text_of(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise bad(param, f"'{param}' must be a string or a list of text parts")
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text"):
            raise bad(f"{param}[{index}]", f"'{param}[{index}]' must be an input_text part")
        if not isinstance(part.get("text"), str):
            raise bad(f"{param}[{index}].text", f"'{param}[{index}].text' must be a string")
        texts.append(part["text"])
    return "".join(texts)


def _item(item: Any, index: int) -> tuple[str, str]:
    param = f"input[{index}]"
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        raise bad(param, f"'{param}' must be a message item (role and content)")
    role = item.get("role")
    if role not in INPUT_ROLES:
        raise bad(f"{param}.role", f"'{param}.role' must be one of {', '.join(INPUT_ROLES)}")
    text = _text_of(item.get("content"), f"{param}.content")
    return ("system" if role == "developer" else role, text)


@dataclass(slots=True)
class _Input:
    turns: list[tuple[str, str]] = field(default_factory=list)
    history: list[CallerTurn] = field(default_factory=list)
    approvals: list[tuple[str, bool]] = field(default_factory=list)
    tool_items: bool = False
    # The calls of function_call items: their results are the caller's to send, not a
    # person's decision.
    function_calls: set[str] = field(default_factory=set)


def _input(raw: Any) -> _Input:
    read = _Input()
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise bad("input", "'input' must be a string or a non-empty list of message items")
    for index, item in enumerate(raw):
        if is_function_item(item):
            read.tool_items = True
            function_turn(item, f"input[{index}]", read.history)
            read.function_calls.update(c.call_id for c in read.history[-1].tool_calls)
            continue
        if not is_tool_item(item):
            role, text = _item(item, index)
            read.turns.append((role, text))
            read.history.append(CallerTurn(role, text))
            continue
        read.tool_items = True
        found = tool_item(item, f"input[{index}]")
        if isinstance(found, list):
            read.history.extend(found)
        elif found is not None:
            read.approvals.append(found)
    if not any(role == "user" and text.strip() for role, text in read.turns):
        raise bad("input", "'input' must hold a user message with some text")
    _check_decisions(read)
    return read


def _check_decisions(read: _Input) -> None:
    """Every decision answers a call the input asked about, and every call the input asked
    about (one no result follows) has its decision."""
    answered = {turn.tool_call_id for turn in read.history if turn.role == "tool"}
    asked = [call.call_id for turn in read.history for call in turn.tool_calls
             if call.call_id not in answered]  # fmt: skip
    decided = [call_id for call_id, _ in read.approvals]
    for call_id in asked:
        if call_id in read.function_calls:
            raise bad("input", f"the function call {call_id[:80]!r} has no function_call_output "
                      "item after it")  # fmt: skip
    for call_id in decided:
        if call_id not in asked:
            raise bad("input", f"the input decides on {call_id[:80]!r}, which it did not ask "
                      "about (an mcp_approval_request item)")  # fmt: skip
    for call_id in asked:
        if call_id not in decided:
            raise bad("input", f"the input asks about {call_id[:80]!r} and brings no decision "
                      "(an mcp_approval_response item)")  # fmt: skip


def _max_output_tokens(body: dict[str, Any]) -> int:
    value = body.get("max_output_tokens")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise bad("max_output_tokens", "'max_output_tokens' must be an integer from 1")
    return value


def _check_the_rest(body: dict[str, Any]) -> None:
    for name, value in body.items():
        if name in HONOURED:
            continue
        if name in CALLER_TAGS:
            if value is not None and not isinstance(value, str):
                raise bad(name, f"'{name}' must be a string")
            continue
        if name not in DEFAULT_ONLY:
            raise bad(name, f"unrecognized request argument supplied: {name}")
        if value not in DEFAULT_ONLY[name]:
            raise bad(name, f"'{name}' is supported only at its default value")


def parse(body: dict[str, Any]) -> ResponseRequest:
    _check_the_rest(body)
    model = body.get("model", AUTO_MODEL)
    if not isinstance(model, str):
        raise bad("model", "'model' must be a string")
    if model not in MODEL_CHOICES:
        raise OpenAIError(404, f"the model {model!r} does not exist; use auto, small or large",
                          "model_not_found", "model")  # fmt: skip
    read = _input(body.get("input"))
    if read.tool_items and _flag(body, "store", True):
        raise bad("input", "an earlier response's tool items are carried only with 'store': false")
    request = ResponseRequest(
        model=model,
        turns=tuple(read.turns),
        instructions=_string(body, "instructions"),
        previous_response_id=_string(body, "previous_response_id"),
        store=_flag(body, "store", True),
        stream=_flag(body, "stream", False),
        background=_flag(body, "background", False),
        max_output_tokens=_max_output_tokens(body),
        # "none": the model calls no tool, so none is run or listed.
        tools=() if body.get("tool_choice") == "none" else parse_tools(body, functions=True),
        functions=parse_functions(body),
        history=tuple(read.history),
        approvals=tuple(read.approvals),
        parallel_tool_calls=body.get("parallel_tool_calls") is not False,
    )
    return _consistent(request)


def _consistent(request: ResponseRequest) -> ResponseRequest:
    if request.functions.tools and request.tools:
        raise bad("tools", "a response runs either the platform's tools or functions the caller "
                  "runs, not both")  # fmt: skip
    if request.functions.tools and request.store:
        raise bad("store", "function tools are served with 'store': false (a stored "
                  "conversation keeps messages, not calls): send 'store': false and the "
                  "history in 'input'")  # fmt: skip
    if request.background and not request.store:
        raise bad("background", "a background response must be stored: drop 'store': false")
    if not request.store and request.previous_response_id:
        # The history is read from the stored conversation, and the new turn would be stored.
        raise bad("store", "'previous_response_id' continues a stored conversation: "
                  "drop 'store': false")  # fmt: skip
    if request.store and any(role == "assistant" for role, _ in request.turns):
        # A stored response continues a stored conversation, whose history is the
        # platform's: earlier turns come from previous_response_id.
        raise bad("input", "with 'store' true the input holds the new message only; earlier "
                  "turns come from 'previous_response_id' (or send 'store': false)")  # fmt: skip
    if not request.store and request.turns[-1][0] != "user":
        raise bad("input", "the input's last item must be the user's")
    return request
