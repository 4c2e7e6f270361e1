"""A user's personal memory as the gateway serves it: the list they see and edit (ChatService's
memory calls, /v1/memories at the edge), the `remember` tool the model may call in a turn
that offers it, and the entries a stored conversation's turn reads (docs/decisions.md,
"Memory is written on purpose").

Nothing is written from ordinary text: an entry comes from the user's own list or from a
`remember` call, whose arguments pass the output check before it runs (the tool loop's rule
for every call). A text the user writes passes the input check, as their messages do: it
reaches a model in later turns."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from domain.answer_options import ToolDefinition
from domain.errors import FailedPrecondition, InvalidArgument
from domain.memory import MemoryPolicy, memory_block, search_terms
from domain.types import Role, Tier, Turn, User
from gateway.metrics import GatewayMetrics
from gateway.tool_ports import ToolOutcome
from store.base import MemoryStore
from store.records import MemoryRecord

REMEMBER = "remember"
REMEMBER_DESCRIPTION = (
    "Saves one short fact about the user to their memory, which later conversations may read. "
    "Only when the user asks you to remember something."
)
USER_SOURCE = "user"
MODEL_SOURCE = "model"


@dataclass
class MemoryConfig:
    # Entries that enter a stored conversation's turn, the most relevant to its message
    # first; 0: the tier's turns read none (its list is still kept and editable).
    free_top_k: int = 3
    plus_top_k: int = 5
    # An entry not written for this long is aged: listed as aged, never read into a turn
    # unless the user pinned it. 0: entries never age.
    max_age_days: float = 90.0
    # What one entry may hold, and how many one user keeps.
    max_chars: int = 500
    max_entries: int = 200

    def policy(self) -> MemoryPolicy:
        if min(self.free_top_k, self.plus_top_k, self.max_chars, self.max_entries) < 0:
            raise ValueError("memory: top_k, max_chars and max_entries cannot be negative")
        return MemoryPolicy(
            top_k={Tier.FREE: self.free_top_k, Tier.PLUS: self.plus_top_k},
            max_age_s=self.max_age_days * 86_400.0,
            max_chars=self.max_chars,
            max_entries=self.max_entries,
        )


class InputCheck(Protocol):
    def check_input(self, content: str) -> tuple[Any, str] | None: ...


@dataclass(frozen=True, slots=True)
class ListedMemory:
    record: MemoryRecord
    aged: bool


def _new_id() -> str:
    return "mem_" + uuid.uuid4().hex


def _tokens(text: str) -> int:
    """An upper bound of the block's count in any tokenizer the platform serves (a token a
    byte, as gateway/planner.py bounds a message): the window may keep one turn fewer than
    it could, never overflow."""
    return len(text.encode()) + 2


class MemoryDesk:
    def __init__(
        self,
        store: MemoryStore,
        policy: MemoryPolicy,
        clock: Callable[[], float],
        input_check: InputCheck,
        metrics: GatewayMetrics,
    ) -> None:
        self._store = store
        self._policy = policy
        self._clock = clock
        self._input_check = input_check
        self._metrics = metrics

    @property
    def policy(self) -> MemoryPolicy:
        return self._policy

    def over(self, store: MemoryStore) -> MemoryDesk:
        """The same desk over another store: a user's home region's, reached from elsewhere."""
        return MemoryDesk(store, self._policy, self._clock, self._input_check, self._metrics)

    async def list(self, user: User) -> list[ListedMemory]:
        now = self._clock()
        return [ListedMemory(record, self._policy.aged(record.updated_at, record.pinned, now))
                for record in await self._store.list_memories(user.user_id)]  # fmt: skip

    async def get(self, user: User, memory_id: str) -> ListedMemory:
        record = await self._store.get_memory(user.user_id, memory_id)
        return ListedMemory(record, self._policy.aged(record.updated_at, record.pinned,
                                                      self._clock()))  # fmt: skip

    async def create(
        self, user: User, text: str, pinned: bool = False, source: str = USER_SOURCE
    ) -> MemoryRecord:
        kept = self._checked(text, source)
        if len(await self._store.list_memories(user.user_id)) >= self._policy.max_entries:
            raise FailedPrecondition(f"the memory holds at most {self._policy.max_entries} "
                                     "entries: delete one first")  # fmt: skip
        now = self._clock()
        record = MemoryRecord(_new_id(), kept, pinned, source, now, now)
        await self._store.add_memory(user.user_id, record)
        self._metrics.memory_writes.labels(source).inc()
        return record

    async def update(
        self, user: User, memory_id: str, text: str | None, pinned: bool | None
    ) -> MemoryRecord:
        current = await self._store.get_memory(user.user_id, memory_id)
        kept = current.text if text is None else self._checked(text, USER_SOURCE)
        return await self._store.update_memory(
            user.user_id, memory_id, kept, current.pinned if pinned is None else pinned,
            self._clock(),
        )  # fmt: skip

    async def delete(self, user: User, memory_id: str) -> None:
        await self._store.delete_memory(user.user_id, memory_id)

    async def block(self, user: User, message: str) -> Turn | None:
        """The memory turn of a stored conversation's turn: the tier's k entries most
        relevant to the message that have not aged, in the order they were written; None
        when none is."""
        k = self._policy.k(user.tier)
        terms = search_terms(message)
        if k <= 0 or not terms:
            return None
        since = self._policy.fresh_since(self._clock())
        found = await self._store.search_memories(user.user_id, terms, k, since)
        self._metrics.memory_reads.observe(len(found))
        if not found:
            return None
        ordered = sorted(found, key=lambda record: (record.created_at, record.memory_id))
        text = memory_block(record.text for record in ordered)
        return Turn(Role.SYSTEM, text, _tokens(text))

    def remember_tool(self, user: User) -> RememberTool:
        return RememberTool(self, user)

    def _checked(self, text: str, source: str) -> str:
        kept = self._policy.checked_text(text)
        if source == USER_SOURCE and self._input_check.check_input(kept) is not None:
            raise InvalidArgument("this text cannot be kept in memory: it did not pass the "
                                  "platform's input check")  # fmt: skip
        return kept


class NoMemories:
    """A pipeline that reads no memory (one composed without it)."""

    async def block(self, user: User, message: str) -> Turn | None:
        return None


class MemoryReader(Protocol):
    async def block(self, user: User, message: str) -> Turn | None: ...


class RememberTool:
    """The `remember` tool for one user's turn (a ToolServer, label "remember"): the model's
    deliberate write to the user's memory."""

    def __init__(self, desk: MemoryDesk, user: User) -> None:
        self._desk = desk
        self._user = user

    @property
    def label(self) -> str:
        return REMEMBER

    async def list_tools(self) -> list[ToolDefinition]:
        schema = {
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": self._desk.policy.max_chars}},
            "required": ["text"],
            "additionalProperties": False,
        }
        return [
            ToolDefinition(
                name=REMEMBER,
                description=REMEMBER_DESCRIPTION,
                parameters=json.dumps(schema),
            )
        ]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        if name != REMEMBER:
            return ToolOutcome("", f"no tool named {name!r}: only {REMEMBER}")
        text = arguments.get("text")
        if set(arguments) != {"text"} or not isinstance(text, str):
            return ToolOutcome("", 'the arguments must be {"text": "<the fact>"}')
        try:
            record = await self._desk.create(self._user, text, source=MODEL_SOURCE)
        except (InvalidArgument, FailedPrecondition) as refused:
            return ToolOutcome("", str(refused))
        return ToolOutcome(f"remembered ({record.memory_id}): {record.text}")

    async def aclose(self) -> None:
        """Nothing is held."""
