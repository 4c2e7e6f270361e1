"""Versioned schema migrations, one folder of numbered .sql files per backend, and the rule
that lets a release be rolled back over a schema a newer release migrated.

Each file's first line says its kind (docs/ARCHITECTURE.md, "Schema changes and rollbacks"):

- `-- kind: expand`: only adds (a table, a column with a default, an index). Every release
  that ran before it still runs after it, so a rolled-back release keeps serving.
- `-- kind: contract, needs NNN`: removes or changes what an older release reads or writes
  (a drop, a rename, a NOT NULL without default). Only releases that know migration NNN (the
  expand migration after which the code stopped using what this removes) or a later one may
  run against the schema after it.

Each applied migration's row in schema_migrations keeps that NNN (`code_floor`, 0 for an
expansion). A release starting on a schema whose highest floor is past the newest migration
it knows refuses to start, naming both (IncompatibleSchema); migrations it does not know
below that floor were expansions, and it serves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import structlog

_KIND = re.compile(r"-- kind: (?:(expand)|contract, needs (\d+))\s*$")


class IncompatibleSchema(RuntimeError):
    """The database was migrated by a newer release past what this one can run against."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    script: str
    # The oldest migration a release must know to run after this one; 0 for an expansion.
    code_floor: int


def parse(name: str, script: str) -> Migration:
    version = int(name.split("_", 1)[0])
    found = _KIND.match(script.split("\n", 1)[0])
    if found is None:
        raise ValueError(
            f"{name}: the first line must be `-- kind: expand` or `-- kind: contract, needs NNN`"
        )
    floor = 0 if found.group(1) else int(found.group(2))
    if floor >= version:
        # The release before a contraction must still run after it: it is the one to roll
        # back to, and it must have stopped using what the contraction removes.
        raise ValueError(f"{name}: a contraction needs a migration before its own")
    return Migration(version, script, floor)


def load(backend: str) -> list[Migration]:
    """The backend's migrations in order, from files named like 001_init.sql."""
    folder = resources.files("store.migrations") / backend
    found = [parse(i.name, i.read_text()) for i in folder.iterdir() if i.name.endswith(".sql")]
    return sorted(found, key=lambda m: m.version)


def pending(known: list[Migration], applied: Mapping[int, int]) -> list[Migration]:
    """The known migrations not applied yet; IncompatibleSchema if a migration this release
    does not know contracted the schema past it. applied: version -> its code_floor."""
    newest = max((m.version for m in known), default=0)
    floor, by = max(((f, v) for v, f in applied.items()), default=(0, 0))
    if floor > newest:
        raise IncompatibleSchema(
            f"the database's schema was contracted by migration {by} of a newer release: it "
            f"needs a release that knows migration {floor} or later, and this one knows up to "
            f"{newest}. Run a newer release (docs/runbook.md, 'Rolling back a release')"
        )
    return [m for m in known if m.version not in applied]


def unknown(known: list[Migration], applied: Mapping[int, int]) -> list[int]:
    """Applied migrations this release does not know: a newer release's expansions."""
    versions = {m.version for m in known}
    return sorted(v for v in applied if v not in versions)


def report_newer(known: list[Migration], applied: Mapping[int, int]) -> None:
    """Logs a rolled-back release serving on a newer release's expansions (expected after a
    rollback; worth knowing when it was not one)."""
    newer = unknown(known, applied)
    if newer:
        structlog.get_logger(component="store").warning(
            "the schema has migrations of a newer release, all expansions: serving",
            unknown=newer, newest_known=max((m.version for m in known), default=0),
        )  # fmt: skip
