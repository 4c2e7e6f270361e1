"""The start check: before the node registers, the vLLM adapter reads from the server it
serves through whether that server was started with the flags the node's requests rely on
(nodeagent/vllm_flags.py), and the node refuses to start when one is missing, rather than
serve Plus behind Free or charge cached history at full price.

What a vLLM 0.32 server shows, and where:
- `--enable-prompt-tokens-details`: a one-token answer's `usage` has `prompt_tokens_details`.
- `--enable-auto-tool-choice` (with a parser): a one-token answer with `tool_choice` "auto" is
  not refused with 400.
- `--enable-prefix-caching`: the `enable_prefix_caching` label of `vllm:cache_config_info`
  on /metrics.
- `--scheduling-policy`: `/server_info` (`scheduler_config.policy`), which vLLM serves only
  with `VLLM_SERVER_DEV_MODE=1`; else the server's own command line, where the node sees its
  process (nodeagent/vllm_cmdline.py: same host, or a pod sharing its process namespace). A
  production server accepts a priority under either policy, so where neither shows it the
  policy is reported as unverified, not missing.
- which tool-call parser (and the chat template a family needs): in no answer; read from the
  command line where it is visible, and tests/deploy/test_engine_args.py holds the manifests
  to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.engine import EngineError
from nodeagent.vllm_cmdline import DEFAULT_PORT, server_args
from nodeagent.vllm_flags import UnknownModelFamily, family_of, missing_flags, parse_args

# The rest the answers show, as the server runs (vLLM caches prefixes unless told not to).
_SHOWN_ONLY_BY_COMMAND_LINE = frozenset({"--tool-call-parser", "--chat-template"})
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# Each start-check request answers at once on an idle engine; /server_info also collects the
# host's environment (a few seconds, the first time).
_CHECK_TIMEOUT = aiohttp.ClientTimeout(total=60)
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe",
        "description": "Not called: the answer is one token long.",
        "parameters": {"type": "object", "properties": {}},
    },
}
# What vLLM runs when its command line names no policy.
VLLM_DEFAULT_POLICY = "fcfs"
# What the node's requests lose without each flag: said when the node refuses to start.
WHY = {
    "--scheduling-policy": "Plus would wait behind Free: fcfs ignores a request's priority",
    "--enable-prompt-tokens-details": "cached tokens would read 0 and be charged in full",
    "--enable-prefix-caching": "no conversation history would be cached",
    "--enable-auto-tool-choice": "every request with tools would be refused with 400",
    "--tool-call-parser": "every request with tools would be refused with 400",
    "--chat-template": "the model's own template drops the tools offered",
}


@dataclass(frozen=True, slots=True)
class CheckAnswers:
    """The server's answers to the start check's requests, as they came."""

    # /v1/models' root for the node's model: the weights, whose family names the parser.
    model_root: str
    # A one-token answer, and its status and body with a tool under tool_choice "auto".
    chat_completion: Mapping[str, Any]
    tool_status: int
    tool_body: Any
    metrics: str
    # /server_info?config_format=json; None where vLLM does not serve it (no dev mode).
    server_info: Mapping[str, Any] | None
    # The server process's arguments; None where the node cannot see the process.
    command_line: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class FlagReport:
    # Flags as `--name=value`, in vllm_flags' order.
    missing: tuple[str, ...]
    unverified: tuple[str, ...]

    def refusal(self, base_url: str) -> str:
        """One line naming each missing flag and what the node's requests would lose."""
        by_reason: dict[str, list[str]] = {}
        for flag in self.missing:
            by_reason.setdefault(WHY[flag.partition("=")[0]], []).append(flag)
        reasons = "; ".join(f"{' '.join(flags)} ({why})" for why, flags in by_reason.items())
        return (
            f"vLLM at {base_url} was started without flags the node relies on, so the node "
            f"does not register: {reasons}. Restart vLLM with them."
        )


def report(answers: CheckAnswers) -> FlagReport:
    missing: list[str] = []
    unverified: list[str] = []
    policy = policy_of(answers.server_info) if answers.server_info is not None else None
    if policy is None and answers.command_line is not None:
        policy = parse_args(answers.command_line).get("--scheduling-policy") or VLLM_DEFAULT_POLICY
    if policy is None:
        unverified.append("--scheduling-policy=priority")
    elif policy != "priority":
        missing.append("--scheduling-policy=priority")
    if not shows_prompt_tokens_details(answers.chat_completion):
        missing.append("--enable-prompt-tokens-details")
    prefix_caching = prefix_caching_of(answers.metrics)
    if prefix_caching is None:
        unverified.append("--enable-prefix-caching")
    elif not prefix_caching:
        missing.append("--enable-prefix-caching")
    if refuses_auto_tool_choice(answers.tool_status, answers.tool_body):
        missing.append("--enable-auto-tool-choice")
        missing.append(f"--tool-call-parser={_parser_of(answers.model_root)}")
    missing += _also_missing_from(answers.command_line, missing)
    return FlagReport(tuple(missing), tuple(unverified))


