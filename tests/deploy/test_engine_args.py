"""Every vLLM container the overlays render is started with the flags the nodeagent's requests
rely on (nodeagent/vllm_flags.py), the tool-call parser of its own model's family included:
vLLM accepts a request's priority without `--scheduling-policy priority` and ignores it, and
reports no cached tokens without `--enable-prompt-tokens-details`, so nothing else would say."""

from __future__ import annotations

import pytest
import yaml

from nodeagent.vllm_flags import missing_flags, parse_args
from tests.deploy.manifests import K8S, OVERLAYS, container, named, render

POOLS = ("large", "small")


def vllm_command_line(overlay: str, pool: str) -> list[str]:
    vllm = container(named(render(overlay), "StatefulSet", f"pool-{pool}"), "vllm")
    return [*vllm.get("command", []), *vllm["args"]]


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_vllm_container_has_the_flags_its_nodeagent_relies_on(overlay, pool) -> None:
    args = vllm_command_line(overlay, pool)
    assert missing_flags(args) == []
    options = parse_args(args)
    # Every pool serves a Llama 3.x, whose calls only llama3_json reads.
    assert options["--model"].startswith("meta-llama/Llama-3.")
    assert options["--tool-call-parser"] == "llama3_json"
    assert options["--scheduling-policy"] == "priority"


def test_the_check_names_what_a_container_started_as_before_lacked() -> None:
    # The pools' vLLM arguments as they were before the flags were added.
    before = [
        "--model=meta-llama/Llama-3.1-8B-Instruct",
        "--served-model-name=llama-3.1-8b-instruct",
        "--tensor-parallel-size=1",
        "--max-model-len=32768",
        "--max-num-seqs=128",
        "--enable-prefix-caching",
        "--port=8000",
    ]
    assert missing_flags(before) == [
        "--scheduling-policy=priority",
        "--enable-prompt-tokens-details",
        "--enable-auto-tool-choice",
        "--tool-call-parser=llama3_json",
    ]
    hermes = [*before, "--scheduling-policy=priority", "--enable-prompt-tokens-details",
              "--enable-auto-tool-choice", "--tool-call-parser=hermes"]  # fmt: skip
    assert missing_flags(hermes) == ["--tool-call-parser=llama3_json"]


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_nodeagent_can_read_its_vllms_command_line(overlay, pool) -> None:
    # vLLM 0.32 shows its scheduling policy only on its command line
    # (nodeagent/vllm_cmdline.py): the nodeagent sees it when the pod shares its processes,
    # and looks for it when it reaches vLLM on the loopback address.
    pod = named(render(overlay), "StatefulSet", f"pool-{pool}")["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    config = yaml.safe_load((K8S / "base" / "config.yaml").read_text())
    assert config["nodeagent"]["vllm_url"] == "http://127.0.0.1:8000"
