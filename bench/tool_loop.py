"""What the harness's tool loop itself costs per tool step, without the tool and the model.

The gateway's ToolLoop (gateway/tool_loop.py) is run in this process over a model that
answers at once (each step's run is written whole before the loop reads it) and:
  1. a tool that answers at once: the loop alone (the capability set, the trifecta check
     before each model call, authorizing the calls, the output check on each call's
     arguments and result, the turns and events it adds);
  2. a real MCP server over streamable HTTP (tests/mcp_pages_server.py, a process of its own,
     so its CPU is not counted): the loop and its MCP client (gateway/mcp_tools.py), the
     client's share of a real call included, the server's wall time in the figures too.
A turn of k tool steps is run against a turn of none (one model call, no tool asked for),
alternating, and the difference divided by k is one step's cost: wall time and this
process's CPU (time.process_time, every thread).

    .venv/bin/python bench/tool_loop.py [--turns 200] [--steps 4] [--rounds 3]

Prints a table and ends with one JSON line; results land in bench/results/tool_loop.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchkit import publish

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

import domain
from domain.answer_options import ToolCall, ToolDefinition
from domain.capabilities import Capability, ToolSpec
from domain.safety import BlocklistClassifier, OutputGuard, StreamCheckConfig
from domain.types import Finish, Role, Tier, Usage, User
from gateway.completions import CallerTurn, CompleteRequest
from gateway.mcp_tools import McpServers
from gateway.metrics import GatewayMetrics
from gateway.policies import MessagePolicies
from gateway.runs import Delta, Done, MessageRun, Meta
from gateway.tool_loop import ToolLoop
from gateway.tool_ports import RemoteServers, ToolOutcome, ToolServer
from gateway.tool_requests import OperatorServer, PlatformTool, ToolPolicy
from tests.tool_servers import run_mcp_server

PAGE = "Q3 planning notes: ship the gateway in May. " * 20
FETCH = ToolDefinition("fetch_page", "The text of the page at url", '{"type":"object"}')
USER = User("bench", Tier.PLUS)
# The shipped output check, which every call's arguments and result pass.
CLASSIFIER = BlocklistClassifier.from_data(
    json.loads((Path(domain.__file__).parent / "safety" / "blocklist.json").read_text())
)
CHECKS = MessagePolicies(
    new_output_guard=lambda mode: OutputGuard(CLASSIFIER, StreamCheckConfig(), mode=mode)
)


class InstantModel:
    """Calls fetch_page `steps` times, then answers; every run is whole when handed over."""

    def __init__(self, steps: int) -> None:
        self._steps = steps
        self._asked = 0

    async def complete(self, user: User, request: CompleteRequest) -> MessageRun:
        self._asked += 1
        run = MessageRun(user.user_id, "c", f"m{self._asked}", "")
        await run.append(Meta(run.message_id, "", "model", "replica"))
        calls = sum(1 for turn in request.turns if turn.role is Role.TOOL)
        if calls < self._steps:
            url = json.dumps({"url": "https://example.test/notes"})
            await run.append(Delta("", (ToolCall(f"call_{calls}", "fetch_page", url),)))
        else:
            await run.append(Delta("The notes plan Q3."))
        await run.append(Done(Finish.STOP, Usage(100, 50, 10)))
        return run


class InstantTool:
    @property
    def label(self) -> str:
        return "pages"

    async def list_tools(self) -> list[ToolDefinition]:
        return [FETCH]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        return ToolOutcome(PAGE)

    async def aclose(self) -> None:
        pass


class InstantServers:
    def open(self, label: str, url: str, headers: Mapping[str, str]) -> ToolServer:
        return InstantTool()


def loop(model: InstantModel, remote: RemoteServers, url: str) -> ToolLoop:
    spec = ToolSpec("pages.*", frozenset({Capability.BRINGS_UNTRUSTED}))
    policy = ToolPolicy(grants={Tier.PLUS: frozenset({"pages.*"})},
                        max_steps={Tier.PLUS: 16},
                        servers={"pages": OperatorServer("pages", url, spec)})  # fmt: skip
    return ToolLoop(model, policy, remote, GatewayMetrics(CollectorRegistry()), CHECKS)


REQUEST = CompleteRequest((CallerTurn(Role.SYSTEM, "Be brief."),
                           CallerTurn(Role.USER, "Summarize https://example.test/notes")),
                          None, 0, "")  # fmt: skip


async def turns(count: int, steps: int, remote: RemoteServers, url: str) -> tuple[float, float]:
    """Wall and CPU seconds per turn of `steps` tool steps."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        tool_loop = loop(InstantModel(steps), remote, url)
        async for _ in tool_loop.run(USER, REQUEST, [PlatformTool(server_label="pages")]):
            pass
    return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count


async def per_step(
    count: int, steps: int, rounds: int, remote: RemoteServers, url: str
) -> dict[str, Any]:
    await turns(max(5, count // 10), steps, remote, url)  # warm up
    walls, cpus = [], []
    for _ in range(rounds):
        base_wall, base_cpu = await turns(count, 0, remote, url)
        wall, cpu = await turns(count, steps, remote, url)
        walls.append((wall - base_wall) / steps * 1000)
        cpus.append((cpu - base_cpu) / steps * 1000)
    return {
        "wall_ms_per_step": round(statistics.median(walls), 3),
        "cpu_ms_per_step": round(statistics.median(cpus), 3),
        "wall_ms_by_round": [round(w, 3) for w in walls],
        "cpu_ms_by_round": [round(c, 3) for c in cpus],
        "turn_without_tools_ms": round(base_wall * 1000, 3),
    }


async def measure(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    results = {"instant tool": await per_step(args.turns, args.steps, args.rounds,
                                              InstantServers(), "http://unused/mcp")}  # fmt: skip
    with run_mcp_server({"*": PAGE}) as server:
        # Fewer turns: each opens a session with the server, as a real turn does.
        results["real MCP server"] = await per_step(max(10, args.turns // 10), args.steps,
                                                    args.rounds, McpServers(timeout_s=30),
                                                    server.url)  # fmt: skip
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = asyncio.run(measure(args))
    lines = [
        f"the tool loop's own cost per tool step (turns of {args.steps} steps against turns of "
        f"none, alternating, {args.rounds} rounds; model answers at once)",
        f"{'tool':<16} {'wall ms/step':>12} {'CPU ms/step':>12} {'CPU by round':>24} "
        f"{'turn, no step':>14}",
    ]
    for name, r in results.items():
        rounds = " ".join(f"{c:.3f}" for c in r["cpu_ms_by_round"])
        lines.append(f"{name:<16} {r['wall_ms_per_step']:>12.3f} {r['cpu_ms_per_step']:>12.3f} "
                     f"{rounds:>24} {r['turn_without_tools_ms']:>11.3f} ms")  # fmt: skip
    lines.append(
        "turn, no step: the wall time of a turn whose model asks for no tool (the server "
        "listed, with its session opened and closed, and one model call)"
    )
    lines.append(json.dumps({"bench": "tool_loop", "steps": args.steps, **results}))
    publish("tool_loop", "\n".join(lines))


if __name__ == "__main__":
    main()
