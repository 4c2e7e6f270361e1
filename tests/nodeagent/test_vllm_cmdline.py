"""Reading a vLLM server's flags from its command line: the argv forms vLLM is started with,
and the choice among the processes /proc lists (a folder laid out as /proc is). The same read
of a real server's process is in test_vllm.py."""

from __future__ import annotations

from pathlib import Path

from nodeagent.vllm_cmdline import server_args, vllm_server_args
from nodeagent.vllm_flags import missing_flags, parse_args
from nodeagent.vllm_launch import VllmLaunch

IMAGE_ARGS = [
    "--model=meta-llama/Llama-3.1-8B-Instruct",
    "--served-model-name=llama-3.1-8b-instruct",
    "--enable-prefix-caching",
    "--port=8000",
    "--scheduling-policy=priority",
    "--enable-prompt-tokens-details",
]


def test_the_local_launchers_command_is_read_whole() -> None:
    argv = VllmLaunch(model_path="/m/smollm2-135m-instruct").command(
        "smollm2-135m-instruct", 41000, 2048
    )
    args = vllm_server_args(argv)
    assert args == argv[3:]  # after python -m the module
    assert parse_args(args)["--port"] == "41000"
    assert missing_flags(args) == []


def test_the_images_vllm_serve_form_is_read_too() -> None:
    args = vllm_server_args(["/usr/local/bin/vllm", "serve", *IMAGE_ARGS])
    assert args == IMAGE_ARGS
    # Started without tools: the command line names what the answers could not.
    assert missing_flags(args) == ["--enable-auto-tool-choice", "--tool-call-parser=llama3_json"]


def test_other_programs_are_not_vllm_servers() -> None:
    assert vllm_server_args(["python3", "-m", "nodeagent.main", "--port=8000"]) is None
    assert vllm_server_args(["vllm", "bench", "--port", "8000"]) is None


def proc_with(tmp_path: Path, *argvs: list[str]) -> Path:
    for pid, argv in enumerate(argvs, start=100):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (tmp_path / "self").mkdir()
    return tmp_path


def test_the_server_on_the_asked_port_is_the_one_read(tmp_path: Path) -> None:
    proc = proc_with(
        tmp_path,
        ["python3", "-m", "nodeagent.main"],
        ["vllm", "serve", "--port", "9000", "--scheduling-policy", "fcfs"],
        ["vllm", "serve", "--scheduling-policy", "priority"],  # the default port, 8000
    )
    assert server_args(8000, proc) == ["--scheduling-policy", "priority"]
    assert server_args(9000, proc) == ["--port", "9000", "--scheduling-policy", "fcfs"]
    assert server_args(9001, proc) is None
    assert server_args(8000, tmp_path / "absent") is None
