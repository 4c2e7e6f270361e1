"""The layering, checked on the sources: policies are pure, and the gateway's pipeline reaches
the scheduler and the nodes only through its typed clients (no gRPC, no generated protobuf)."""

from __future__ import annotations

import ast
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


def test_domain_imports_only_the_standard_library_numpy_and_itself() -> None:
    allowed = set(sys.stdlib_module_names) | {"domain", "numpy", "__future__"}
    offenders = {}
    for path in sorted((ROOT / "domain").rglob("*.py")):
        found = sorted(m for m in imported_modules(path) if top(m) not in allowed)
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


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
