"""The one list of vLLM flags the nodeagent's requests rely on: each model family's tool-call
parser, the local launcher's command line, and the check the manifests' test uses."""

from __future__ import annotations

import pytest

from nodeagent.vllm_flags import (
    TEMPLATES,
    UnknownModelFamily,
    family_of,
    main,
    missing_flags,
    parse_args,
)
from nodeagent.vllm_launch import DEFAULT_HOME, VllmLaunch


@pytest.mark.parametrize(
    ("model", "parser"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", "llama3_json"),
        ("meta-llama/Llama-3.2-1B-Instruct", "llama3_json"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama3_json"),
        ("Qwen/Qwen2.5-7B-Instruct", "hermes"),
        ("Qwen/Qwen3-8B", "hermes"),
        ("NousResearch/Hermes-3-Llama-3.1-8B", "hermes"),
        ("/srv/models/smollm2-135m-instruct/", "hermes"),
    ],
)
def test_each_family_gets_the_parser_that_reads_its_calls(model: str, parser: str) -> None:
    assert family_of(model).tool_call_parser == parser


def test_a_model_of_no_known_family_is_named_not_guessed() -> None:
    with pytest.raises(UnknownModelFamily) as raised:
        family_of("mistralai/Mistral-7B-Instruct-v0.3")
    assert str(raised.value) == (
        "no tool-call parser is known for model 'mistralai/Mistral-7B-Instruct-v0.3' "
        "(families: hermes, qwen, smollm2, llama-3); name the parser and, if the model's own "
        "template drops tools, a chat template"
    )
    with pytest.raises(UnknownModelFamily):
        family_of("meta-llama/Llama-4-Scout-17B-16E-Instruct")


def test_the_local_launcher_starts_vllm_with_every_flag() -> None:
    command = VllmLaunch().command("smollm2-135m-instruct", 8000, 2048)
    assert missing_flags(command) == []
    options = parse_args(command)
    assert options["--tool-call-parser"] == "hermes"
    assert options["--chat-template"] == str(TEMPLATES / "smollm2_tools.jinja")
    llama = VllmLaunch(model_path="/models/Llama-3.1-8B-Instruct").command("m", 8000, 2048)
    assert missing_flags(llama) == []
    assert parse_args(llama)["--tool-call-parser"] == "llama3_json"
    # The model's own template renders Llama's tools.
    assert "--chat-template" not in llama


def test_a_launch_of_no_known_family_needs_its_parser_named() -> None:
    launch = VllmLaunch(model_path="/models/Mistral-7B-Instruct")
    with pytest.raises(UnknownModelFamily):
        launch.command("m", 8000, 2048)
    named = VllmLaunch(model_path="/models/Mistral-7B-Instruct", tool_call_parser="mistral")
    assert parse_args(named.command("m", 8000, 2048))["--tool-call-parser"] == "mistral"


def test_a_smollm2_command_without_its_template_lacks_it() -> None:
    model = str(DEFAULT_HOME / "smollm2-135m-instruct")
    args = [
        f"--model={model}",
        "--scheduling-policy",
        "priority",
        "--enable-prompt-tokens-details",
        "--enable-prefix-caching",
        "--enable-auto-tool-choice",
        "--tool-call-parser=hermes",
    ]
    assert missing_flags(args) == [
        "--chat-template=(a copy of nodeagent/templates/smollm2_tools.jinja)"
    ]
    # vLLM reads `_` as `-` in a name, and a value after `=` or as the next word.
    assert parse_args(["--scheduling_policy=fcfs", "--port", "8000", "--enforce-eager"]) == {
        "--scheduling-policy": "fcfs",
        "--port": "8000",
        "--enforce-eager": None,
    }


def test_the_flags_print_as_a_manifests_args(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["meta-llama/Llama-3.1-8B-Instruct"]) == 0
    assert capsys.readouterr().out == (
        "- --scheduling-policy=priority\n"
        "- --enable-prompt-tokens-details\n"
        "- --enable-prefix-caching\n"
        "- --enable-auto-tool-choice\n"
        "- --tool-call-parser=llama3_json\n"
    )
