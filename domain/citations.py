"""Citations a model may make to passages the platform retrieved for the turn, written
`[[cite:ID]]` with the passage's id (docs/decisions.md, "Citations cannot be invented")."""

from __future__ import annotations

import re

CITE_OPEN = "[[cite:"
CITE_CLOSE = "]]"
# What an id may be: a passage is `<file id>#<index>`; the grammar an engine decodes under
# and the resolver both rely on ids holding no bracket and no space.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.#:-]{0,79}")
MOST_IDS = 64


def cite(passage_id: str) -> str:
    return f"{CITE_OPEN}{passage_id}{CITE_CLOSE}"
