"""Every request field of `/v1/chat/completions` (the `openai` SDK's CompletionCreateParams),
and what the edge does with it: nothing is silently ignored. A field is either honoured (parsed
here or by edge/openai_format.py and edge/openai_tools.py and carried to the engine), or
accepted only at its default value, the value clients send without being asked (`n=1`,
`logprobs=false`...), and refused with a 400 naming it at any other. A field no OpenAI client
sends is refused too, as OpenAI does: a typo must not pass unnoticed.

docs/decisions.md ("The OpenAI fields") lists each with the reason."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from domain.answer_options import AnswerOptions
from edge.openai_errors import OpenAIError

# Honoured: their values change what the platform does.
HONOURED = (
    "messages",
    "model",
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "prompt_cache_key",
    "user",
)
# What a session key (the affinity key) may be: printable ASCII without spaces.
CACHE_KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,128}$")
MAX_STOPS = 4


@dataclass(frozen=True, slots=True)
class DefaultOnly:
    """A field accepted only at values that ask for nothing the platform does not do."""

    why: str
    # The values accepted (None: the field sent as null).
    defaults: tuple[Any, ...] = (None,)

    def accepts(self, value: Any) -> bool:
        # True is not 1 here, nor False 0: `n: true` is a mistake, not a default.
        return any(value is d or (value == d and type(value) is type(d)) for d in self.defaults)


DEFAULT_ONLY: dict[str, DefaultOnly] = {
    "audio": DefaultOnly("audio output is not supported"),
    "functions": DefaultOnly(
        "the deprecated 'functions' are not supported; use 'tools'", (None, [])
    ),
    "function_call": DefaultOnly(
        "the deprecated 'function_call'; use 'tool_choice'", (None, "none", "auto")
    ),
    "logit_bias": DefaultOnly("logit_bias is not supported", (None, {})),
    "logprobs": DefaultOnly("logprobs are not returned", (None, False)),
    "top_logprobs": DefaultOnly("logprobs are not returned", (None, 0)),
    "metadata": DefaultOnly(
        "chat completions are not stored, so there is nothing to attach metadata to", (None, {})
    ),
    "modalities": DefaultOnly("the models answer in text only", (None, ["text"])),
    "moderation": DefaultOnly(
        "the platform's own safety checks run on every answer; no other can be chosen"
    ),
    "n": DefaultOnly("only n=1 is supported", (None, 1)),
    "prediction": DefaultOnly("predicted outputs are not supported"),
    "prompt_cache_options": DefaultOnly(
        "the prefix cache is the replica's own and takes no breakpoints",
        (None, {}, {"mode": "implicit"}),
    ),
    "prompt_cache_retention": DefaultOnly(
        "the prefix cache is the replica's, in memory only", (None, "in_memory")
    ),
    "reasoning_effort": DefaultOnly("the models do not reason", (None, "none")),
    "safety_identifier": DefaultOnly(
        "the API key names the user; the platform keeps no other identifier"
    ),
    "service_tier": DefaultOnly(
        "the service tier is the API key's tier", (None, "auto", "default")
    ),
    "store": DefaultOnly(
        "chat completions are not stored (the Responses API stores)", (None, False)
    ),
    "verbosity": DefaultOnly("verbosity cannot be chosen", (None, "medium")),
    "web_search_options": DefaultOnly("web search is not supported"),
}


def check_known(body: dict[str, Any]) -> None:
    """Refuses a field the platform does not honour at a value other than its default, and
    any field OpenAI's API does not have."""
    for name, value in body.items():
        if name in HONOURED:
            continue
        rule = DEFAULT_ONLY.get(name)
        if rule is None:
            raise OpenAIError(400, f"unrecognized request argument supplied: {name}", None, name)
        if not rule.accepts(value):
            raise OpenAIError(
                400, f"'{name}' is accepted only at its default value: {rule.why}", None, name
            )


def _number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise OpenAIError(400, f"'{name}' must be a number", None, name)
    if not low <= value <= high:
        raise OpenAIError(400, f"'{name}' must be from {low:g} to {high:g}", None, name)
    return float(value)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOPS
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise OpenAIError(
            400, f"'stop' must be a non-empty string or a list of up to {MAX_STOPS}", None, "stop"
        )
    return tuple(stops)


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**63:
        raise OpenAIError(400, "'seed' must be a 64-bit integer", None, "seed")
    return value


def sampling(body: dict[str, Any]) -> AnswerOptions:
    """The sampling fields; unset ones keep the platform's choice."""
    return AnswerOptions(
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        stop=_stop(body.get("stop")),
        seed=_seed(body.get("seed")),
        frequency_penalty=_number(body, "frequency_penalty", -2.0, 2.0),
        presence_penalty=_number(body, "presence_penalty", -2.0, 2.0),
    )


def cache_key(body: dict[str, Any], header: str) -> str:
    """The affinity key: the X-Session-Id header, else `prompt_cache_key`, else `user` (which
    OpenAI used for cache routing before prompt_cache_key). Each sends every call of one
    session to the replica whose prefix cache holds it."""
    if header:
        return header
    for name in ("prompt_cache_key", "user"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not CACHE_KEY_PATTERN.match(value):
            raise OpenAIError(
                400, f"'{name}' must be 1-128 printable ASCII characters, no spaces", None, name
            )
        return value
    return ""
