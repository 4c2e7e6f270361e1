"""How `chatctl up --regions` composes each region: with several schedulers, membership, the
ladder and the rollout in the directory's etcd under the region's own prefix; with Redis, the
region's own key prefix there. And, on real processes, `up --regions --background`, `regions
restart NAME` and `down`."""

from __future__ import annotations

import argparse
import json
import os
import signal
import uuid
from pathlib import Path

import aiohttp
import pytest

from clients.chatctl.main import build_parser, check_up
from clients.chatctl.regions import region_settings
from tests.clients.test_chatctl import alive, chatctl, clean_env
from tests.sse import read_events

ETCD = "127.0.0.1:2379"


def _up(*flags: str) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(["up", "--regions", "a,b", "--listen", "127.0.0.1:8080", *flags])
    check_up(parser, args)
    return args


def test_several_schedulers_a_region_share_the_directorys_etcd_each_under_its_prefix(
    tmp_path: Path,
) -> None:
    args = _up("--schedulers", "2", "--state-dir", str(tmp_path))
    a, b = (region_settings(args, name, i, ETCD, None) for i, name in enumerate(args.regions))
    assert [(s.schedulers, s.etcd_endpoint, s.etcd_prefix) for s in (a, b)] == [
        (2, ETCD, "/chat/v1/regions/a/"),
        (2, ETCD, "/chat/v1/regions/b/"),
    ]
    assert (a.state_dir, a.edge_listen, b.edge_listen) == (
        tmp_path / "regions" / "a",
        "127.0.0.1:8080",
        "127.0.0.1:8081",
    )


def test_one_scheduler_a_region_keeps_membership_in_memory() -> None:
    settings = region_settings(_up(), "a", 0, ETCD, None)
    assert (settings.etcd_endpoint, settings.etcd_prefix, settings.global_etcd_endpoint) == (
        "",
        "",
        ETCD,
    )


def test_gateways_of_each_region_take_their_own_part_of_one_redis() -> None:
    args = _up("--gateways", "2", "--redis", "redis://127.0.0.1:6379/0")
    prefixes = [region_settings(args, name, 0, ETCD, None).redis_prefix for name in args.regions]
    assert prefixes == ["chat:regions:a:", "chat:regions:b:"]


def test_several_schedulers_without_regions_still_need_etcd(capsys) -> None:
    parser = build_parser()
    args = parser.parse_args(["up", "--schedulers", "2"])
    with pytest.raises(SystemExit):
        check_up(parser, args)
    assert "more than one scheduler needs --etcd (or --regions)" in capsys.readouterr().err


# up --regions --background, regions restart, down: real processes --------------------------


async def _answered_and_kept(edge: str, token: str) -> tuple[list[str], str]:
    """A message at the edge, answered: (the conversation's turns as that edge then lists
    them, the answer's text). Served at home, or by a neighbour while home has not yet
    published its node ready: kept at home either way."""
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{edge}/v1/conversations/{conversation}/messages"
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(url, json={"content": "Hello"}) as response:
            assert response.status == 200, await response.text()
            events = await read_events(response)
        assert events[-1].event == "done", events[-1]
        text = "".join(e.data["text"] for e in events if e.event == "delta")
        async with http.get(url) as response:
            assert response.status == 200, await response.text()
            listed = [m["content"] for m in (await response.json())["messages"]]
    return listed, text


@pytest.mark.slow
async def test_up_regions_in_the_background_restart_one_then_down(tmp_path: Path) -> None:
    state = tmp_path / "state"
    flags = ["--state-dir", str(state)]
    env = clean_env(CHAT_NODEAGENT_ENGINE="sim", CHAT_NODEAGENT_SIM_ANSWER_TOKENS="4,8")
    started = await chatctl("up", "--regions", "a,b", "--background", "--insecure",
                            "--listen", "127.0.0.1:0", "--json", *flags, env=env)  # fmt: skip
    assert started.code == 0, started.err + (state / "chatctl.log").read_text()
    summary = started.json()
    pid = summary["pid"]
    try:
        assert (state / "chatctl.pid").read_text().strip() == str(pid)
        assert sorted(summary["regions"]) == ["a", "b"]
        b = summary["regions"]["b"]
        ready_files = {name: state / "regions" / name / "gateway.ready.json" for name in "ab"}
        before = {name: path.stat().st_mtime_ns for name, path in ready_files.items()}

        restarted = await chatctl("regions", "restart", "b", "--json", *flags, env=env)
        assert restarted.code == 0, restarted.err
        reply = restarted.json()
        # Its services started again, at the gRPC addresses they had; a untouched.
        assert (reply["region"], reply["gateway"]) == ("b", b["gateway"])
        after = {name: path.stat().st_mtime_ns for name, path in ready_files.items()}
        assert (after["a"] == before["a"], after["b"] > before["b"]) == (True, True)
        listed, text = await _answered_and_kept(reply["edge"], b["tokens"]["plus"])
        assert listed == ["Hello", text]
        written = json.loads((state / "regions.json").read_text())
        assert written["regions"]["b"]["edge"] == reply["edge"]
        unknown = await chatctl("regions", "restart", "z", *flags, env=env)
        assert (unknown.code, unknown.err) == (1, "chatctl: no region 'z'; the regions are a, b\n")

        stopped = await chatctl("down", "--json", *flags, env=env)
        assert stopped.code == 0, stopped.err
        assert (stopped.json()["pid"], alive(pid)) == (pid, False)
        left = {"chatctl.pid", "regions.json", "regions.sock"} & {p.name for p in state.iterdir()}
        assert left == set()
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
