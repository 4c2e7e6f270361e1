"""chatctl reaching a platform through a named context, as an operator reaches a cluster:
addresses and credential files from the contexts file, flags and the environment over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.chatctl.platform import LocalPlatform
from tests.clients.test_chatctl import chatctl, clean_env

pytestmark = pytest.mark.slow


def write_token(path: Path, token: str) -> str:
    path.write_text(token + "\n")
    path.chmod(0o600)
    return str(path)


async def test_a_context_names_the_platform_and_its_credentials(
    platform: LocalPlatform, tmp_path: Path
) -> None:
    contexts = str(tmp_path / "contexts.yaml")
    env = clean_env(CHAT_CONTEXTS=contexts)
    empty_state = ["--state-dir", str(tmp_path / "nothing-here")]
    saved = await chatctl(
        "context", "set", "lab",
        "--scheduler", platform.scheduler_address,
        "--gateway", platform.gateway_address,
        "--tls-dir", str(platform.tls_dir),
        "--admin-token-file", write_token(tmp_path / "admin-token", platform.admin_token),
        "--token-file", write_token(tmp_path / "plus-token", platform.tokens["plus"]),
        env=env,
    )  # fmt: skip
    assert saved.code == 0, saved.err
    assert saved.out == f"context lab saved in {contexts}\n"
    await chatctl("context", "set", "elsewhere", "--scheduler", "127.0.0.1:1", env=env)
    listed = await chatctl("context", "list", "--json", env=env)
    assert listed.json()["current"] == "lab"
    assert sorted(listed.json()["contexts"]) == ["elsewhere", "lab"]

    nodes = await chatctl("nodes", "--json", *empty_state, env=env)
    assert nodes.code == 0, nodes.err
    assert [n["node_id"] for n in nodes.json()] == ["local-small-0"]
    limits = await chatctl("limits", "--json", *empty_state, env=env)
    assert limits.code == 0, limits.err
    assert limits.json()["tier"] == "plus"

    # --context picks another; a flag still wins over the context's value.
    elsewhere = await chatctl("nodes", "--context", "elsewhere", *empty_state,
                              "--scheduler", platform.scheduler_address,
                              "--admin-token", platform.admin_token,
                              "--tls-dir", str(platform.tls_dir), "--json", env=env)  # fmt: skip
    assert elsewhere.code == 0, elsewhere.err
    used = await chatctl("context", "use", "elsewhere", env=env)
    assert used.out == "now using context elsewhere\n"
    unknown = await chatctl("nodes", "--context", "nope", *empty_state, env=env)
    assert (unknown.code, unknown.err) == (
        1, f"chatctl: no context 'nope' in {contexts} (known: elsewhere, lab)\n"
    )  # fmt: skip


async def test_a_broken_contexts_file_is_named_in_the_error(tmp_path: Path) -> None:
    contexts = tmp_path / "contexts.yaml"
    contexts.write_text("current: a\ncontexts:\n  a:\n    schedular: 127.0.0.1:1\n")
    run = await chatctl("nodes", env=clean_env(CHAT_CONTEXTS=str(contexts)))
    assert run.code == 1
    assert run.err == (
        f"chatctl: {contexts}: context 'a' has unknown fields ['schedular']; known: scheduler, "
        "gateway, tls_dir, admin_token_file, token_file\n"
    )
