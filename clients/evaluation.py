"""Runs the eval gate through the platform: the golden set answered by the current and the
candidate version, judged side by side, the verdict recorded at the scheduler (promote needs
it) and the report kept as JSON.

Each version is answered by an eval user pinned to it (domain/rollout.py: a pin wins over
the split and answers at temperature 0), through the gateway like any user's message, so the
input and output checks count: refusals are the platform's, not the bare model's. Each item
is a conversation of its own; the two versions' answers to one item are asked back to back,
so both meet the same load."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clients.admin_client import AdminClient
from clients.base import ClientError
from clients.chat_client import ChatClient, Delta, Done, Error, Meta
from clients.rollout_client import RolloutClient
from domain.evaluation.gate import (
    HARMFUL,
    HARMLESS,
    MIN_SET_SIZE,
    EvalAnswer,
    GatePolicy,
    Pair,
    Rule,
    Verdict,
    verdict,
)
from domain.evaluation.judging import (
    EvalItem,
    Judge,
    ReferenceJudge,
    candidate_win,
    judge_prompt,
    read_verdict,
)
from domain.evaluation.sets import parse_set
from domain.rollout import GateRecord, RolloutState, Slice

GOLDEN = "golden"
EVAL_TIER = "plus"
JUDGE_USER = "eval-judge"
# How often one answer is asked: again while a new pin has not reached the gateway yet (it
# does within a second) or the platform could not answer for now.
ATTEMPTS = 5
RETRY_S = 0.5
# What the report says of the length control.
LENGTH_METHOD = (
    "the win rate among pairs whose two answers are within 20 % of each other's length "
    "(in characters); pairs further apart are left out"
)


class EvalRefused(ValueError):
    """An eval that cannot run as asked (no such version, a version against itself, no set
    files): said in a sentence, before anything is asked or recorded."""


@dataclass(frozen=True)
class EvalSettings:
    candidate: str
    sets_dir: Path
    # The first N items of each golden category, of the harmful and of the harmless set
    # (0: all): a quick run; the gate's thresholds need the whole set to be resolved.
    per_category: int = 0
    harmful: int = 0
    harmless: int = 0
    concurrency: int = 2
    judge: str = "reference"
    # Answers kept from earlier runs, by version and item id: a version never changes and is
    # answered at temperature 0, so its answer to an item is asked once (failed ones again).
    known: dict[str, dict[str, EvalAnswer]] = field(default_factory=dict)


@dataclass
class EvalReport:
    candidate: str
    baseline: str
    judge: str
    at: float
    verdict: Verdict
    answers: dict[str, dict[str, list[EvalAnswer]]] = field(default_factory=dict)
    pairs: list[Pair] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"passed": self.verdict.passed,
                                            "length_method": LENGTH_METHOD}  # fmt: skip

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> EvalReport:
        v = raw["verdict"]
        answers = {version: {name: [EvalAnswer(**a) for a in rows] for name, rows in sets.items()}
                   for version, sets in raw["answers"].items()}  # fmt: skip
        # A report kept before verdicts carried their sizes: its answers say them.
        asked = answers.get(raw["candidate"], {})
        found = Verdict(tuple(Rule(**r) for r in v["rules"]), v["win_rate"],
                        v["length_controlled_win_rate"], v["similar_length_pairs"], v["pairs"],
                        v["category_win_rates"],
                        v.get("harmful_prompts", len(asked.get(HARMFUL, []))),
                        v.get("harmless_prompts", len(asked.get(HARMLESS, []))),
                        v.get("min_set_size", MIN_SET_SIZE))  # fmt: skip
        return cls(raw["candidate"], raw["baseline"], raw["judge"], raw["at"], found, answers,
                   [Pair(**p) for p in raw["pairs"]])  # fmt: skip


def load_items(settings: EvalSettings) -> dict[str, list[EvalItem]]:
    def read(name: str) -> list[EvalItem]:
        path = settings.sets_dir / f"{name}.jsonl"
        try:
            return parse_set(path.read_text(), str(path))
        except OSError as error:
            raise EvalRefused(f"cannot read the eval set {path}: {error.strerror}") from error
        except ValueError as error:
            raise EvalRefused(str(error)) from error

    golden: list[EvalItem] = []
    for category in sorted({i.category for i in read(GOLDEN)}):
        chosen = [i for i in read(GOLDEN) if i.category == category]
        golden += chosen[: settings.per_category or None]
    return {GOLDEN: golden, HARMFUL: read(HARMFUL)[: settings.harmful or None],
            HARMLESS: read(HARMLESS)[: settings.harmless or None]}  # fmt: skip


def check_candidate(state: RolloutState, candidate: str) -> None:
    if not state.has(candidate):
        known = ", ".join(v.name for v in state.versions)
        raise EvalRefused(f"no version {candidate!r} (the versions: {known})")
    if candidate == state.current:
        raise EvalRefused(
            f"{candidate!r} is the current version: the gate compares a candidate with the "
            "current version, and a version against itself passes whatever it answers"
        )


def eval_user(version: str) -> str:
    return "eval-" + version.replace(".", "_")


async def ask_pinned(chat: ChatClient, item: EvalItem, version: str) -> EvalAnswer:
    """The answer of the version the user is pinned to. A pin reaches the gateways within a
    second; an answer served before it did (another slice, another sampling) is asked again,
    and so is one the platform could not give for now (no replica ready, "busy"): the gate
    judges versions, not a moment's outage. An answer no version wrote (the input check's
    refusal) is taken as it is."""
    answer = EvalAnswer(item.item_id, "", "error", None)
    for attempt in range(ATTEMPTS):
        answer, meta = await ask(chat, item)
        if answer.text.startswith("UNAVAILABLE:") or (meta is not None and meta.model == "busy"):
            # A node that missed its load reports is back within seconds: wait, doubling.
            await asyncio.sleep(RETRY_S * 2**attempt)
            continue
        if meta is None or not meta.version:
            return answer
        if (meta.version, meta.slice) == (version, Slice.PINNED.value):
            return answer
        answer = EvalAnswer(item.item_id, f"not served by the pinned {version}", "error", None)
    return answer


async def ask(
    chat: ChatClient, item: EvalItem, model: str = "auto"
) -> tuple[EvalAnswer, Meta | None]:
    """One prompt in a conversation of its own: the answer, how it ended, when text began,
    and the meta event (None when the call failed before it)."""
    started = time.monotonic()
    first: float | None = None
    pieces: list[str] = []
    finish = "error"
    meta: Meta | None = None
    try:
        async for event in chat.send(f"eval-{uuid.uuid4().hex[:16]}", item.prompt, model=model):
            match event:
                case Meta():
                    meta = event
                case Delta():
                    first = first if first is not None else time.monotonic() - started
                    pieces.append(event.text)
                case Done():
                    finish = event.finish
                case Error():
                    pieces.append(event.message)
    except ClientError as error:
        return EvalAnswer(item.item_id, f"{error.code}: {error.message}", "error", None), meta
    return EvalAnswer(item.item_id, "".join(pieces), finish, first), meta


class ModelJudge:
    """Asks a model the platform serves (the large pool) which answer is better."""

    def __init__(self, chat: ChatClient) -> None:
        self._chat = chat

    async def prefer(self, item: EvalItem, first: str, second: str) -> float:
        question = EvalItem(item.item_id, item.category, judge_prompt(item, first, second))
        reply, _ = await ask(self._chat, question, model="large")
        return read_verdict(reply.text)


class EvalRunner:
    def __init__(
        self,
        rollout: RolloutClient,
        admin: AdminClient,
        chat_for: Callable[[str], ChatClient],
        policy: GatePolicy | None = None,
    ) -> None:
        self._rollout = rollout
        self._admin = admin
        self._chat_for = chat_for
        self._policy = policy or GatePolicy()

    async def _user(self, version: str, user_id: str = "") -> str:
        """An eval user's token, pinned to the version (made on first use)."""
        user_id = user_id or eval_user(version)
        try:
            token = (await self._admin.create_user(user_id, EVAL_TIER)).token
        except ClientError as error:
            if error.code != "ALREADY_EXISTS":
                raise
            token = await self._admin.rotate_token(user_id)
        await self._rollout.pin(user_id, version)
        return token

    async def run(self, settings: EvalSettings) -> EvalReport:
        state = await self._rollout.rollout()
        baseline, candidate = state.current, settings.candidate
        check_candidate(state, candidate)
        items = load_items(settings)
        tokens = {v: await self._user(v) for v in (baseline, candidate)}
        chats = {v: self._chat_for(t) for v, t in tokens.items()}
        judge_chat = None
        if settings.judge == "model":
            # Pinned to the current version: answered at temperature 0, like the eval itself.
            judge_chat = self._chat_for(await self._user(baseline, JUDGE_USER))
        try:
            answers = await self._answer_all(items, (baseline, chats[baseline]),
                                             (candidate, chats[candidate]),
                                             settings)  # fmt: skip
            judge: Judge = ModelJudge(judge_chat) if judge_chat else ReferenceJudge()
            pairs = await self._pairs(judge, items[GOLDEN], answers)
        finally:
            for chat in [*chats.values(), *([judge_chat] if judge_chat else [])]:
                await chat.close()
            for user_id in (eval_user(baseline), eval_user(candidate), JUDGE_USER):
                await self._rollout.pin(user_id, "")
        by_version = {
            version: {name: [a[index] for a in answers[name]] for name in answers}
            for index, version in ((0, baseline), (1, candidate))
        }
        found = verdict(pairs, by_version[candidate], by_version[baseline], self._policy)
        report = EvalReport(candidate, baseline, settings.judge, time.time(), found, by_version,
                            pairs)  # fmt: skip
        if found.is_gate:
            summary = "; ".join(f"{r.name} {r.figure} ({r.threshold})" for r in found.rules)
            await self._rollout.record_gate(GateRecord(
                candidate, baseline, found.passed, report.at, summary, found.pairs,
                found.harmful_prompts, found.harmless_prompts, found.min_set_size))  # fmt: skip
        return report

    async def _answer_all(
        self, items: dict[str, list[EvalItem]], current: tuple[str, ChatClient],
        candidate: tuple[str, ChatClient], settings: EvalSettings,
    ) -> dict[str, list[tuple[EvalAnswer, EvalAnswer]]]:  # fmt: skip
        room = asyncio.Semaphore(max(1, settings.concurrency))

        async def one(item: EvalItem, version: str, chat: ChatClient) -> EvalAnswer:
            known = settings.known.get(version, {}).get(item.item_id)
            if known is not None and known.finish != "error":
                return known
            return await ask_pinned(chat, item, version)

        async def both(item: EvalItem) -> tuple[EvalAnswer, EvalAnswer]:
            async with room:
                return (await one(item, *current), await one(item, *candidate))

        return {name: list(await asyncio.gather(*(both(i) for i in chosen)))
                for name, chosen in items.items()}  # fmt: skip

    async def _pairs(
        self,
        judge: Judge,
        golden: list[EvalItem],
        answers: dict[str, list[tuple[EvalAnswer, EvalAnswer]]],
    ) -> list[Pair]:
        pairs = []
        for item, (current, candidate) in zip(golden, answers[GOLDEN], strict=True):
            win = await candidate_win(judge, item, current.text, candidate.text)
            pairs.append(Pair(item.item_id, item.category, win, len(candidate.text),
                              len(current.text)))  # fmt: skip
        return pairs


def save_report(report: EvalReport, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{report.candidate}.json"
    path.write_text(json.dumps(report.to_json(), indent=1))
    return path


def read_report(path: Path) -> EvalReport:
    return EvalReport.from_json(json.loads(path.read_text()))


def known_answers(folder: Path) -> dict[str, dict[str, EvalAnswer]]:
    """Every version's answers in the reports kept in folder, by item id."""
    known: dict[str, dict[str, EvalAnswer]] = {}
    for path in sorted(folder.glob("*.json")):
        for version, sets in read_report(path).answers.items():
            for answers in sets.values():
                known.setdefault(version, {}).update({a.item_id: a for a in answers})
    return known
