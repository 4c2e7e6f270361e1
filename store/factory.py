"""Picks the store backend from one URL, so a service's config names its store in one field."""

from __future__ import annotations

from store.base import Store
from store.postgres import PostgresStore
from store.sqlite import SqliteStore

_SQLITE_PREFIX = "sqlite:///"
_POSTGRES_SCHEMES = ("postgresql", "postgres")


def store_for(url: str) -> Store:
    """The store a URL names, not yet opened.

    `sqlite:///rel/path.db` is relative and `sqlite:////abs/path.db` absolute, as SQLAlchemy
    reads them; a bare path is SQLite too, so configs from before store_url keep working.
    """
    scheme, separator, _ = url.partition("://")
    if not separator:
        if not url:
            raise ValueError("the store URL is empty: use sqlite:///PATH or postgresql://...")
        return SqliteStore(url)
    if scheme.lower() in _POSTGRES_SCHEMES:
        return PostgresStore(url)
    if scheme.lower() == "sqlite" and url[: len(_SQLITE_PREFIX)].lower() == _SQLITE_PREFIX:
        path = url[len(_SQLITE_PREFIX) :]
        if path:
            return SqliteStore(path)
    raise ValueError(
        f"unsupported store URL {url!r}: use sqlite:///PATH (relative), sqlite:////PATH "
        "(absolute), a bare file path, or postgresql://USER@HOST:PORT/DATABASE"
    )


async def open_store(url: str) -> Store:
    """The store a URL names, opened (migrated) and ready to use."""
    store = store_for(url)
    await store.open()
    return store
