"""The store's parts (store/base.py) against what implements them: each backend has every
method of every part with the part's signature, the parts together are the whole Store with
no method in two of them, and the home region's store (gateway/home_client.py) has exactly
the parts it stands in for and the capture of a prompt, and its memory calls are the memory
part. Read from the classes, with no database."""

from __future__ import annotations

import inspect

import pytest

from gateway.home_client import HomeStore
from gateway.home_memories import HomeMemories
from store.base import (
    ConversationStore,
    FeedbackStore,
    FileStore,
    MemoryStore,
    PromptStore,
    ResponseStore,
    Store,
    SummaryStore,
    UserStore,
)
from store.postgres import PostgresStore
from store.sqlite import SqliteStore

PARTS = (UserStore, ConversationStore, SummaryStore, ResponseStore, FeedbackStore, PromptStore,
         MemoryStore, FileStore, Store)  # fmt: skip


def own(part: type) -> set[str]:
    """The methods a part declares itself (not those of the parts it extends)."""
    return {name for name, value in vars(part).items() if inspect.iscoroutinefunction(value)}


def methods(part: type) -> set[str]:
    """Every method a part asks for, its bases' included."""
    return set().union(*(own(base) for base in part.__mro__ if base in PARTS))


def shape(method: object) -> list[tuple[str, object, object, object]]:
    """A signature as a caller meets it: names, kinds, defaults and annotations, no self."""
    parameters = list(inspect.signature(method).parameters.values())[1:]  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default, p.annotation) for p in parameters]


def test_the_parts_make_the_whole_store_and_share_no_method() -> None:
    declared = [name for part in PARTS for name in own(part)]
    assert len(declared) == len(set(declared)), "a method is declared in two parts"
    assert set(declared) == methods(Store)
    assert len(declared) == 41


@pytest.mark.parametrize("backend", [SqliteStore, PostgresStore], ids=lambda c: c.__name__)
@pytest.mark.parametrize("part", PARTS, ids=lambda p: p.__name__)
def test_each_backend_implements_every_part_in_full(backend: type, part: type) -> None:
    for name in sorted(methods(part)):
        found = getattr(backend, name, None)
        assert inspect.iscoroutinefunction(found), f"{backend.__name__} has no {name}"
        assert shape(found) == shape(getattr(part, name)), f"{backend.__name__}.{name}"


def test_the_home_store_is_the_conversations_and_the_responses_and_nothing_more() -> None:
    for part in (ConversationStore, ResponseStore):
        for name in sorted(methods(part)):
            assert shape(getattr(HomeStore, name)) == shape(getattr(part, name)), name
    # And the capture of a turn's prompt, written at home as the turn is; never read there.
    capture = PromptStore.capture_prompt
    assert shape(HomeStore.capture_prompt) == shape(capture)
    others = methods(Store) - methods(ConversationStore) - methods(ResponseStore)
    assert {name for name in others if hasattr(HomeStore, name)} - {"close"} == {"capture_prompt"}


def test_the_home_regions_memory_is_the_memory_part_in_full() -> None:
    for name in sorted(methods(MemoryStore)):
        assert shape(getattr(HomeMemories, name)) == shape(getattr(MemoryStore, name)), name
