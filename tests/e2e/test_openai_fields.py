"""Nothing sent to /v1/chat/completions is silently ignored: every request field of the pinned
`openai` SDK's CompletionCreateParams is sent to a real platform (simulated replicas), and is
either honoured or accepted only at its default and refused with a 400 naming it otherwise."""

from __future__ import annotations

import json
import typing
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from openai.types.chat import completion_create_params

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from edge.openai_fields import DEFAULT_ONLY, HONOURED

pytestmark = pytest.mark.slow

SDK_FIELDS = set(typing.get_type_hints(completion_create_params.CompletionCreateParamsBase)) | {
    "stream"
}
# Each field refused unless at its default: the defaults clients send, and one value that asks
# for something the platform does not do.
DEFAULTS_AND_REFUSED: dict[str, tuple[list[Any], Any]] = {
    "audio": ([None], {"voice": "alloy", "format": "mp3"}),
    "functions": ([None, []], [{"name": "f", "parameters": {"type": "object"}}]),
    "function_call": ([None, "none", "auto"], {"name": "f"}),
    "logit_bias": ([None, {}], {"50256": -100}),
    "logprobs": ([None, False], True),
    "top_logprobs": ([None, 0], 3),
    "metadata": ([None, {}], {"project": "x"}),
    "modalities": ([None, ["text"]], ["text", "audio"]),
    "moderation": ([None], {"model": "omni-moderation-latest"}),
    "n": ([None, 1], 2),
    "prediction": ([None], {"type": "content", "content": "Hello"}),
    "prompt_cache_options": ([None, {}, {"mode": "implicit"}], {"mode": "explicit"}),
    "prompt_cache_retention": ([None, "in_memory"], "24h"),
    "reasoning_effort": ([None, "none"], "high"),
    "safety_identifier": ([None], "user-123"),
    "service_tier": ([None, "auto", "default"], "priority"),
    "store": ([None, False], True),
    "verbosity": ([None, "medium"], "low"),
    "web_search_options": ([None], {}),
}
# Each honoured field: a value that is honoured, and one that is refused as malformed.
HONOURED_VALUES: dict[str, tuple[Any, Any]] = {
    "max_tokens": (3, 0),
    "max_completion_tokens": (3, -1),
    "stream": (False, "yes"),
    "temperature": (0.2, 3),
    "top_p": (0.9, 1.5),
    "stop": (["\n\n"], ["a", "b", "c", "d", "e"]),
    "seed": (7, 1.5),
    "frequency_penalty": (0.5, -3),
    "presence_penalty": (0.5, 2.5),
    "response_format": ({"type": "text"}, {"type": "xml"}),
    "tools": ([], [{"type": "function", "function": {"name": "bad name"}}]),
    "tool_choice": ("none", "sometimes"),
    "parallel_tool_calls": (True, "yes"),
    "prompt_cache_key": ("session-1", "has spaces"),
    "user": ("user-1", ""),
}


@pytest.fixture(scope="module")
async def sim(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("openai-fields"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            extra_env={"CHAT_NODEAGENT_ENGINE": "sim", "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100"},
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


async def post(platform: LocalPlatform, **fields: Any) -> tuple[int, dict[str, Any]]:
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 3,
        **fields,
    }
    headers = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{platform.edge_url}/v1/chat/completions", json=body, headers=headers) as r,
    ):
        return r.status, json.loads(await r.read())


def test_every_sdk_field_is_either_honoured_or_refused_unless_default() -> None:
    assert set(HONOURED) | set(DEFAULT_ONLY) == SDK_FIELDS
    assert not set(HONOURED) & set(DEFAULT_ONLY)
    assert set(DEFAULTS_AND_REFUSED) == set(DEFAULT_ONLY)
    # What the OpenAPI document lists as accepted is what is accepted.
    assert {n: list(r.defaults) for n, r in DEFAULT_ONLY.items()} == {
        n: defaults for n, (defaults, _) in DEFAULTS_AND_REFUSED.items()
    }
    assert set(HONOURED_VALUES) | {"messages", "model", "stream_options"} == set(HONOURED)


@pytest.mark.parametrize("name", sorted(DEFAULTS_AND_REFUSED))
async def test_a_field_the_platform_does_not_do_is_refused_unless_at_its_default(
    sim: LocalPlatform, name: str
) -> None:
    defaults, refused = DEFAULTS_AND_REFUSED[name]
    for value in defaults:
        status, answer = await post(sim, **{name: value})
        assert status == 200, (name, value, answer)
        assert answer["object"] == "chat.completion"
    status, answer = await post(sim, **{name: refused})
    assert status == 400, answer
    assert answer["error"]["param"] == name
    assert answer["error"]["message"].startswith(f"'{name}' is accepted only at its default")


@pytest.mark.parametrize("name", sorted(HONOURED_VALUES))
async def test_an_honoured_field_is_taken_and_a_malformed_one_refused(
    sim: LocalPlatform, name: str
) -> None:
    good, bad = HONOURED_VALUES[name]
    status, answer = await post(sim, **{name: good})
    assert status == 200, answer
    status, answer = await post(sim, **{name: bad})
    assert status == 400, answer
    assert answer["error"]["param"].split(".")[0].split("[")[0] == name, answer


async def test_a_field_openai_does_not_have_is_refused(sim: LocalPlatform) -> None:
    status, answer = await post(sim, temprature=0.5)
    assert status == 400
    assert answer["error"] == {
        "message": "unrecognized request argument supplied: temprature",
        "type": "invalid_request_error",
        "param": "temprature",
        "code": None,
    }


async def test_max_completion_tokens_caps_the_answer(sim: LocalPlatform) -> None:
    status, answer = await post(sim, max_completion_tokens=2)
    assert status == 200 and answer["usage"]["completion_tokens"] == 2
    assert answer["choices"][0]["finish_reason"] == "length"
