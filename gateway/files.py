"""The files a user uploads for file_search, as the gateway serves them: kept whole with their
passages (domain/passages.py) in the user's store (ChatService's file calls, /v1/files at the
edge), and searched by the `file_search` tool in a turn that offers it, whose results carry
the ids an answer may cite (domain/citations.py).

Only UTF-8 text is kept: the index is lexical, so a file is its words; a PDF or an image
would need an extraction step this platform does not run, and is refused with the reason
rather than indexed as noise. A file's text is the user's own data: it is not passed through
the input check on upload (a document may quote anything), and what a search returns passes
the output check before the model reads it, as every tool result does."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.answer_options import ToolDefinition
from domain.citations import cite
from domain.errors import FailedPrecondition, InvalidArgument
from domain.memory import search_terms
from domain.passages import passages
from domain.types import Tier, User
from gateway.metrics import GatewayMetrics
from gateway.tool_ports import ToolOutcome
from store.base import FileStore
from store.records import FilePassage, FileRecord

FILE_SEARCH = "file_search"
FILE_SEARCH_DESCRIPTION = (
    "Searches the files the user uploaded and returns the passages that match, each with the "
    "marker to cite it by."
)
PURPOSES = frozenset({"user_data", "assistants"})
# What a filename may not hold: a path separator or a control character.
_BAD_NAME_CHARS = frozenset("/\\") | {chr(c) for c in range(32)} | {chr(127)}


@dataclass
class FilesConfig:
    # What one file may be, and how many one user keeps.
    max_bytes: int = 1_048_576
    max_files: int = 100
    # A passage's length in characters: a search result of a few fits beside the turn.
    passage_chars: int = 800
    # Passages one file_search call returns, per tier.
    free_results: int = 4
    plus_results: int = 8

    def __post_init__(self) -> None:
        if min(self.max_bytes, self.max_files, self.passage_chars) < 1:
            raise ValueError("files: max_bytes, max_files and passage_chars must be at least 1")
        if min(self.free_results, self.plus_results) < 0:
            raise ValueError("files: free_results and plus_results cannot be negative")

    def results(self, tier: Tier) -> int:
        return self.plus_results if tier is Tier.PLUS else self.free_results


def passage_id(file_id: str, index: int) -> str:
    return f"{file_id}#{index}"


def passage_ref(passage: str) -> tuple[str, int] | None:
    """(file id, index) of a passage id, None when it is not one."""
    file_id, hash_sign, index = passage.rpartition("#")
    if not hash_sign or not file_id.startswith("file-") or not index.isdigit():
        return None
    return file_id, int(index)


def _new_id() -> str:
    return "file-" + uuid.uuid4().hex[:24]


def _checked_name(filename: str) -> str:
    name = filename.strip()
    if not name or len(name) > 255 or _BAD_NAME_CHARS & set(name):
        raise InvalidArgument("a file needs a name of 1 to 255 characters without a path "
                              "separator or control characters")  # fmt: skip
    return name


class FileDesk:
    def __init__(
        self,
        store: FileStore,
        config: FilesConfig,
        clock: Callable[[], float],
        metrics: GatewayMetrics,
    ) -> None:
        self._store = store
        self._config = config
        self._clock = clock
        self._metrics = metrics

    async def upload(self, user: User, filename: str, purpose: str, data: bytes) -> FileRecord:
        try:
            record, content, cut = self._checked(filename, purpose, data)
            if len(await self._store.list_files(user.user_id)) >= self._config.max_files:
                raise FailedPrecondition(f"a user keeps at most {self._config.max_files} "
                                         "files: delete one first")  # fmt: skip
        except (InvalidArgument, FailedPrecondition):
            self._metrics.file_uploads.labels("refused").inc()
            raise
        await self._store.add_file(user.user_id, record, content, cut)
        self._metrics.file_uploads.labels("kept").inc()
        return record

    async def listed(self, user: User) -> list[FileRecord]:
        return await self._store.list_files(user.user_id)

    async def get(self, user: User, file_id: str) -> FileRecord:
        return await self._store.get_file(user.user_id, file_id)

    async def content(self, user: User, file_id: str) -> str:
        return await self._store.file_content(user.user_id, file_id)

    async def delete(self, user: User, file_id: str) -> None:
        await self._store.delete_file(user.user_id, file_id)

    async def search(self, user: User, query: str) -> list[FilePassage]:
        return await self._store.search_passages(
            user.user_id, search_terms(query), self._config.results(user.tier)
        )

    async def resolving(self, user: User, ids: Sequence[str]) -> frozenset[str]:
        """The ids among these that name a passage of the user's files."""
        refs = {ref: passage for passage in ids if (ref := passage_ref(passage)) is not None}
        found = await self._store.get_passages(user.user_id, list(refs))
        return frozenset(passage_id(p.file_id, p.index) for p in found)

    def search_tool(self, user: User) -> FileSearchTool:
        return FileSearchTool(self, user)

    def _checked(
        self, filename: str, purpose: str, data: bytes
    ) -> tuple[FileRecord, str, list[str]]:
        name = _checked_name(filename)
        if purpose not in PURPOSES:
            raise InvalidArgument(f"purpose {purpose[:40]!r}: one of {', '.join(sorted(PURPOSES))}")
        if not data:
            raise InvalidArgument("the file is empty")
        if len(data) > self._config.max_bytes:
            raise InvalidArgument(f"the file is {len(data)} bytes; at most "
                                  f"{self._config.max_bytes} are kept")  # fmt: skip
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgument("only UTF-8 text files can be searched; this file is not "
                                  f"UTF-8 text (byte {exc.start})") from exc  # fmt: skip
        if "\x00" in content:
            raise InvalidArgument("only text files can be searched; this file holds NUL bytes")
        cut = passages(content, self._config.passage_chars)
        if not cut:
            raise InvalidArgument("the file holds no words to search")
        record = FileRecord(_new_id(), name, purpose, len(data), len(cut), self._clock())
        return record, content, cut