def _also_missing_from(command_line: Sequence[str] | None, missing: list[str]) -> list[str]:
    """What the server's command line lacks beyond what its answers showed: the tool-call
    parser of the model's family and its chat template show in no answer."""
    if command_line is None:
        return []
    try:
        lacking = missing_flags(command_line)
    except UnknownModelFamily:
        return []
    named = {flag.partition("=")[0] for flag in missing}
    return [
        flag
        for flag in lacking
        if flag.partition("=")[0] in _SHOWN_ONLY_BY_COMMAND_LINE
        and flag.partition("=")[0] not in named
    ]


def _parser_of(model_root: str) -> str:
    try:
        return family_of(model_root).tool_call_parser
    except UnknownModelFamily:
        return "PARSER"


def policy_of(server_info: Mapping[str, Any]) -> str | None:
    """The scheduling policy in /server_info?config_format=json."""
    config = server_info.get("vllm_config")
    scheduler = config.get("scheduler_config") if isinstance(config, dict) else None
    policy = scheduler.get("policy") if isinstance(scheduler, dict) else None
    return str(policy) if policy is not None else None


def prefix_caching_of(metrics_text: str) -> bool | None:
    """Whether /metrics' cache_config_info says prefix caching is on; None: it does not say."""
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info" and "enable_prefix_caching" in sample.labels:
                return sample.labels["enable_prefix_caching"] == "True"
    return None


def shows_prompt_tokens_details(completion: Mapping[str, Any]) -> bool:
    usage = completion.get("usage")
    return isinstance(usage, dict) and isinstance(usage.get("prompt_tokens_details"), dict)


def refuses_auto_tool_choice(status: int, body: Any) -> bool:
    return status == 400 and "--enable-auto-tool-choice" in _message(body)


async def check_engine_flags(
    session: aiohttp.ClientSession, base_url: str, model: str
) -> FlagReport:
    """Asks the server what it shows of its flags; raises EngineError when it does not serve
    the model or refuses a check request for a reason other than a missing flag."""
    root = await _model_root(session, base_url, model)
    url = f"{base_url}/v1/chat/completions"
    plain = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    status, completion = await _call(session, "POST", url, plain)
    if status != 200 or not isinstance(completion, dict):
        raise EngineError(f"vLLM refused the start check's request: {status}: {completion}")
    tools = {**plain, "tools": [_PROBE_TOOL], "tool_choice": "auto"}
    tool_status, tool_body = await _call(session, "POST", url, tools)
    if tool_status != 200 and not refuses_auto_tool_choice(tool_status, tool_body):
        raise EngineError(
            f"vLLM refused the start check's tool request: {tool_status}: {tool_body}"
        )
    metrics_status, metrics = await _call(session, "GET", f"{base_url}/metrics")
    info_status, info = await _call(session, "GET", f"{base_url}/server_info?config_format=json")
    answers = CheckAnswers(
        model_root=root,
        chat_completion=completion,
        tool_status=tool_status,
        tool_body=tool_body,
        metrics=metrics if metrics_status == 200 and isinstance(metrics, str) else "",
        server_info=info if info_status == 200 and isinstance(info, dict) else None,
        command_line=await _local_command_line(base_url),
    )
    return report(answers)


async def _local_command_line(base_url: str) -> list[str] | None:
    """The flags of the server's process where it runs beside the node: on another host, a
    process on the same port here would be another server."""
    url = urlsplit(base_url)
    if url.hostname not in _LOOPBACK:
        return None
    return await asyncio.to_thread(server_args, url.port or DEFAULT_PORT)


async def _model_root(session: aiohttp.ClientSession, base_url: str, model: str) -> str:
    """The weights the server loaded for the model (its Hugging Face name or folder)."""
    status, body = await _call(session, "GET", f"{base_url}/v1/models")
    cards = body.get("data") if status == 200 and isinstance(body, dict) else None
    if not isinstance(cards, list):
        raise EngineError(f"vLLM at {base_url} did not list its models: {status}: {body}")
    served = {str(card.get("id")): str(card.get("root") or "") for card in cards}
    if model not in served:
        raise EngineError(
            f"vLLM at {base_url} serves {', '.join(sorted(served))}, not {model!r}: "
            "the node's model must be one of vLLM's --served-model-name"
        )
    return served[model]


async def _call(
    session: aiohttp.ClientSession, method: str, url: str, body: object = None
) -> tuple[int, Any]:
    """Status and body (JSON when it parses, else text) of one check request."""
    try:
        async with session.request(method, url, json=body, timeout=_CHECK_TIMEOUT) as response:
            text = await response.text()
            if response.content_type == "application/json":
                return response.status, await response.json()
            return response.status, text
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise EngineError(f"vLLM start check: {method} {url} failed: {exc!r}") from exc


def _message(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message", ""))
    return str(body)
