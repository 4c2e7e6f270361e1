"""The layering, checked on the sources: policies are pure, and the gateway's pipeline reaches
the scheduler and the nodes only through its typed clients (no gRPC, no generated protobuf);
and on what importing the pipeline's core actually loads, at any depth."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The chat pipeline's core: what runs a message, independent of how it is reached.
PIPELINE_CORE = [
    "gateway/pipeline.py",
    "gateway/planner.py",
    "gateway/answers.py",
    "gateway/compactor.py",
    "gateway/runs.py",
    "gateway/shared_runs.py",
    "gateway/completions.py",
    "gateway/policies.py",
]
# Where generated protobuf types may appear in the gateway: its servicer, its convert module,
# its typed clients and its composition root.
GATEWAY_PROTOBUF_ALLOWED = {
    "gateway/servicer.py",
    "gateway/convert.py",
    "gateway/scheduler_client.py",
    "gateway/node_client.py",
    "gateway/main.py",
    # Regions: the home region's store over HomeService (client, servicer, conversions), and
    # the typed client of other regions' gateways.
    "gateway/home_client.py",
    "gateway/home_servicer.py",
    "gateway/home_convert.py",
    "gateway/peer_client.py",
}

# The same for the other services. The edge's relays (SSE and the OpenAI-compatible stream)
# read the gateway's events as they arrive: turning each into a plain value first would add
# work per event on the hot path, so they read the generated types directly.
SERVICE_PROTOBUF_ALLOWED = {
    "scheduler": {
        "scheduler/servicer.py",
        "scheduler/users_servicer.py",
        "scheduler/convert.py",
        "scheduler/main.py",
    },
    "nodeagent": {
        "nodeagent/servicer.py",
        "nodeagent/convert.py",
        "nodeagent/reporter.py",  # its typed client of the scheduler
        "nodeagent/main.py",
    },
    "edge": {
        "edge/convert.py",
        "edge/gateways.py",  # its typed client of the gateways
        "edge/relay.py",
        "edge/sse.py",
        "edge/openai_api.py",
        "edge/openai_replies.py",  # the OpenAI stream's chunks, written from the events
        "edge/responses_api.py",
        "edge/resumable_completions.py",
        "edge/responses_convert.py",  # the Responses API's convert module
        "edge/main.py",
    },
}


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def top(module: str) -> str:
    return module.split(".", 1)[0]


def test_the_pipeline_core_imports_neither_grpc_nor_generated_protobuf() -> None:
    offenders = {
        name: sorted(m for m in imported_modules(ROOT / name) if top(m) in {"grpc", "chat"})
        for name in PIPELINE_CORE
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_generated_protobuf_stays_behind_the_gateways_servicer_convert_and_clients() -> None:
    offenders = {}
    for path in sorted((ROOT / "gateway").glob("*.py")):
        name = str(path.relative_to(ROOT))
        if name in GATEWAY_PROTOBUF_ALLOWED:
            continue
        found = sorted(m for m in imported_modules(path) if top(m) == "chat")
        if found:
            offenders[name] = found
    assert offenders == {}


def test_generated_protobuf_stays_behind_each_services_servicer_convert_and_clients() -> None:
    offenders = {}
    for package, allowed in SERVICE_PROTOBUF_ALLOWED.items():
        for path in sorted((ROOT / package).glob("*.py")):
            name = str(path.relative_to(ROOT))
            found = sorted(m for m in imported_modules(path) if top(m) == "chat")
            if found and name not in allowed:
                offenders[name] = found
    assert offenders == {}


def test_domain_imports_only_the_standard_library_numpy_and_itself() -> None:
    allowed = set(sys.stdlib_module_names) | {"domain", "numpy", "__future__"}
    offenders = {}
    for path in sorted((ROOT / "domain").rglob("*.py")):
        found = sorted(m for m in imported_modules(path) if top(m) not in allowed)
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


# What reading or writing a file looks like in Python source: domain/ does neither (its data
# files are read by the composition roots, which hand domain/ their contents).
FILE_MODULES = {"io", "os", "pathlib", "shutil", "tempfile"}
FILE_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes"}


def file_access(path: Path) -> list[str]:
    """Where a file imports a file-handling module or calls open() or a Path reader/writer."""
    found = [f"import {m}" for m in sorted(imported_modules(path)) if top(m) in FILE_MODULES]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        called = node.func
        if isinstance(called, ast.Name) and called.id == "open":
            found.append(f"line {node.lineno}: open()")
        elif isinstance(called, ast.Attribute) and called.attr in FILE_METHODS:
            found.append(f"line {node.lineno}: .{called.attr}()")
    return found


def test_domain_reads_no_file() -> None:
    offenders = {}
    for path in sorted((ROOT / "domain").rglob("*.py")):
        found = file_access(path)
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_the_file_check_sees_a_read_where_there_is_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from pathlib import Path\n\ndef f(p):\n    return open(p).read() + p.read_text()\n"
    )
    found = sorted(file_access(sample))
    assert found == ["import pathlib", "line 4: .read_text()", "line 4: open()"]


def test_the_fleet_simulator_imports_no_client() -> None:
    """The simulator sits below the clients (chatctl runs it), never beside them: what both
    need, the capacity planner, lives in domain/."""
    offenders = {}
    for path in sorted((ROOT / "fleet").rglob("*.py")):
        found = sorted(m for m in imported_modules(path) if top(m) == "clients")
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_the_check_sees_an_import_where_there_is_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\n\ndef f():\n    from chat.v1 import common_pb2\n")
    assert imported_modules(sample) == {"os", "chat.v1"}


def test_the_pipeline_does_not_assert_which_implementations_it_has() -> None:
    source = ROOT / "gateway" / "pipeline.py"
    asserts = [
        n.lineno for n in ast.walk(ast.parse(source.read_text())) if isinstance(n, ast.Assert)
    ]
    assert asserts == []


# What the chat pipeline's core may not load, at any depth of its imports: the wire (gRPC,
# protobuf and the generated chat.v1 modules), Redis, HTTP, and the store's drivers. It
# reaches them only through gateway/ports.py's protocols, which gateway/main.py fills.
CORE_MODULES = ["gateway.pipeline", "gateway.planner", "gateway.answers"]
CORE_FORBIDDEN = {"grpc", "google.protobuf", "redis", "aiohttp", "asyncpg", "aiosqlite", "chat"}


def loaded_by(modules: list[str]) -> list[str]:
    """Every module a fresh interpreter holds after importing these: the whole closure."""
    code = f"import sys, {', '.join(modules)}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    return done.stdout.split()


def forbidden_in(loaded: list[str]) -> list[str]:
    return sorted(
        name
        for name in loaded
        if any(name == bad or name.startswith(bad + ".") for bad in CORE_FORBIDDEN)
    )


def test_importing_the_pipeline_core_loads_no_wire_redis_http_or_database_library() -> None:
    loaded = loaded_by(CORE_MODULES)
    assert set(CORE_MODULES) <= set(loaded)
    assert forbidden_in(loaded) == []


def test_the_closure_check_sees_a_library_a_module_loads_indirectly() -> None:
    # The gateway's typed node client loads gRPC and chat.v1 through infra/ and itself.
    found = forbidden_in(loaded_by(["gateway.node_client", "gateway.daily_budget"]))
    assert {"grpc", "chat.v1", "google.protobuf", "redis"} <= set(found)