def search_result(found: Sequence[FilePassage]) -> str:
    """What the model reads of a search: each passage under the marker that cites it."""
    if not found:
        return "No passage of the user's files matches this query."
    lines = ["Passages from the user's files. To use one, cite it by writing its marker, "
             "exactly as shown, after the sentence it supports."]  # fmt: skip
    for p in found:
        lines.append(f"\n{cite(passage_id(p.file_id, p.index))} ({p.filename}, passage "
                     f"{p.index + 1})\n{p.text}")  # fmt: skip
    return "\n".join(lines)


class FileSearchTool:
    """The `file_search` tool for one user's turn (a ToolServer, label "file_search"); also
    the turn's source of passages, which says which cited ids resolve."""

    def __init__(self, desk: FileDesk, user: User) -> None:
        self._desk = desk
        self._user = user

    @property
    def label(self) -> str:
        return FILE_SEARCH

    async def list_tools(self) -> list[ToolDefinition]:
        schema = {
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 500}},
            "required": ["query"],
            "additionalProperties": False,
        }
        return [ToolDefinition(FILE_SEARCH, FILE_SEARCH_DESCRIPTION, json.dumps(schema))]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        if name != FILE_SEARCH:
            return ToolOutcome("", f"no tool named {name!r}: only {FILE_SEARCH}")
        query = arguments.get("query")
        if set(arguments) != {"query"} or not isinstance(query, str) or not query.strip():
            return ToolOutcome("", 'the arguments must be {"query": "<what to look for>"}')
        found = await self._desk.search(self._user, query)
        ids = tuple(passage_id(p.file_id, p.index) for p in found)
        return ToolOutcome(search_result(found), passage_ids=ids)

    async def resolving(self, ids: Sequence[str]) -> frozenset[str]:
        return await self._desk.resolving(self._user, ids)

    async def aclose(self) -> None:
        """Nothing is held."""
