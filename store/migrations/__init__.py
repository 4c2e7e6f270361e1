"""Versioned schema migrations, one folder of numbered .sql files per backend."""

from __future__ import annotations

from importlib import resources


def load(backend: str) -> list[tuple[int, str]]:
    """(version, script) pairs in order, from files named like 001_init.sql."""
    folder = resources.files("store.migrations") / backend
    found = []
    for item in folder.iterdir():
        if item.name.endswith(".sql"):
            found.append((int(item.name.split("_", 1)[0]), item.read_text()))
    return sorted(found)
