"""A region that died, while the others still count it in: what its users are told. Two regions
on one machine (each a whole platform) and the global directory in etcd; region b is killed
whole, and a's gateway goes on passing b's users' calls to b's dead gateway (a region is out
only region_out_after_s after its last word, here a minute, so the test is not racing a
clock). Those calls fail with gRPC's own text, which names b's addresses: users get a 503
saying what happened in their terms, with a Retry-After, in the conversation API's shape and
in OpenAI's, and the addresses go to the edge's log."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from infra.certs import Authority
from tests.e2e.regions_support import create_user, until_seen
from tests.servers import Etcd

pytestmark = pytest.mark.slow

NO_GATEWAY = "region 'b' has no gateway to pass the message to"
UNREACHABLE = (
    "the service could not reach a server it needs for this request (one that is down or "
    "restarting); try again in a few seconds"
)
# An internal address as gRPC writes one: 127.0.0.1:50052, [::1]:50052, ipv4:..., a name:port.
ADDRESS = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}:\d+|\[[0-9a-fA-F:]+\]:\d+|ipv[46]:|localhost:\d+")


@pytest.fixture(scope="module")
async def regions(
    tmp_path_factory: pytest.TempPathFactory, etcd_server: Etcd
) -> AsyncIterator[dict[str, LocalPlatform]]:
    authority = Authority.create()
    prefix = f"/region-errors-{uuid.uuid4().hex[:8]}/"
    platforms = {
        name: LocalPlatform(
            PlatformSettings(
                state_dir=tmp_path_factory.mktemp(f"region-{name}"),
                edge_listen="127.0.0.1:0",
                nodes=1,
                region=name,
                global_etcd_endpoint=etcd_server.endpoint,
                authority=authority,
                extra_env={
                    "CHAT_NODEAGENT_ENGINE": "sim",
                    "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "10,20",
                    "CHAT_GATEWAY_ROUTER": "false",
                    "CHAT_GATEWAY_GLOBAL_PREFIX": prefix,
                    "CHAT_SCHEDULER_GLOBAL_PREFIX": prefix,
                    "CHAT_GATEWAY_REGION_OUT_AFTER_S": "60",
                },
            )
        )
        for name in ("a", "b")
    }
    try:
        await asyncio.gather(*(p.start() for p in platforms.values()))
        yield platforms
    finally:
        await asyncio.gather(*(p.stop() for p in platforms.values()))


async def refused(
    http: aiohttp.ClientSession, method: str, url: str, token: str, body: dict | None = None
) -> tuple[int, str | None, dict]:
    """(status, Retry-After, the JSON body) of a request that fails."""
    async with http.request(
        method, url, json=body, headers={"Authorization": f"Bearer {token}"}
    ) as response:
        return response.status, response.headers.get("Retry-After"), await response.json()


async def test_a_dead_regions_users_get_a_503_without_its_addresses(regions) -> None:
    a, b = regions["a"], regions["b"]
    carol = await create_user(b)
    async with aiohttp.ClientSession() as http:
        await until_seen(http, a, {"up:b": 1}, 10.0)
        for child in b.children:
            child.process.send_signal(signal.SIGKILL)
        await asyncio.gather(*(child.process.wait() for child in b.children))
        message = {"content": "Is anyone there?"}
        answers = {
            "send": await refused(
                http, "POST", f"{a.edge_url}/v1/conversations/c1/messages", carol, message
            ),
            "list": await refused(http, "GET", f"{a.edge_url}/v1/conversations", carol),
            "respond": await refused(
                http,
                "POST",
                f"{a.edge_url}/v1/responses",
                carol,
                {"model": "auto", "input": "Is anyone there?"},
            ),
        }
        # Still counted in: every call above went to b's gateway, not past it.
        await until_seen(http, a, {"up:b": 1}, 1.0)
    retry = "5"  # seconds: about how long a lost server takes to be passed over
    # Which words a call gets depends on when a's gateway sees b's gateways' leases end: until
    # then it calls b and the edge words gRPC's failure itself; after, the gateway says so in
    # its own words. Neither may carry an address.
    wordings = {UNREACHABLE, NO_GATEWAY}
    assert {name: (status, after) for name, (status, after, _) in answers.items()} == {
        name: (503, retry) for name in answers
    }
    said = {name: body["error"]["message"] for name, (_, _, body) in answers.items()}
    assert set(said.values()) <= wordings, said
    assert answers["respond"][2]["error"]["type"] == "server_error"
    assert set(answers["send"][2]["error"]) == {"status", "message"}
    assert not ADDRESS.search(json.dumps(answers))
    if any(body["error"]["message"] == UNREACHABLE for _, _, body in answers.values()):
        # What gRPC said, addresses and all, is in the edge's log for whoever looks into it.
        log = (a.settings.state_dir / "edge.log").read_text().splitlines()
        logged = [line for line in log if '"call failed"' in line and ADDRESS.search(line)]
        assert logged, log[-20:]
