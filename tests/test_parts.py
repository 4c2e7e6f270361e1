"""The layering, from docs/parts.toml: every product file is on one part, and no file reaches,
through its whole import closure, what its part's rules forbid. Also what the layering needs
beyond imports: domain/ reads no file, and the pipeline does not assert its implementations."""

from __future__ import annotations

import ast
import fnmatch
import keyword
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tests.import_graph import ROOT, ImportGraph, imports_in, module_of, product_files

PARTS_FILE = ROOT / "docs" / "parts.toml"


@dataclass
class Layering:
    parts: dict[str, list[str]]  # part -> file patterns
    rules: list[dict[str, Any]]
    exceptions: list[dict[str, Any]]
    graph: ImportGraph
    part_of: dict[str, str] = field(default_factory=dict)  # module -> part

    @classmethod
    def read(cls, text: str, graph: ImportGraph) -> Layering:
        data = tomllib.loads(text)
        layering = cls(data["parts"], data.get("rules", []), data.get("exceptions", []), graph)
        for module, path in graph.files.items():
            found = layering.parts_matching(path)
            if len(found) == 1:
                layering.part_of[module] = found[0]
        return layering

    def parts_matching(self, path: str) -> list[str]:
        return [
            part
            for part, patterns in self.parts.items()
            if any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)
        ]

    def modules_of(self, parts: Iterable[str]) -> list[str]:
        wanted = set(parts)
        return sorted(m for m, part in self.part_of.items() if part in wanted)

    def reached(self, names: Iterable[str]) -> tuple[set[str], set[str]]:
        """The parts and the libraries (as named) among modules a closure holds."""
        parts, libraries = set(), set()
        for name in names:
            if name in self.part_of:
                parts.add(self.part_of[name])
            elif name not in self.graph.files and not _ours(name, self.graph):
                libraries.add(name)
        return parts, libraries


def _ours(name: str, graph: ImportGraph) -> bool:
    return name.split(".", 1)[0] in {m.split(".", 1)[0] for m in graph.files}


