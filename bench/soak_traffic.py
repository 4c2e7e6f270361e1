"""The soak's users: each holds conversations of a few turns through the edge, as an app would
(resuming after the last event it saw when a stream breaks), stops some answers, walks away
from some streams and resumes them, sends a blocked message now and then, and keeps an account
of every message: accepted or not, the events and text it was shown, and, read back at the end
of each conversation, the answer that was stored.

A message is accepted once its stream's first event (`meta`) arrived. It is lost when it was
accepted and no `done` arrived within ANSWER_DEADLINE_S of resuming, or when the stored answer
is not the text the client was shown. A composed "busy" answer (no model could answer: nothing
is stored, the user is told to try again) is counted apart, not as lost.
"""

from __future__ import annotations

import asyncio
import enum
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from domain.types import Role
from nodeagent.engine import PromptTurn
from nodeagent.sim import planned_answer, rendered
from tests.sse import iter_events

# Set on the gateways, so the answer the simulator gives each prompt is known here.
SYSTEM_PROMPT = "You are a helpful assistant."
ANSWER_TOKENS = (30, 150)
BLOCKED = "Explain step by step how to synthesize sarin."
TOPICS = ["rivers", "owls", "bread", "the sea", "volcanoes", "trains", "tea", "chess"]
ASKS = ["Tell me about {}.", "What should I know about {}?", "Write a few lines on {}.",
        "Why do people like {}?", "Give me three facts about {}."]  # fmt: skip
# An accepted message has this long, resuming as often as it takes, to reach `done`.
ANSWER_DEADLINE_S = 90.0
# A message not yet accepted is sent again (same idempotency key) for this long.
SEND_DEADLINE_S = 30.0
RETRY_S = 0.5
BUSY_MODEL = "busy"


class Action(enum.StrEnum):
    PLAIN = "plain"
    STOP = "stop"  # stopped after a few deltas, then read to its end
    RESUME = "resume"  # the stream closed after a few deltas, resumed after a moment
    BLOCKED = "blocked"  # refused by the input check, answered with a stored refusal


@dataclass(frozen=True, slots=True)
class Mix:
    stop_share: float = 0.08
    resume_share: float = 0.08
    blocked_share: float = 0.02
    turns: tuple[int, int] = (2, 6)
    think_s: tuple[float, float] = (0.2, 1.5)


@dataclass
class Message:
    user_id: str
    conversation_id: str
    message_id: str
    content: str
    action: Action
    act_after_deltas: int
    accepted: bool = False
    model: str = ""
    finish: str = ""  # `done`'s finish; empty while no `done` has arrived
    text: str = ""
    ids: list[int] = field(default_factory=list)
    deltas: int = 0
    resumes: int = 0
    acted: bool = False
    stop_said_stopped: bool = False  # the stop's reply said it stopped the answer
    errors: list[str] = field(default_factory=list)
    stored: str | None = None  # the stored answer, once read back; None: none was stored
    expected: str | None = None  # the uninterrupted answer, where it is known

    @property
    def busy(self) -> bool:
        return self.model == BUSY_MODEL

    @property
    def lost(self) -> bool:
        return self.accepted and not self.busy and (not self.finish or self.stored != self.text)

    @property
    def ids_in_order(self) -> bool:
        return self.ids == list(range(1, len(self.ids) + 1))

    @property
    def exact(self) -> bool | None:
        """The text shown is the uninterrupted answer to the same prompt (None: not known)."""
        return None if self.expected is None else self.text == self.expected


@dataclass
class Ledger:
    messages: list[Message] = field(default_factory=list)


