"""A small SSE reader for tests: parses what the edge writes, the way a browser would."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass
class SseEvent:
    id: int
    event: str
    data: dict[str, Any]


async def read_events(response: aiohttp.ClientResponse) -> list[SseEvent]:
    return [event async for event in iter_events(response)]


async def iter_events(response: aiohttp.ClientResponse) -> AsyncIterator[SseEvent]:
    """Each event as soon as its blank line arrives; comments (keep-alives) are skipped."""
    fields: dict[str, str] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith(":"):
            continue
        if not line:
            if fields:
                yield SseEvent(int(fields["id"]), fields["event"], json.loads(fields["data"]))
                fields = {}
            continue
        key, _, value = line.partition(": ")
        fields[key] = value
