"""Session-wide real servers. Each starts once per test session on free ports."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings


@pytest.fixture(scope="session")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """The whole local platform: scheduler, one llama.cpp nodeagent, gateway, edge."""
    state = tmp_path_factory.mktemp("platform")
    local = LocalPlatform(
        PlatformSettings(
            state_dir=state,
            edge_listen="127.0.0.1:0",
            nodes=1,
            slot_context_tokens=4096,
            parallel=2,
        )
    )
    try:
        await local.start()
        yield local
    finally:
        await local.stop()