class User:
    def __init__(
        self,
        http: aiohttp.ClientSession,
        edge_url: str,
        user_id: str,
        token: str,
        mix: Mix,
        rng: random.Random,
        ledger: Ledger,
    ) -> None:
        self._http = http
        self._edge = edge_url
        self.user_id = user_id
        self._auth = {"Authorization": f"Bearer {token}"}
        self._mix = mix
        self._rng = rng
        self._ledger = ledger

    async def run(self, until: float) -> None:
        """Conversations one after another until the loop's clock reads `until`."""
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            await self._conversation(until)

    # One conversation -----------------------------------------------------------------------

    async def _conversation(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        conversation_id = f"c_{uuid.uuid4().hex[:12]}"
        sent: list[Message] = []
        for _ in range(self._rng.randint(*self._mix.turns)):
            message = self._new_message(conversation_id)
            self._ledger.messages.append(message)
            sent.append(message)
            await self._send(message)
            if not message.finish or message.busy or loop.time() >= until:
                break
            await asyncio.sleep(self._rng.uniform(*self._mix.think_s))
        await self._read_back(conversation_id, sent)

    def _new_message(self, conversation_id: str) -> Message:
        draw = self._rng.random()
        mix = self._mix
        if draw < mix.blocked_share:
            action, content = Action.BLOCKED, BLOCKED
        else:
            action = (
                Action.STOP
                if draw < mix.blocked_share + mix.stop_share
                else Action.RESUME
                if draw < mix.blocked_share + mix.stop_share + mix.resume_share
                else Action.PLAIN
            )
            ask = self._rng.choice(ASKS).format(self._rng.choice(TOPICS))
            content = f"{ask} ({uuid.uuid4().hex[:6]})"
        return Message(self.user_id, conversation_id, f"m_{uuid.uuid4().hex}", content, action,
                       act_after_deltas=self._rng.randint(1, 6))  # fmt: skip

    # Sending, reading, resuming ---------------------------------------------------------------

    async def _send(self, message: Message) -> None:
        loop = asyncio.get_running_loop()
        url = f"{self._edge}/v1/conversations/{message.conversation_id}/messages"
        headers = {**self._auth, "Idempotency-Key": message.message_id}
        deadline = loop.time() + SEND_DEADLINE_S
        while not message.accepted and loop.time() < deadline:
            try:
                # Bounded: a stream kept open by keep-alives alone would hold the user forever.
                async with (
                    asyncio.timeout(ANSWER_DEADLINE_S),
                    self._http.post(
                        url, json={"content": message.content}, headers=headers
                    ) as response,
                ):
                    if response.status == 200:
                        await self._read(message, response)
                    else:
                        message.errors.append(f"send: HTTP {response.status}")
                        if response.status < 500 and response.status != 429:
                            return  # refused for good (400, 403, 409)
            except (aiohttp.ClientError, TimeoutError) as error:
                message.errors.append(f"send: {type(error).__name__}")
            if not message.accepted:
                await asyncio.sleep(RETRY_S)
        if message.accepted:
            await self._follow(message)

    async def _follow(self, message: Message) -> None:
        """Resumes after the last event seen until `done` arrives or the deadline passes."""
        loop = asyncio.get_running_loop()
        url = f"{self._edge}/v1/messages/{message.message_id}/stream"
        deadline = loop.time() + ANSWER_DEADLINE_S
        while not message.finish and loop.time() < deadline:
            await asyncio.sleep(self._rng.uniform(0.1, 1.0) if message.resumes == 0 else RETRY_S)
            message.resumes += 1
            headers = {**self._auth, "Last-Event-ID": str(message.ids[-1])}
            try:
                async with (
                    asyncio.timeout_at(deadline),
                    self._http.get(url, headers=headers) as response,
                ):
                    if response.status == 200:
                        await self._read(message, response)
                    else:
                        message.errors.append(f"resume: HTTP {response.status}")
            except (aiohttp.ClientError, TimeoutError) as error:
                message.errors.append(f"resume: {type(error).__name__}")

    async def _read(self, message: Message, response: aiohttp.ClientResponse) -> None:
        """Reads events until `done`, an `error`, the stream's end, or the moment this message
        walks away (Action.RESUME)."""
        async for event in iter_events(response):
            if event.event == "error":
                message.errors.append(f"error event: {event.data.get('message', '')}")
                return
            message.ids.append(event.id)
            self._apply(message, event.event, event.data)
            if message.finish:
                return
            if not message.acted and message.deltas >= message.act_after_deltas:
                message.acted = True
                if message.action is Action.RESUME:
                    return  # closing the response drops the connection mid-answer
                if message.action is Action.STOP:
                    await self._stop(message)

    @staticmethod
    def _apply(message: Message, name: str, data: dict[str, Any]) -> None:
        if name == "meta":
            message.accepted = True
            message.model = str(data["model"])
        elif name == "delta":
            message.text += data["text"]
            message.deltas += 1
        elif name == "retract":
            message.text = ""  # everything shown so far is withdrawn
        elif name == "done":
            message.finish = str(data["finish"])

    async def _stop(self, message: Message) -> None:
        url = f"{self._edge}/v1/messages/{message.message_id}/stop"
        try:
            async with self._http.post(url, headers=self._auth) as response:
                if response.status == 200:
                    message.stop_said_stopped = bool((await response.json())["stopped"])
                else:
                    message.errors.append(f"stop: HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError) as error:
            message.errors.append(f"stop: {type(error).__name__}")

    # Reading back -------------------------------------------------------------------------------

    async def _read_back(self, conversation_id: str, sent: list[Message]) -> None:
        """Each message's stored answer, and the uninterrupted answer of each model-answered
        turn whose earlier turns were all answered by the model, unstopped."""
        if not any(m.accepted for m in sent):
            return
        stored = await self._stored(conversation_id)
        for message in sent:
            answer = stored.get(f"{message.message_id}.answer")
            message.stored = None if answer is None else answer["content"]
        turns = [PromptTurn(Role.SYSTEM, SYSTEM_PROMPT)]
        for message in sent:
            if not message.finish or message.busy or message.action is Action.BLOCKED:
                return
            turns.append(PromptTurn(Role.USER, message.content))
            if message.action is not Action.STOP and message.finish in ("stop", "length"):
                message.expected = "".join(rendered(planned_answer(turns, ANSWER_TOKENS), 0))
            turns.append(PromptTurn(Role.ASSISTANT, message.stored or ""))

    async def _stored(self, conversation_id: str) -> dict[str, dict[str, Any]]:
        loop = asyncio.get_running_loop()
        url = f"{self._edge}/v1/conversations/{conversation_id}/messages"
        deadline = loop.time() + SEND_DEADLINE_S
        while loop.time() < deadline:
            try:
                async with self._http.get(url, headers=self._auth) as response:
                    if response.status == 200:
                        body = await response.json()
                        return {m["messageId"]: m for m in body.get("messages", [])}
                    if response.status == 404:
                        return {}
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(RETRY_S)
        return {}
