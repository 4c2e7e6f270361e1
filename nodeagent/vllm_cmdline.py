"""The flags a vLLM server was started with, read from its own command line in /proc.

A production vLLM 0.32 server shows its scheduling policy on no endpoint (only dev mode's
/server_info, which also opens endpoints no production server should serve), and it accepts
a request's priority under either policy. Its command line does show it, wherever the node can
see the server's process: on the same host (the local launcher, `vllm_url` on 127.0.0.1) and
in a pod that shares its process namespace between containers (deploy/k8s: the GPU pools set
`shareProcessNamespace`). Elsewhere the policy stays unverified, and the node says so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from nodeagent.vllm_flags import parse_args

# vLLM's HTTP server listens here unless told otherwise (`--port`).
DEFAULT_PORT = 8000
_API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def server_args(port: int, proc: Path = Path("/proc")) -> list[str] | None:
    """The arguments of the vLLM server process listening on `port` that this node can see
    (what follows `vllm serve` or the API server's module); None when none is visible."""
    for argv in _command_lines(proc):
        args = vllm_server_args(argv)
        if args is not None and parse_args(args).get("--port", str(DEFAULT_PORT)) == str(port):
            return args
    return None


def vllm_server_args(argv: Sequence[str]) -> list[str] | None:
    """The arguments of a vLLM API server's argv (`vllm serve ...` or `python -m
    vllm.entrypoints.openai.api_server ...`); None for any other program."""
    start = _arguments_start(argv)
    return None if start is None else list(argv[start:])


def _arguments_start(argv: Sequence[str]) -> int | None:
    for i, arg in enumerate(argv):
        if arg == _API_SERVER_MODULE:
            return i + 1
        if os.path.basename(arg) == "vllm" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return i + 2
    return None


def _command_lines(proc: Path) -> Iterator[list[str]]:
    try:
        entries = list(proc.iterdir())
    except OSError:
        return
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:  # gone, or hidden from this user
            continue
        if raw:
            yield [part.decode(errors="replace") for part in raw.rstrip(b"\0").split(b"\0")]
