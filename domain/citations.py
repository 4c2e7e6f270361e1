"""Citations a model may make to passages the platform retrieved for the turn, written
`[[cite:ID]]` with the passage's id, and the check that keeps an invented one off the screen
(docs/decisions.md, "Citations cannot be invented").

Two controls hold together. The engine decodes the answer under a grammar that lets `[[`
open only a citation of an id retrieved this turn (nodeagent/citation_grammar.py), so a model
that obeys the engine cannot invent one. The resolver here reads the text before it is shown,
for engines or steps the grammar did not bind (a step that still offered tools, an operator
who turned the grammar off) and for citation-shaped prose the grammar allows:

- C01: an id that resolves to a passage of the user's but was not retrieved this turn (the
  model cannot have read it);
- C02: an id that resolves to nothing;
- C03: prose shaped like a citation with no id (`[1]`, `[^2]`, `(source: ...)`, a broken
  `[[cite]]`), which a reader takes for a reference the platform vouches for.

A C01 or C02 marker is removed; a C03 form is removed unless the surface allows it (a
surface whose readers use footnotes may keep `[^1]`). The resolver holds back only what may
still become a marker (an opening bracket not yet closed, at most MAX_MARKER characters), so
it adds no delay to plain text; `finish` reads the whole shown answer once more for what a
chunk's edge let through, which is then counted (it cannot be unshown)."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

CITE_OPEN = "[[cite:"
CITE_CLOSE = "]]"
# What an id may be: a passage is `<file id>#<index>`; the grammar an engine decodes under
# and the resolver both rely on ids holding no bracket and no space.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.#:-]{0,79}")
MOST_IDS = 64
# The longest text a marker may span; an opening bracket left open longer opens none.
MAX_MARKER = 120


def cite(passage_id: str) -> str:
    return f"{CITE_OPEN}{passage_id}{CITE_CLOSE}"


class Finding(StrEnum):
    """What the resolver made of one marker (the metric's outcome label)."""

    RESOLVED = "resolved"  # an id retrieved this turn: kept
    NOT_RETRIEVED = "not_retrieved"  # C01: removed
    UNRESOLVED = "unresolved"  # C02: removed
    UNCITED_FORM = "uncited_form"  # C03: removed
    ALLOWED_FORM = "allowed_form"  # C03 the surface allows: kept
    MISSED = "missed"  # found by the final pass only: shown


class Form(StrEnum):
    """Citation-shaped prose with no id (C03), by shape; a surface allows some by name."""

    BRACKET_NUMBER = "bracket_number"  # [1], [2, 3]
    FOOTNOTE = "footnote"  # [^1]
    SOURCE_NOTE = "source_note"  # (source: the report), [doc 2]
    BROKEN_CITE = "broken_cite"  # [[cite]], [[cite:]], [cite:x], [[cite:two words]]
    LENTICULAR = "lenticular"  # 【3†source】


_MARKERS = re.compile(
    r"(?P<lead>[ \t]*)(?:"
    r"\[\[cite:(?P<id>[A-Za-z0-9][A-Za-z0-9_.#:-]{0,79})\]\]"
    r"|(?P<broken_cite>\[\[?\s*cite\b[^\]\n]{0,80}\]\]?)"
    r"|(?P<footnote>\[\^[^\]\s]{1,20}\])"
    r"|(?P<bracket_number>(?<![\w\])])\[\d{1,3}(?:\s*[,\u2013-]\s*\d{1,3})*\](?![(:\[]))"
    r"|(?P<source_note>[\[(](?:sources?|refs?\.?|references?|citations?|docs?|documents?"
    r"|passages?)(?:\s*[:#]\s*[^\])\n]{1,60}|\s+\d{1,3})[\])])"
    r"|(?P<lenticular>\u3010[^\u3011\n]{0,60}\u3011)"
    r")",
    re.IGNORECASE,
)
_FORMS = tuple(form.value for form in Form)
# Each opening, and what closes it: text is held from an opening not yet closed.
_CLOSERS = {"[[": "]]", "[": "]", "(": ")", "\u3010": "\u3011"}


def _held_from(text: str) -> int:
    """Where the part of `text` that may still grow into a marker begins: the first opening
    bracket of the last MAX_MARKER characters not yet closed, or a bracket closing the text
    (`[1]` followed by `(` is a link, not a citation), with the blanks before it (a removed
    marker takes its leading blank along)."""
    start = max(0, len(text) - MAX_MARKER)
    held = len(text)
    for i in range(start, len(text)):
        opening = "[[" if text.startswith("[[", i) else text[i]
        closer = _CLOSERS.get(opening)
        if closer is not None and text.find(closer, i + len(opening)) < 0:
            held = i
            break
    if held == len(text) and text.endswith("]"):
        opened = text.rfind("[", start)
        if opened >= 0:
            held = opened - 1 if opened > 0 and text[opened - 1] == "[" else opened
    while held > 0 and text[held - 1] in " \t":
        held -= 1
    return held


@dataclass(slots=True)
class CitationReport:
    """One answer's markers, by finding; the ids of its C01/C02 markers in `uncited_ids`."""

    counts: dict[Finding, int] = field(default_factory=dict)
    cited_ids: list[str] = field(default_factory=list)
    unretrieved_ids: list[str] = field(default_factory=list)

    def add(self, finding: Finding) -> None:
        self.counts[finding] = self.counts.get(finding, 0) + 1


class CitationResolver:
    """Checks one answer's text as it streams: feed it the text the output check released,
    show what it returns; `finish` returns the rest. Whether an id not retrieved this turn
    resolves (C01) or not (C02) needs the store, so it is decided after the answer:
    `classify` takes the ids of those that resolve."""

    def __init__(self, retrieved: Collection[str], allowed_forms: Collection[str] = ()) -> None:
        unknown = set(allowed_forms) - set(_FORMS)
        if unknown:
            raise ValueError(f"unknown citation forms {sorted(unknown)}; known: {_FORMS}")
        # The ids read so far this turn: a later step may cite what an earlier one retrieved.
        self.retrieved = frozenset(retrieved)
        self._allowed = frozenset(allowed_forms)
        self._pending = ""
        self._before = ""  # the last character shown, for the look-behind of `[1]`
        self._shown: list[str] = []
        self.report = CitationReport()

    def feed(self, text: str) -> str:
        self._pending += text
        return self._release(_held_from(self._pending))

    def flush(self) -> str:
        """The held rest, repaired: the text it held will not be continued."""
        return self._release(len(self._pending))

    def finish(self) -> str:
        """The held rest, repaired; then the final pass over the whole shown answer."""
        rest = self.flush()
        for match in _MARKERS.finditer("".join(self._shown)):
            if self._keeps(match, count=False) is None:
                self.report.add(Finding.MISSED)
        return rest

    def classify(self, resolving: Collection[str]) -> CitationReport:
        """The report, with each unretrieved id counted as C01 (it resolves) or C02."""
        for passage_id in self.report.unretrieved_ids:
            self.report.add(Finding.NOT_RETRIEVED if passage_id in resolving
                            else Finding.UNRESOLVED)  # fmt: skip
        return self.report

    def _show(self, text: str) -> str:
        if text:
            self._shown.append(text)
            self._before = text[-1]
        return text

    def _release(self, held: int) -> str:
        """The pending text up to `held`, repaired. The markers are read with the shown
        character before (a look-behind) and the held text after (a look-ahead) as context;
        one that runs into the held text waits with it."""
        joined = self._before + self._pending
        end = len(self._before)
        limit = end + held
        pieces = []
        for match in _MARKERS.finditer(joined, end):
            if match.start() >= limit:
                break
            if match.end() > limit:
                limit = match.start()
                break
            if not self._keeps(match, count=True):
                pieces.append(joined[end : match.start()])
                end = match.end()
        pieces.append(joined[end:limit])
        self._pending = joined[limit:]
        return self._show("".join(pieces))

    def _keeps(self, match: re.Match[str], count: bool) -> bool | None:
        """Whether the marker stays; None when the final pass finds one that should not have
        been shown. Counts what it decides when `count`."""
        passage_id = match.group("id")
        if passage_id is not None:
            if passage_id in self.retrieved:
                if count:
                    self.report.add(Finding.RESOLVED)
                    self.report.cited_ids.append(passage_id)
                return True
            if count:
                self.report.unretrieved_ids.append(passage_id)
            return False if count else None
        form = next(name for name in _FORMS if match.group(name) is not None)
        if form in self._allowed:
            if count:
                self.report.add(Finding.ALLOWED_FORM)
            return True
        if count:
            self.report.add(Finding.UNCITED_FORM)
            return False
        return None


def hallucinated(report: CitationReport) -> tuple[int, int]:
    """(ids cited, of them failed): the canary's citation guardrail's counts."""
    failed = report.counts.get(Finding.NOT_RETRIEVED, 0) + report.counts.get(Finding.UNRESOLVED, 0)
    return report.counts.get(Finding.RESOLVED, 0) + failed, failed


def ids_in(texts: Iterable[str]) -> list[str]:
    """Every well-formed citation id in the texts, in order of first appearance."""
    seen: dict[str, None] = {}
    for text in texts:
        for match in _MARKERS.finditer(text):
            if match.group("id") is not None:
                seen.setdefault(match.group("id"), None)
    return list(seen)
