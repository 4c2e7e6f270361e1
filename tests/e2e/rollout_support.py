"""What the rollout's end-to-end tests share: admin clients, users made for a slice, and one
message sent through the edge with what its meta and done events said."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from clients.admin_client import AdminClient
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from clients.rollout_client import RolloutClient
from domain.rollout import RolloutState, Slice, assign
from domain.types import Tier
from tests.clients.test_chatctl import Run, start
from tests.sse import read_events


async def gateway_metric(platform: LocalPlatform, name: str) -> dict[tuple[str, ...], float]:
    """One series of the gateway's /metrics, by its label values."""
    port = next(c.ready for c in platform.children if c.name == "gateway")["metrics"]
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    return {
        tuple(s.labels.values()): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


async def gateway_caught_up(platform: LocalPlatform, admin: RolloutClient) -> float:
    """Waits until the gateway applies the scheduler's rollout; the seconds it took."""
    revision, _ = await admin.revised()
    started = time.monotonic()
    for _ in range(200):
        if (await gateway_metric(platform, "gateway_rollout_revision"))[()] >= revision:
            return time.monotonic() - started
        await asyncio.sleep(0.05)  # a poll of the gateway's metrics, not a wait for timing
    raise AssertionError(f"the gateway never reached rollout revision {revision}")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def rollout_admin(platform: LocalPlatform) -> AsyncIterator[RolloutClient]:
    async with RolloutClient(platform.scheduler_address, platform.admin_token,
                             tls=platform.tls()) as client:  # fmt: skip
        yield client


def rollout_platform_settings(state_dir: Path) -> PlatformSettings:
    """The rollout tests' own platform: they change the current version and the split, which
    the session's shared platform must not see. Answers are capped short (the tests read
    versions and routes, not prose), Plus has a tiny daily allowance, and the canary judges
    on a few answers."""
    return PlatformSettings(
        state_dir=state_dir,
        edge_listen="127.0.0.1:0",
        nodes=1,
        slot_context_tokens=2048,
        parallel=2,
        extra_env={
            "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "12",
            "CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": "12",
            "CHAT_GATEWAY_PLUS_DAILY_ALLOWANCE": str(PLUS_DAILY_ALLOWANCE),
            "CHAT_SCHEDULER_CANARY_WINDOW_S": "60",
            "CHAT_SCHEDULER_CANARY_MIN_ANSWERS": "4",
            # The rollback test's deliberate errors must not open a pool's breaker: an open
            # breaker moves later tests' messages to the small pool before the allowance
            # decides, so their outcome would depend on the order the tests run in.
            "CHAT_GATEWAY_BREAKER_FAILURES_TO_OPEN": "1000000",
        },
    )


# Weighted tokens: any answer written on the small pool spends it, whatever the engine's
# prefix cache held and however short the answer: one output token alone costs 4 x 0.27.
# (At 10, a greeting of a few tokens after a cached prompt cost less, and the next message
# was not downgraded.)
PLUS_DAILY_ALLOWANCE = 1


@dataclass(frozen=True)
class Sent:
    message_id: str
    status: int
    version: str
    downgraded: str
    model: str
    input_tokens: int
    finish: str
    text: str
    # The pool that served and why it is not the one asked for: the meta event's and the
    # response's headers' (X-Pool, X-Pool-Reason), each as the pair.
    pool: tuple[str, str] = ("", "")
    headers: tuple[str, str] = ("", "")


async def send(
    platform: LocalPlatform, token: str, conversation: str, content: str, model: str = "auto"
) -> Sent:
    message_id = new_id("m")
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream",
               "Idempotency-Key": message_id}  # fmt: skip
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{platform.edge_url}/v1/conversations/{conversation}/messages",
                  json={"content": content, "model": model}, headers=headers) as response,
    ):  # fmt: skip
        if response.content_type != "text/event-stream":
            body = await response.json()
            return Sent(message_id, response.status, "", "", "", 0, "", str(body))
        events = await read_events(response)
        headers = (response.headers.get("X-Pool", ""), response.headers.get("X-Pool-Reason", ""))
    meta, last = events[0].data, events[-1]
    text = "".join(e.data["text"] for e in events if e.event == "delta")
    # An error event (the answer failed after it started) ends the stream instead of done.
    finish = last.data["finish"] if last.event == "done" else "error"
    used = last.data["usage"]["input"] if last.event == "done" else 0
    return Sent(message_id, response.status, meta["version"], meta["downgraded"], meta["model"],
                used, finish, text, (meta["pool"], meta["poolReason"]), headers)  # fmt: skip


@dataclass(frozen=True)
class Completed:
    status: int
    body: dict
    replica: str


async def complete(
    platform: LocalPlatform, token: str, content: str, model: str = "auto"
) -> Completed:
    """One POST /v1/chat/completions with the user's message alone (no system message of the
    caller's, so the serving version's system prompt leads)."""
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 12}
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{platform.edge_url}/v1/chat/completions"
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as reply:
        return Completed(reply.status, await reply.json(), reply.headers.get("X-Replica", ""))


async def rate(
    platform: LocalPlatform, token: str, message_id: str, body: object
) -> tuple[int, dict]:
    """POST /v1/messages/{id}/feedback: the status and the JSON reply."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{platform.edge_url}/v1/messages/{message_id}/feedback"
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as reply:
        return reply.status, await reply.json()


async def new_user(platform: LocalPlatform, tier: Tier) -> tuple[str, str]:
    user_id = new_id(f"ro-{tier.value}")
    async with AdminClient(platform.scheduler_address, platform.admin_token,
                           tls=platform.tls()) as admin:  # fmt: skip
        return user_id, (await admin.create_user(user_id, tier.value)).token


async def users_in_slices(
    platform: LocalPlatform, state: RolloutState, tier: Tier, wanted: dict[Slice, int]
) -> dict[Slice, list[tuple[str, str]]]:
    """Creates users (id, token) whose hash puts them in each wanted slice, that many each."""
    found: dict[Slice, list[tuple[str, str]]] = {s: [] for s in wanted}
    run = uuid.uuid4().hex[:8]
    async with AdminClient(platform.scheduler_address, platform.admin_token,
                           tls=platform.tls()) as admin:  # fmt: skip
        for n in range(5000):
            user_id = f"ro-{run}-{n}"
            where = assign(state, user_id, tier).slice
            if where in found and len(found[where]) < wanted[where]:
                created = await admin.create_user(user_id, tier.value)
                found[where].append((user_id, created.token))
            if all(len(found[s]) == wanted[s] for s in wanted):
                return found
    raise AssertionError(f"no users found for {wanted}")


# chatctl's eval runs take minutes on one CPU node.
EVAL_TIMEOUT_S = 600


async def eval_chatctl(*args: str) -> Run:
    process = await start(*args)
    out, err = await asyncio.wait_for(process.communicate(), EVAL_TIMEOUT_S)
    return Run(process.returncode or 0, out.decode(), err.decode())


def score_row(out: str, version: str) -> list[str]:
    """`chatctl versions show`'s row of one version (the only tier it was used in)."""
    (row,) = [re.split(r"\s{2,}", line) for line in out.splitlines() if line.startswith(version)]
    return row


def gate_rows(out: str) -> dict[str, tuple[str, ...]]:
    """The verdict table's rows by rule: (figure, threshold, result)."""
    rows = [re.split(r"\s{2,}", line) for line in out.splitlines()]
    return {row[0]: tuple(row[1:]) for row in rows if len(row) == 4 and row[0] != "RULE"}
