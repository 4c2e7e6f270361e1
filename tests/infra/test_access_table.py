"""README.md's role table for mutual TLS says what infra/access.py enforces: a row per entry of
ACCESS, with the same roles, so a change to one that misses the other fails here."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from infra.access import ACCESS, ALL_ROLES
from infra.tls import Role

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Mutual TLS between the services"
# The services of this platform's own proto package, written without it in the table.
OWN_PACKAGE = "chat.v1"


def readme_table() -> dict[str, frozenset[Role]]:
    """The table's rows: the method as ACCESS keys it, and its roles."""
    section = README.read_text().split(SECTION, 1)[1].splitlines()
    start = section.index("| method | roles | and also |")
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), section[start + 2 :]))
    found: dict[str, frozenset[Role]] = {}
    for row in rows:
        method_cell, roles_cell = [cell.strip() for cell in row.strip("|").split("|")][:2]
        # A row must lead with the method as ACCESS names it; prose alone names none.
        named = re.match(r"`([^`]+)`", method_cell)
        assert named is not None, f"the README's row {method_cell!r} names no method"
        method = named.group(1)
        service = method.split("/", 1)[0]
        key = f"/{method}" if "." in service else f"/{OWN_PACKAGE}.{method}"
        assert key not in found, f"README names {key} twice"
        found[key] = (
            ALL_ROLES
            if roles_cell == "every role"
            else frozenset(Role(r.strip()) for r in roles_cell.split(","))
        )
    return found


def test_the_readme_role_table_is_the_one_infra_access_enforces() -> None:
    shown = readme_table()
    assert {key: sorted(roles) for key, roles in shown.items()} == {
        key: sorted(roles) for key, roles in ACCESS.items()
    }
