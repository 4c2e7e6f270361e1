"""The product's import graph, read from the sources with ast: which module imports which, at
any depth of a file (function-level imports too: they load when called), less the imports made
only for the type checker. Our modules are walked; anything else is a leaf, named as imported."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where product sources live; gen/ holds the generated protobuf modules (imported as chat.*).
SOURCE_DIRS = ["domain", "infra", "store", "gateway", "nodeagent", "scheduler", "edge",
               "clients", "fleet", "gen", "scripts", "bench", "deploy"]  # fmt: skip


def product_files(root: Path = ROOT) -> list[str]:
    """Every product .py file, as a path relative to the root."""
    found: list[str] = []
    for folder in SOURCE_DIRS:
        found += [
            str(path.relative_to(root))
            for path in (root / folder).rglob("*.py")
            if "__pycache__" not in path.parts and "results" not in path.parts
        ]
    return sorted(found)


def module_of(path: str) -> str:
    """The module a file is imported as: gen/ is a source root of its own."""
    parts = Path(path.removeprefix("gen/")).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _type_checking_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(source: str, module: str, is_package: bool = False) -> set[str]:
    """The modules a file's import statements name (from X import Y names X and X.Y: which of
    them is a module is for the graph to say)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(source)]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        stack.extend(ast.iter_child_nodes(node))
    return found


@dataclass
class ImportGraph:
    files: dict[str, str]  # module -> path
    imports: dict[str, set[str]]  # module -> what it imports: ours by module, others as named

    @classmethod
    def of(cls, root: Path = ROOT, paths: Iterable[str] | None = None) -> ImportGraph:
        files = {module_of(p): p for p in (product_files(root) if paths is None else paths)}
        named = {
            module: imports_in((root / path).read_text(), module, path.endswith("__init__.py"))
            for module, path in files.items()
        }
        imports: dict[str, set[str]] = {}
        for module, names in named.items():
            edges: set[str] = set()
            for name in names:
                if name in files or not _ours(name, files):
                    edges.add(name)
                # Importing a.b.c runs a's and a.b's __init__ too.
                parts = name.split(".")
                edges.update(p for i in range(1, len(parts)) if (p := ".".join(parts[:i])) in files)
            # from X import Y, Y not a module of ours: X was imported, Y is a name in it.
            imports[module] = {e for e in edges if e in files or not _ours(e, files)} - {module}
        return cls(files, imports)

    @cached_property
    def ours(self) -> frozenset[str]:
        return frozenset(self.files)

    def closure(self, module: str) -> set[str]:
        """Every module importing this one loads, at any depth, ours and others'."""
        seen: set[str] = set()
        todo = [module]
        while todo:
            current = todo.pop()
            for name in self.imports.get(current, ()):
                if name not in seen:
                    seen.add(name)
                    if name in self.files:
                        todo.append(name)
        return seen


def _ours(name: str, files: dict[str, str]) -> bool:
    """Whether a name is under one of our top-level packages (a module, or a name in one)."""
    return name.split(".", 1)[0] in {m.split(".", 1)[0] for m in files}
