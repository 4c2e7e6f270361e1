"""Replay: a turn's captured prompt (gateway/prompt_capture.py) answered again at temperature 0
by a replica of a version an operator names, beside the answer the user was shown, so a
prompt or model change is measured on real turns before it ships (docs/decisions.md, "A
captured prompt can be replayed"). It spends no user's tokens and is stored nowhere."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from dataclasses import dataclass
from typing import Protocol

from domain.errors import NotFound, Unavailable
from domain.types import Finish, Role, Tier, Usage
from gateway.ids import ANSWER_SUFFIX
from gateway.ports import Finished, GenerateSpec, Nodes, ReplicaPicker, StreamBroken, Working
from gateway.versions import VersionBook
from store.base import FeedbackStore, PromptStore
from store.records import CapturedPrompt

# Greedy decoding: the same prompt on the same model gives the same answer, so a difference
# is the version's, not the sampler's.
REPLAY_TEMPERATURE = 0.0


@dataclass(frozen=True, slots=True)
class Replay:
    version: str
    model: str
    node_id: str
    # The answer the user was shown, as stored ('' when none was), and the answer now.
    original: str
    replayed: str
    finish: Finish
    usage: Usage
    system_prompt_replaced: bool


class ReplayStore(PromptStore, FeedbackStore, Protocol):
    """Where the capture, the stored answer and the pool that served the turn are read."""


class Replayer:
    def __init__(
        self,
        store: ReplayStore,
        versions: VersionBook,
        scheduler: ReplicaPicker,
        nodes: Nodes,
        *,
        default_pool: str,
        default_system_prompt: str,
        timeout_s: float,
    ) -> None:
        self._store = store
        self._versions = versions
        self._scheduler = scheduler
        self._nodes = nodes
        self._default_pool = default_pool
        self._default_system_prompt = default_system_prompt
        self._timeout_s = timeout_s

    async def replay(self, user_id: str, message_id: str, version_name: str = "") -> Replay:
        captured = await self._store.captured_prompt(user_id, message_id)
        version = self._versions.state.version(version_name or captured.version)
        turns = captured.turns
        replaced = version.name != captured.version and turns[0].role is Role.SYSTEM
        if replaced:
            system = version.system_prompt or self._default_system_prompt
            # Its count stays the captured prompt's: the pick and the node's queue take the
            # prompt's size as an estimate, and a Tokenize call is not worth a replay's wait.
            turns = (dataclasses.replace(turns[0], text=system), *turns[1:])
        tokens = sum(t.tokens for t in turns)
        pool = await self._pool(user_id, captured)
        # Asked as Plus: an operator's measurement is not shed like a Free message.
        pick = await self._scheduler.pick(captured.conversation_id, pool, Tier.PLUS, tokens,
                                          model=version.model)  # fmt: skip
        spec = GenerateSpec(f"replay/{user_id}/{message_id}/{uuid.uuid4().hex[:8]}", turns,
                            captured.max_tokens, Tier.PLUS, REPLAY_TEMPERATURE, tokens)  # fmt: skip
        text, finished = await self._answer(pick.address, spec)
        shown = await self._shown(user_id, message_id)
        return Replay(version.name, pick.model, pick.node_id, shown, text, finished.finish,
                      finished.usage, replaced)  # fmt: skip

    async def _pool(self, user_id: str, captured: CapturedPrompt) -> str:
        """The pool that served the turn, where the turn's serving was recorded."""
        try:
            return (await self._store.serving_of(user_id, captured.message_id)).served_pool or (
                self._default_pool
            )
        except NotFound:
            return self._default_pool

    async def _shown(self, user_id: str, message_id: str) -> str:
        try:
            return (await self._store.get_message(user_id, message_id + ANSWER_SUFFIX)).content
        except NotFound:
            return ""

    async def _answer(self, address: str, spec: GenerateSpec) -> tuple[str, Finished]:
        generation = await self._nodes.generate(address, spec)
        pieces: list[str] = []
        finished = False
        try:
            async with asyncio.timeout(self._timeout_s):
                while True:
                    item = await generation.read()
                    if isinstance(item, Finished):
                        finished = True
                        return "".join(pieces), item
                    if not isinstance(item, Working):
                        pieces.append(item.text)
        except StreamBroken as broken:
            raise Unavailable(f"the replica stopped answering the replay: {broken}") from broken
        except TimeoutError as late:
            raise Unavailable(f"the replay did not finish within {self._timeout_s:g} s") from late
        finally:
            if not finished:
                # Late, broken or the operator gone: the engine's slot is freed at once (the
                # stop goes out without waiting for it).
                generation.cancel()
            generation.close()
