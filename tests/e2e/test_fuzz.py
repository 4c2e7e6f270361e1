"""Schemathesis fuzzes the edge from its own OpenAPI document, against a running platform:
no 5xx, no crashed process, and nothing stored by a request that was refused."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given
from schemathesis import GenerationMode

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from edge.openapi import DOCUMENT

pytestmark = pytest.mark.slow

# At most this many per operation and generation mode: 18 operations x 2 modes, some with
# fewer distinct cases (no parameters): about 300 requests, well under a minute.
EXAMPLES = 12
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)


@pytest.fixture(scope="module")
async def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    # A simulated replica and short answers: the fuzzer probes the HTTP surface, not the model.
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("fuzz"),
            edge_listen="127.0.0.1:0",
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                "CHAT_NODEAGENT_SIM_SPEED": "20",
                "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "8",
                "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e9",
            },
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


def stored(database: Path) -> tuple[int, int]:
    """Conversations and messages in the platform's store, read beside the platform."""
    with sqlite3.connect(database) as db:
        conversations = db.execute("SELECT count(*) FROM conversations").fetchone()[0]
        messages = db.execute("SELECT count(*) FROM messages").fetchone()[0]
    return conversations, messages


def fuzz_operation(
    operation: schemathesis.APIOperation,
    mode: GenerationMode,
    edge_url: str,
    session: requests.Session,
    database: Path,
    problems: list[str],
) -> int:
    """Fuzzes one operation; adds what went wrong to problems and answers how many calls."""
    calls = 0

    @given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def probe(case: schemathesis.Case) -> None:
        nonlocal calls
        calls += 1
        before = stored(database)
        response = case.call(base_url=edge_url, session=session, timeout=30)
        label = f"{mode.value} {case.method} {case.formatted_path}"
        if response.status_code >= 500:
            problems.append(f"{label}: {response.status_code} {response.text[:200]}")
        elif response.status_code >= 400 and stored(database) != before:
            problems.append(f"{label}: {response.status_code} yet something was stored")

    try:
        probe()
    except hypothesis.errors.Unsatisfiable:
        pass  # nothing in this operation can be made invalid (no parameters, no body)
    return calls


def fuzz(edge_url: str, token: str, database: Path) -> tuple[list[str], int]:
    """Runs every operation in both modes: what went wrong, one line each, and the calls."""
    session = requests.Session()
    # The generated requests carry a real user's token, so they reach the gateway; negative
    # cases may still replace or drop it.
    session.headers["Authorization"] = f"Bearer {token}"
    problems: list[str] = []
    calls = 0
    for result in SCHEMA.get_all_operations():
        for mode in GenerationMode:
            calls += fuzz_operation(result.ok(), mode, edge_url, session, database, problems)
    return problems, calls


async def test_the_fuzzer_finds_no_server_error_and_no_half_stored_request(fuzzed) -> None:
    database = fuzzed.settings.state_dir / "chat.db"
    problems, calls = await asyncio.to_thread(
        fuzz, fuzzed.edge_url, fuzzed.tokens["free"], database
    )
    assert problems == []
    assert calls >= 200  # the run was not cut short
    assert all(child.process.returncode is None for child in fuzzed.children)
    response = await asyncio.to_thread(requests.get, f"{fuzzed.edge_url}/healthz", timeout=5)
    assert response.status_code == 200
