"""What users sent and saw during a fault, and the check of the outcome once it is over.

A Ledger sends messages through the edge as fresh users of its own (so each scenario's buckets
start full) and keeps every event each client read, across resumes. `check()` then reads what
the platform stored and holds it to four rules:

- every accepted message (HTTP 200) has exactly one stored answer, after the user's turn;
  a refused one left nothing stored;
- what the user saw (the deltas, in order, across resumes) is the stored answer;
- the event ids the user read count 1, 2, 3... with no gap and no repeat;
- each answer's tokens were settled exactly once: with the bucket's refill off (a hundredth
  of a token allowed for), the user's
  level is the capacity less the cost of every stored answer's usage (its `done` usage, whose
  output count must be the stored one).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from clients.admin_client import AdminClient
from clients.chatctl.platform import LocalPlatform
from domain.limiter import usage_cost
from domain.types import Usage
from tests.sse import SseEvent, iter_events


@dataclass(frozen=True)
class Account:
    user_id: str
    tier: str
    token: str

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class Sent:
    account: Account
    conversation_id: str
    message_id: str
    content: str
    status: int = 0
    body: Any = None
    # Every event of the answer the client read, with when (monotonic s), across resumes.
    events: list[tuple[float, SseEvent]] = field(default_factory=list)
    # The edge's own `error` events (id 0, not in the answer's log): "I lost the answer",
    # which a client answers by resuming elsewhere.
    interruptions: list[SseEvent] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return self.status == 200

    @property
    def names(self) -> list[str]:
        return [event.event for _, event in self.events]

    @property
    def text(self) -> str:
        return "".join(e.data["text"] for _, e in self.events if e.event == "delta")

    @property
    def replica(self) -> str:
        """The replica the answer started on, as its `meta` said."""
        return str(self.events[0][1].data["replica"])

    @property
    def ended(self) -> bool:
        return bool(self.events) and self.events[-1][1].event in ("done", "error")

    def pause_s(self) -> float:
        """The longest wait between two events the client read."""
        times = [at for at, _ in self.events]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def deltas(self) -> int:
        return sum(event.event == "delta" for _, event in self.events)


Act = Callable[[Sent], Awaitable[None]]


class Ledger:
    def __init__(self, http: aiohttp.ClientSession, platform: LocalPlatform) -> None:
        self.http = http
        self._platform = platform
        self.accounts: list[Account] = []
        self.sent: list[Sent] = []
        # Where the outcome is read from: an edge the scenario left reachable.
        self.read_through = ""

    async def account(self, tier: str) -> Account:
        user_id = f"u-{tier}-{uuid.uuid4().hex[:10]}"
        platform = self._platform
        async with AdminClient(
            platform.scheduler_address, platform.admin_token, tls=platform.tls()
        ) as admin:
            created = await admin.create_user(user_id, tier)
        account = Account(user_id, tier, created.token)
        self.accounts.append(account)
        return account

    async def send(
        self,
        account: Account,
        content: str,
        edge_url: str = "",
        act: Act | None = None,
        act_after_deltas: int = 5,
    ) -> Sent:
        """One message, read until the stream ends; act(sent) runs once after the
        act_after_deltas-th delta, while the answer streams."""
        sent = Sent(account, f"c_{uuid.uuid4().hex[:10]}", f"m_{uuid.uuid4().hex[:10]}", content)
        self.sent.append(sent)
        url = f"{edge_url or self._platform.edge_url}/v1/conversations/{sent.conversation_id}"
        headers = {**account.bearer, "Idempotency-Key": sent.message_id}
        async with self.http.post(
            f"{url}/messages", json={"content": content}, headers=headers
        ) as response:
            sent.status = response.status
            if response.status != 200:
                sent.body = await response.json()
                return sent
            await self._read(sent, response, act, act_after_deltas)
        return sent

    async def resume(self, sent: Sent, edge_url: str) -> None:
        """Reads the rest of the answer through edge_url, after the last event read."""
        last = sent.events[-1][1].id if sent.events else 0
        headers = {**sent.account.bearer, "Last-Event-ID": str(last)}
        async with self.http.get(
            f"{edge_url}/v1/messages/{sent.message_id}/stream", headers=headers
        ) as response:
            assert response.status == 200, await response.text()
            await self._read(sent, response, None, 0)

    async def _read(
        self, sent: Sent, response: aiohttp.ClientResponse, act: Act | None, act_after: int
    ) -> None:
        acted = act is None
        async for event in iter_events(response):
            if event.event == "error" and event.id == 0 and sent.events:
                sent.interruptions.append(event)
                continue
            sent.events.append((time.monotonic(), event))
            if not acted and sent.deltas() == act_after:
                acted = True
                await act(sent)
        assert acted, "the answer ended before the fault"

    async def stored(self, sent: Sent) -> list[dict[str, Any]] | None:
        """The conversation's stored messages; None when it was never stored."""
        url = f"{self._reader()}/v1/conversations/{sent.conversation_id}/messages"
        async with self.http.get(url, headers=sent.account.bearer) as response:
            if response.status == 404:
                return None
            assert response.status == 200, await response.text()
            return list((await response.json())["messages"])

    async def level(self, account: Account) -> tuple[float, float]:
        async with self.http.get(f"{self._reader()}/v1/limits", headers=account.bearer) as response:
            assert response.status == 200, await response.text()
            limits = await response.json()
        return float(limits["level"]), float(limits["capacity"])

    def _reader(self) -> str:
        return self.read_through or self._platform.edge_url

    async def check(self) -> None:
        """The four rules above, over every message sent through this ledger."""
        spent: dict[str, float] = {account.user_id: 0.0 for account in self.accounts}
        for sent in self.sent:
            spent[sent.account.user_id] += await self._check_one(sent)
        for account in self.accounts:
            level, capacity = await self.level(account)
            assert level == pytest.approx(capacity - spent[account.user_id], abs=0.01), (
                f"{account.user_id}: level {level}, capacity {capacity}, "
                f"stored usage costs {spent[account.user_id]}"
            )

    async def _check_one(self, sent: Sent) -> float:
        """Checks one message; the cost its stored answer was settled at."""
        stored = await self.stored(sent)
        if not sent.accepted:
            assert not stored, f"{sent.message_id} was refused ({sent.status}) but stored"
            return 0.0
        assert sent.names[0] == "meta" and sent.names[-1] == "done", sent.names
        assert "error" not in sent.names, sent.names
        ids = [event.id for _, event in sent.events]
        assert ids == list(range(1, len(ids) + 1)), f"event ids with a gap or repeat: {ids}"
        assert stored is not None, f"{sent.message_id} was answered but never stored"
        assert [m["role"] for m in stored] == ["user", "assistant"], stored
        user_turn, answer = stored
        assert user_turn["messageId"] == sent.message_id
        assert user_turn["content"] == sent.content
        assert answer["content"] == sent.text
        usage = sent.events[-1][1].data["usage"]
        assert int(answer["tokens"]) == usage["output"], (answer, usage)
        return usage_cost(Usage(usage["input"], usage.get("cached", 0), usage["output"]))
