"""The tool parts of a POST /v1/responses body, checked: the tools the platform runs
(`tools`: OpenAI's `mcp` tool, the operator's own by type) with their approval rules, and the
input items a stateless response carries back from an earlier one (OpenAI's `mcp_call`,
`mcp_approval_request` and `mcp_approval_response`; the operator's `<name>_call`), which
become the history's calls and results and the person's decisions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.answer_options import ToolCall
from edge.convert import CallerTurn
from edge.openai_api import OpenAIError

MCP_FIELDS = frozenset(
    {"type", "server_label", "server_url", "headers", "allowed_tools", "require_approval",
     "server_description"}
)  # fmt: skip
OPERATOR_FIELDS = frozenset({"type", "require_approval"})
MOST_TOOLS = 16
# Items of an earlier response that a later one's input may carry.
CALL_ITEM = "mcp_call"
APPROVAL_REQUEST = "mcp_approval_request"
APPROVAL_RESPONSE = "mcp_approval_response"
LISTING = "mcp_list_tools"


def bad(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, None, param)


@dataclass(frozen=True, slots=True)
class PlatformToolAsk:
    """A tool the platform runs for the response: a remote MCP server (OpenAI's `mcp` tool),
    or one of the operator's own tools, named by its type (`{"type": "send_email"}`), as
    OpenAI names its hosted tools. require_approval: each call waits for a person's decision
    unless named in approval_exceptions (and the other way round)."""

    server_label: str = ""
    server_url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    allowed_tools: tuple[str, ...] = ()
    name: str = ""
    require_approval: bool = False
    approval_exceptions: tuple[str, ...] = ()


def _strings(value: Any, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise bad(param, f"'{param}' must be a list of names")
    return tuple(value)


def _approval(value: Any, default: str, param: str) -> tuple[bool, tuple[str, ...]]:
    """OpenAI's require_approval: "always", "never", or {"always": {"tool_names": [...]},
    "never": {"tool_names": [...]}} (the tools named go that way, the others ask)."""
    value = default if value is None else value
    if value in ("always", "never"):
        return value == "always", ()
    if not isinstance(value, dict) or not value or set(value) - {"always", "never"}:
        raise bad(param, f'\'{param}\' must be "always", "never" or a filter of tool names')
    names = {}
    for way, rule in value.items():
        if not isinstance(rule, dict) or set(rule) - {"tool_names"}:
            raise bad(f"{param}.{way}", f"'{param}.{way}' must be {{\"tool_names\": [...]}}")
        names[way] = _strings(rule.get("tool_names", []), f"{param}.{way}.tool_names")
    if "never" in names:  # the named tools run at once, every other one asks
        return True, names["never"]
    return False, names["always"]


def _mcp_tool(tool: dict[str, Any], param: str, default_approval: str) -> PlatformToolAsk:
    unknown = sorted(set(tool) - MCP_FIELDS)
    if unknown:
        raise bad(f"{param}.{unknown[0]}", f"'{param}.{unknown[0]}' is not an mcp tool field")
    label = tool.get("server_label")
    if not isinstance(label, str) or not label:
        raise bad(f"{param}.server_label", f"'{param}.server_label' must be a non-empty string")
    url = tool.get("server_url", "")
    if not isinstance(url, str):
        raise bad(f"{param}.server_url", f"'{param}.server_url' must be a string")
    headers = tool.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise bad(f"{param}.headers", f"'{param}.headers' must map names to strings")
    allowed = tool.get("allowed_tools")
    if isinstance(allowed, dict):  # OpenAI's filter form: {"tool_names": [...]}
        allowed = allowed.get("tool_names")
    names = () if allowed is None else _strings(allowed, f"{param}.allowed_tools")
    ask, exceptions = _approval(tool.get("require_approval"), default_approval,
                                f"{param}.require_approval")  # fmt: skip
    return PlatformToolAsk(label, url, tuple(sorted(headers.items())), names, "", ask,
                           exceptions)  # fmt: skip


def _operator_tool(tool: dict[str, Any], kind: str, param: str) -> PlatformToolAsk:
    unknown = sorted(set(tool) - OPERATOR_FIELDS)
    if unknown:
        option = f"{param}.{unknown[0]}"
        raise bad(option, f"'{option}': the platform's {kind!r} tool takes no such option")
    # The operator's tools run at once unless the request asks to approve each call.
    ask, exceptions = _approval(tool.get("require_approval"), "never",
                                f"{param}.require_approval")  # fmt: skip
    return PlatformToolAsk(name=kind, require_approval=ask, approval_exceptions=exceptions)


def parse_tools(
    body: dict[str, Any], mcp_approval: str = "always", functions: bool = False
) -> tuple[PlatformToolAsk, ...]:
    """mcp_approval: a remote server's calls' default, OpenAI's "always" for the Responses
    API; the conversation API, which has no approvals, says "never". functions: the API
    also takes functions the caller runs (they are left for edge/responses_functions.py),
    else one is refused."""
    raw = body.get("tools")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise bad("tools", "'tools' must be a list of tools")
    platform = [t for t in raw if not (isinstance(t, dict) and t.get("type") == "function")]
    if len(platform) > MOST_TOOLS:
        raise bad("tools", f"'tools' may hold at most {MOST_TOOLS} of the platform's tools")
    tools = []
    for index, tool in enumerate(raw):
        param = f"tools[{index}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str) or not tool["type"]:
            raise bad(f"{param}.type", f"'{param}' must be a tool object with a type")
        kind = tool["type"]
        if kind == "function":
            if functions:
                continue  # the caller's to run: edge/responses_functions.py
            raise bad(f"{param}.type", "function tools are served by /v1/chat/completions and "
                      "the Responses API; here the platform's tools run (mcp, the "
                      "operator's)")  # fmt: skip
        if kind == "mcp":
            tools.append(_mcp_tool(tool, param, mcp_approval))
        else:
            tools.append(_operator_tool(tool, kind, param))
    return tuple(tools)


def is_tool_item(item: Any) -> bool:
    kind = item.get("type") if isinstance(item, dict) else None
    return isinstance(kind, str) and (
        kind in (APPROVAL_REQUEST, APPROVAL_RESPONSE, LISTING) or kind.endswith("_call")
    )


def _text(item: dict[str, Any], key: str, param: str, default: str | None = None) -> str:
    value = item.get(key, default)
    if not isinstance(value, str) or (default is None and not value):
        raise bad(f"{param}.{key}", f"'{param}.{key}' must be a non-empty string")
    return value


def tool_item(item: dict[str, Any], param: str) -> list[CallerTurn] | tuple[str, bool] | None:
    """One earlier response's item: the turns it stands for (a call and its result, or a
    call waiting for a decision), a decision (approval_request_id, approve), or None (a
    listing: the servers are asked again)."""
    kind = item["type"]
    if kind == LISTING:
        return None
    if kind == APPROVAL_RESPONSE:
        approve = item.get("approve")
        if not isinstance(approve, bool):
            raise bad(f"{param}.approve", f"'{param}.approve' must be a boolean")
        return _text(item, "approval_request_id", param), approve
    call = ToolCall(_text(item, "id", param), _text(item, "name", param),
                    _text(item, "arguments", param, "{}"))  # fmt: skip
    asked = CallerTurn("assistant", "", (call,))
    if kind == APPROVAL_REQUEST:
        return [asked]
    output, error = item.get("output"), item.get("error")
    if error:
        result = f"The tool failed: {error}"
    elif isinstance(output, str) and output:
        result = output
    else:
        raise bad(f"{param}.output", f"'{param}' is a call with no output or error")
    return [asked, CallerTurn("tool", str(result), tool_call_id=call.call_id)]
