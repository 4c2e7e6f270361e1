"""The metric names a PromQL expression reads, for checking rules, panels and adapter queries
against what the services export. A tokenizer, not a parser: it drops what cannot name a
metric (strings, label matchers, ranges, grouping clauses, Grafana's $variables) and keeps the
identifiers that are not functions or keywords."""

from __future__ import annotations

import re

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# An identifier that starts a token: not inside a number (5m, 1e3), a $variable or a name.
_IDENTIFIER = re.compile(r"(?<![\w.$:])[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
             "group_right", "offset", "bool", "inf", "nan", "atan2", "start", "end"}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    text = _STRINGS.sub(" ", expr)
    text = _BRACES.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names