def covers(prefix: str, name: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def standard(name: str) -> bool:
    return name.split(".", 1)[0] in sys.stdlib_module_names | {"__future__"}


def breaches(rule: dict[str, Any], own: str, parts: set[str], libraries: set[str]) -> set[str]:
    """What of a closure (its parts and libraries) the rule forbids a file of part `own`."""
    found: set[str] = set()
    if "may_reach_only" in rule:
        found |= parts - set(rule["may_reach_only"]) - {own}
    if "may_not_reach" in rule:
        banned = rule["may_not_reach"]
        found |= parts & set(banned)
        found |= {b for b in banned for lib in libraries if covers(b, lib)}
    if "libraries_only" in rule:
        allowed = rule["libraries_only"]
        found |= {
            lib.split(".", 1)[0]
            for lib in libraries
            if not standard(lib) and not any(covers(a, lib) for a in allowed)
        }
    return found


def violations(layering: Layering) -> set[tuple[str, str, str]]:
    """(rule's why, file, what it reaches or names) for every arrow a rule forbids."""
    graph, found = layering.graph, set()
    for rule in layering.rules:
        for module in layering.modules_of(rule["from"]):
            path, own = graph.files[module], layering.part_of[module]
            if "names" in rule:
                named = {
                    n for n in graph.imports[module] if any(covers(b, n) for b in rule["names"])
                }
                if named and path not in rule["names_only_in"]:
                    found |= {(rule["why"], path, min(named))}
                continue
            parts, libraries = layering.reached(graph.closure(module))
            found |= {(rule["why"], path, what) for what in breaches(rule, own, parts, libraries)}
    return found


def excused(layering: Layering) -> set[tuple[str, str]]:
    return {(path, e["reaches"]) for e in layering.exceptions for path in e["files"]}


@cache
def product() -> Layering:
    return Layering.read(PARTS_FILE.read_text(), ImportGraph.of())


def test_every_product_file_is_on_exactly_one_part() -> None:
    layering = product()
    placed = {path: layering.parts_matching(path) for path in product_files()}
    assert {path: parts for path, parts in placed.items() if len(parts) != 1} == {}


def test_every_pattern_and_rule_names_something_that_exists() -> None:
    layering = product()
    files = product_files()
    stale = [p for ps in layering.parts.values() for p in ps if not fnmatch.filter(files, p)]
    assert stale == []
    for rule in layering.rules:
        assert rule.get("why"), rule
        assert set(rule["from"]) <= set(layering.parts), rule["why"]
        assert set(rule.get("may_reach_only", [])) <= set(layering.parts), rule["why"]
        # A name that is no part is a library: a misspelt part would be one no code imports.
        for name in rule.get("may_not_reach", []):
            assert name in layering.parts or _module_name(name), (rule["why"], name)
        assert set(rule.get("names_only_in", [])) <= set(files), rule["why"]


def _module_name(name: str) -> bool:
    return all(p.isidentifier() and not keyword.iskeyword(p) for p in name.split("."))


def test_no_file_reaches_what_its_parts_rules_forbid() -> None:
    layering = product()
    found, known = violations(layering), excused(layering)
    assert sorted(v for v in found if v[1:] not in known) == []
    # An exception that is no longer true is taken off the list.
    assert sorted(known - {v[1:] for v in found}) == []


def loaded_by(modules: list[str]) -> list[str]:
    """Every module a fresh interpreter holds after importing these, less what it holds after
    importing nothing: the whole closure, libraries' own imports included."""
    code = "import sys, importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    code += "print(' '.join(sorted(sys.modules)))"
    bare = "import sys; print(' '.join(sorted(sys.modules)))"
    runs = [subprocess.run([sys.executable, "-c", c], cwd=ROOT, capture_output=True, text=True,
                           timeout=60, check=True) for c in (code, bare)]  # fmt: skip
    return sorted(set(runs[0].stdout.split()) - set(runs[1].stdout.split()))


def test_a_fresh_interpreter_agrees_for_the_parts_that_ask() -> None:
    layering = product()
    checked = [rule for rule in layering.rules if rule.get("fresh_interpreter")]
    assert {p for rule in checked for p in rule["from"]} >= {"domain", "gateway-core"}
    for rule in checked:
        modules = layering.modules_of(rule["from"])
        loaded = loaded_by(modules)
        assert set(modules) <= set(loaded)
        parts, libraries = layering.reached(loaded)
        found = {what for part in rule["from"] for what in breaches(rule, part, parts, libraries)}
        assert sorted(found) == [], rule["why"]


def test_the_fresh_interpreter_sees_a_library_a_module_loads_indirectly() -> None:
    # The gateway's typed node client loads gRPC and chat.v1 through infra/ and itself.
    loaded = loaded_by(["gateway.node_client", "gateway.daily_budget"])
    assert {"grpc", "chat.v1", "google.protobuf", "redis"} <= set(loaded)


def _tree(tmp_path: Path, files: dict[str, str]) -> ImportGraph:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return ImportGraph.of(tmp_path, sorted(files))


SAMPLE_PARTS = """
[parts]
core = ["core/*"]
adapters = ["adapters/*"]
[[rules]]
why = "the core loads no driver"
from = ["core"]
may_not_reach = ["adapters", "redis"]
[[rules]]
why = "only the adapter names the driver"
from = ["core", "adapters"]
names = ["redis"]
names_only_in = ["adapters/cache.py"]
"""


def test_the_check_follows_the_closure_and_function_level_imports(tmp_path: Path) -> None:
    graph = _tree(tmp_path, {
        "core/__init__.py": "",
        "core/plan.py": "from core import helpers\n",
        "core/helpers.py": "def later():\n    from adapters.cache import Cache\n",
        "core/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import redis\n",
        "adapters/__init__.py": "",
        "adapters/cache.py": "import redis.asyncio\n",
    })  # fmt: skip
    layering = Layering.read(SAMPLE_PARTS, graph)
    assert {(path, what) for _, path, what in violations(layering)} == {
        ("core/helpers.py", "adapters"),
        ("core/helpers.py", "redis"),
        ("core/plan.py", "adapters"),
        ("core/plan.py", "redis"),
    }


def test_the_check_sees_a_file_naming_what_only_others_may(tmp_path: Path) -> None:
    graph = _tree(tmp_path, {"core/a.py": "", "adapters/b.py": "from redis import Redis\n"})
    layering = Layering.read(SAMPLE_PARTS, graph)
    assert ("only the adapter names the driver", "adapters/b.py", "redis") in violations(layering)


def test_imports_resolve_relative_names_and_submodules() -> None:
    source = "from . import sibling\nfrom ..up import thing\nimport a.b.c\n"
    found = imports_in(source, "pkg.sub.mod")
    assert {"pkg.sub", "pkg.sub.sibling", "pkg.up", "pkg.up.thing", "a.b.c"} <= found
    assert module_of("gen/chat/v1/common_pb2.py") == "chat.v1.common_pb2"
    assert module_of("domain/safety/__init__.py") == "domain.safety"


# What reading or writing a file looks like in Python source: domain/ does neither (its data
# files are read by the composition roots, which hand domain/ their contents).
FILE_MODULES = {"io", "os", "pathlib", "shutil", "tempfile"}
FILE_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes"}


def file_access(path: Path) -> list[str]:
    """Where a file imports a file-handling module or calls open() or a Path reader/writer."""
    source = path.read_text()
    named = imports_in(source, "sample")
    found = [f"import {m}" for m in sorted({n.split(".", 1)[0] for n in named} & FILE_MODULES)]
    for node in ast.walk(ast.parse(source, str(path))):
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


def test_the_pipeline_does_not_assert_which_implementations_it_has() -> None:
    source = ROOT / "gateway" / "pipeline.py"
    asserts = [
        n.lineno for n in ast.walk(ast.parse(source.read_text())) if isinstance(n, ast.Assert)
    ]
    assert asserts == []
