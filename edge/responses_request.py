"""A POST /v1/responses body, checked: every field is honoured, or accepted only at the value
that asks for nothing (clients send defaults), and refused with a 400 naming it (`param`)
otherwise. A field OpenAI does not define is refused too, as OpenAI does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edge.convert import MODEL_CHOICES
from edge.openai_api import OpenAIError
from infra.convert import AUTO_MODEL

# Fields accepted only at these values: each asks for something the platform does not do.
DEFAULT_ONLY: dict[str, tuple[Any, ...]] = {
    "temperature": (None, 1, 1.0),
    "top_p": (None, 1, 1.0),
    "tool_choice": (None, "auto", "none"),
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
)
INPUT_ROLES = ("user", "system", "developer", "assistant")
MCP_FIELDS = frozenset(
    {"type", "server_label", "server_url", "headers", "allowed_tools", "require_approval",
     "server_description"}
)  # fmt: skip
MOST_TOOLS = 16


@dataclass(frozen=True, slots=True)
class PlatformToolAsk:
    """A tool the platform runs for the response: a remote MCP server (OpenAI's `mcp` tool),
    or one of the operator's own tools, named by its type (`{"type": "send_email"}`), as
    OpenAI names its hosted tools."""

    server_label: str = ""
    server_url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    allowed_tools: tuple[str, ...] = ()
    name: str = ""


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
    # Whether one model step may call several tools at once (OpenAI's default: it may).
    parallel_tool_calls: bool = True

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


def _turns(raw: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(raw, str):
        turns: tuple[tuple[str, str], ...] = (("user", raw),)
    elif isinstance(raw, list) and raw:
        turns = tuple(_item(item, index) for index, item in enumerate(raw))
    else:
        raise bad("input", "'input' must be a string or a non-empty list of message items")
    if not any(role == "user" and text.strip() for role, text in turns):
        raise bad("input", "'input' must hold a user message with some text")
    return turns


def _max_output_tokens(body: dict[str, Any]) -> int:
    value = body.get("max_output_tokens")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise bad("max_output_tokens", "'max_output_tokens' must be an integer from 1")
    return value


def _strings(value: Any, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise bad(param, f"'{param}' must be a list of names")
    return tuple(value)


def _mcp_tool(tool: dict[str, Any], param: str) -> PlatformToolAsk:
    unknown = sorted(set(tool) - MCP_FIELDS)
    if unknown:
        raise bad(f"{param}.{unknown[0]}", f"'{param}.{unknown[0]}' is not an mcp tool field")
    label = tool.get("server_label")
    if not isinstance(label, str) or not label:
        raise bad(f"{param}.server_label", f"'{param}.server_label' must be a non-empty string")
    url = tool.get("server_url", "")
    if not isinstance(url, str):
        raise bad(f"{param}.server_url", f"'{param}.server_url' must be a string")
    # The platform cannot yet wait for a person's approval of a call (OpenAI's default is to
    # ask): a request must say that its calls run without one.
    if tool.get("require_approval") != "never":
        raise bad(f"{param}.require_approval", "approvals of tool calls are not supported yet: "
                  f"set '{param}.require_approval' to \"never\"")  # fmt: skip
    headers = tool.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise bad(f"{param}.headers", f"'{param}.headers' must map names to strings")
    allowed = tool.get("allowed_tools")
    if isinstance(allowed, dict):  # OpenAI's filter form: {"tool_names": [...]}
        allowed = allowed.get("tool_names")
    names = () if allowed is None else _strings(allowed, f"{param}.allowed_tools")
    return PlatformToolAsk(label, url, tuple(sorted(headers.items())), names)


def _tools(body: dict[str, Any]) -> tuple[PlatformToolAsk, ...]:
    raw = body.get("tools")
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MOST_TOOLS:
        raise bad("tools", f"'tools' must be a list of at most {MOST_TOOLS} tools")
    tools = []
    for index, tool in enumerate(raw):
        param = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str) or not kind:
            raise bad(f"{param}.type", f"'{param}' must be a tool object with a type")
        if kind == "function":
            raise bad(f"{param}.type", "function tools are served by /v1/chat/completions; the "
                      "Responses API runs the platform's tools (mcp, the operator's)")  # fmt: skip
        if kind == "mcp":
            tools.append(_mcp_tool(tool, param))
        elif set(tool) != {"type"}:
            raise bad(param, f"'{param}': the platform's {kind!r} tool takes no options")
        else:
            tools.append(PlatformToolAsk(name=kind))
    return tuple(tools)


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
    request = ResponseRequest(
        model=model,
        turns=_turns(body.get("input")),
        instructions=_string(body, "instructions"),
        previous_response_id=_string(body, "previous_response_id"),
        store=_flag(body, "store", True),
        stream=_flag(body, "stream", False),
        background=_flag(body, "background", False),
        max_output_tokens=_max_output_tokens(body),
        # "none": the model calls no tool, so none is run or listed.
        tools=() if body.get("tool_choice") == "none" else _tools(body),
        parallel_tool_calls=body.get("parallel_tool_calls") is not False,
    )
    return _consistent(request)


def _consistent(request: ResponseRequest) -> ResponseRequest:
    if request.tools and request.store:
        # The loop runs over the whole input each step; a stored conversation's history is
        # the gateway's, which this release does not yet feed through the loop.
        raise bad("tools", "a response with tools runs with 'store': false in this release")
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
