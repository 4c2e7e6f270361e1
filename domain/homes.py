"""Where each conversation's KV cache is: the replica that served its last turn, remembered
per pool by the scheduler (docs/decisions.md, "Where a conversation's cache is").

Bounded: past `capacity` conversations the one written longest ago is forgotten, and its next
turn falls back to its rendezvous favourite, as after a scheduler restart. Keyed by the
conversation's 64-bit hash, valued by node id (strings the pool already holds), so an entry
costs a dict slot and an int. Pure, no I/O."""

from __future__ import annotations


class Homes:
    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("capacity must be 0 or more")
        self._capacity = capacity
        # Insertion order is write order: the first key is the least recently written.
        self._nodes: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, conversation_hash: int) -> str | None:
        return self._nodes.get(conversation_hash)

    def set(self, conversation_hash: int, node_id: str) -> None:
        if not self._capacity:
            return
        nodes = self._nodes
        if nodes.pop(conversation_hash, None) is None and len(nodes) >= self._capacity:
            del nodes[next(iter(nodes))]
        nodes[conversation_hash] = node_id

    def hashes(self) -> list[int]:
        return list(self._nodes)

    def forget(self, conversation_hash: int) -> None:
        self._nodes.pop(conversation_hash, None)

    def clear(self) -> None:
        self._nodes.clear()
