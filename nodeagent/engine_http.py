"""The HTTP side of the engine adapters: one connection pool to the engine, and the reader of
its OpenAI-style event streams. Shared by the llama.cpp and vLLM adapters, so the two cannot
drift."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

# vLLM's API server (uvicorn) closes a kept-alive connection after 5 s idle, and a request
# written into a connection the engine is closing fails, so this side lets go of an idle one
# well before the engine does. Keeping connections saves a TCP handshake and aiohttp's
# connection set-up (about 1 ms of the node's CPU here) on every answer, token count, health
# check and metrics read. The llama.cpp adapter does not keep them (nodeagent/llamacpp.py).
ENGINE_KEEPALIVE_S = 2.0


def engine_session(
    timeout: aiohttp.ClientTimeout, keep_alive: bool = True
) -> aiohttp.ClientSession:
    """A session whose pool has no cap: how many answers run at once is the scheduler's and
    the engine's business, and a cap here would queue answers inside the node where nobody
    sees them. With keep_alive it keeps idle connections ENGINE_KEEPALIVE_S; without, every
    request has a connection of its own, closed after it."""
    if keep_alive:
        connector = aiohttp.TCPConnector(keepalive_timeout=ENGINE_KEEPALIVE_S, limit=0)
    else:
        connector = aiohttp.TCPConnector(force_close=True, limit=0)
    return aiohttp.ClientSession(timeout=timeout, connector=connector)


# Each event's values are as json.loads gives them (Any): the engine's own shapes, which each
# adapter reads defensively.
async def sse_events(stream: aiohttp.StreamReader) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an event stream's `data:` lines, until `[DONE]` or its end. Reads
    whatever arrived at once rather than a line at a time: an engine sends each token as
    one small write, so this is one wake-up a token instead of one a line. After `[DONE]` it
    reads on to the body's end (the engine ends it right away): a connection whose body was
    not read to its end is closed rather than kept."""
    pending = b""
    done = False
    async for block in stream.iter_any():
        if done:
            continue
        pending += block
        *lines, pending = pending.split(b"\n")
        for line in lines:
            event = _event_of(line)
            if event is _DONE:
                done = True
                break
            if event is not None:
                yield event
    event = None if done else _event_of(pending)
    if event is not None and event is not _DONE:
        yield event


_DONE: dict[str, object] = {}


def _event_of(line: bytes) -> dict[str, object] | None:
    """The line's event; _DONE for the stream's end; None for anything else (comments, event
    names, blank lines, a data line that is not a JSON object)."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if data == b"[DONE]":
        return _DONE
    try:
        event = json.loads(data)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None
