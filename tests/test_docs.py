"""The design docs hold. docs/ARCHITECTURE.md names what exists: every path it gives is a file
or folder, and every symbol it puts in backticks is in a module the same paragraph, list item or
table row names (or, where it names none, somewhere in the product, its protos or its example
config). docs/decisions.md lists its decisions in an index, each with its status (in force, or
what replaced it), and the files both link to exist."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from tests.import_graph import ROOT, product_files

DOC = ROOT / "docs" / "ARCHITECTURE.md"
SPAN = re.compile(r"`([^`\n]+)`")
SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\(\))?")
# Names every block may use: the wire's (services, calls, fields) and the configuration's.
EVERYWHERE = ["proto/**/*.proto", "deploy/config.example.yaml"]


def blocks(text: str) -> list[str]:
    """The doc's paragraphs, list items and table rows, less its code blocks."""
    found: list[str] = []
    current: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        new_item = bool(re.match(r"\s*([-|]|\d+\.)\s", line))
        if fenced or not line.strip() or new_item:
            found.append(" ".join(current))
            current = []
        if not fenced and line.strip():
            current.append(line)
    found.append(" ".join(current))
    return [b for b in found if b]


def is_path(span: str) -> bool:
    first = span.split("/", 1)[0]
    return "/" in span and " " not in span and bool(first) and (ROOT / first).exists()


def named_paths(block: str) -> list[str]:
    spans = SPAN.findall(block)
    paths = [s for s in spans if is_path(s)]
    folders = {str(Path(p).parent) for p in paths if p.endswith(".py")}
    # `planner.py` after `gateway/pipeline.py` is gateway/planner.py.
    bare = [f"{d}/{s}" for s in spans if re.fullmatch(r"\w+\.py", s) for d in folders]
    return paths + [p for p in bare if (ROOT / p).exists()]


@cache
def text_of(path: str) -> str:
    return (ROOT / path).read_text()


@cache
def everywhere() -> str:
    files = product_files() + [str(p.relative_to(ROOT)) for g in EVERYWHERE for p in ROOT.glob(g)]
    return "\n".join(text_of(f) for f in files)


def missing_symbols(block: str) -> list[str]:
    sources = [p for p in named_paths(block) if (ROOT / p).is_file()]
    folders = [p for p in named_paths(block) if (ROOT / p).is_dir()]
    sources += [f for d in folders for f in product_files() if f.startswith(d.rstrip("/") + "/")]
    haystack = "\n".join(text_of(p) for p in sources) if sources else ""
    haystack += "\n" + "\n".join(text_of(str(p.relative_to(ROOT))) for g in EVERYWHERE
                                 for p in ROOT.glob(g))  # fmt: skip
    if not sources:
        haystack = everywhere()
    missing = []
    for span in SPAN.findall(block):
        if not SYMBOL.fullmatch(span) or re.fullmatch(r"\w+\.py", span):
            continue
        words = span.removesuffix("()").split(".")
        if not all(re.search(rf"\b{re.escape(w)}\b", haystack) for w in words):
            missing.append(span)
    return missing


def test_every_path_the_architecture_names_exists() -> None:
    spans = {s for block in blocks(DOC.read_text()) for s in SPAN.findall(block)}
    absent = sorted(s for s in spans if is_path(s) and not (ROOT / s.rstrip("/")).exists())
    assert absent == []
    bare = {s for s in spans if re.fullmatch(r"\w+\.py", s)}
    assert sorted(s for s in bare if not any(f.endswith("/" + s) for f in product_files())) == []


def test_every_symbol_the_architecture_names_is_in_a_module_it_names() -> None:
    found = {}
    for block in blocks(DOC.read_text()):
        missing = missing_symbols(block)
        if missing:
            found[block[:80]] = missing
    assert found == {}


def test_the_check_sees_a_symbol_missing_from_the_module_named() -> None:
    block = "The pipeline (`gateway/pipeline.py`, `ChatPipeline.send` -> `_no_such_step`)."
    assert missing_symbols(block) == ["_no_such_step"]
    assert blocks("a\nb\n\n- c\n- d\n```\n`x`\n```\n| e |\n") == ["a b", "- c", "- d", "| e |"]


DECISIONS = ROOT / "docs" / "decisions.md"
STATUS = re.compile(r"in force|in force; .+|in force for .+|replaced by .+")


def test_every_decision_is_in_the_index_with_its_status() -> None:
    text = DECISIONS.read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    index, decisions = sections[0], sections[1:]
    assert index.startswith("Index\n")
    listed = re.findall(r"^- \[(.+?)\]\(#([^)]+)\): (.+)$", index, re.M)
    stated = []
    for section in decisions:
        title, _, body = section.partition("\n")
        found = re.match(r"\s*Status: (.+?)\.\n", body)
        assert found, f"{title!r} has no status line"
        assert STATUS.fullmatch(found[1]), (title, found[1])
        stated.append((title, anchor(title), found[1]))
    assert listed == stated


def anchor(title: str) -> str:
    """The anchor a Markdown renderer gives a heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_every_file_the_design_docs_link_exists() -> None:
    for doc in (DOC, DECISIONS):
        links = re.findall(r"\]\(([^)#]+)\)", doc.read_text())
        assert [link for link in links if not (doc.parent / link).exists()] == []
