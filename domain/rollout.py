"""Model versions and who is served by which: the rollout's pure policy.

A version names the engine model, the system prompt and the sampling; versions that differ
only in prompt or sampling run on the same nodes (the gateway applies them per message).
One candidate at a time is split against the current version, per tier, by user: a stable
hash of the user id and the rollout's salt puts each user in a slice, so a user sees the
same version on every message, and a conversation keeps the version it started on even when
the split changes (the gateway stores it). A fixed share of users (the holdout, 1 %) has a
salt of its own and stays on the version that was current when it was made until an
operator moves it: the yardstick a long-running comparison needs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum

from domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from domain.types import Tier

BASE_VERSION = "base"
HOLDOUT_PERCENT = 1.0
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,47}$")
MAX_PROMPT_CHARS = 8_000
# The most history entries kept: the newest.
MAX_HISTORY = 50
# The answers' sampling when a version does not say.
DEFAULT_TEMPERATURE = 0.7


class Slice(StrEnum):
    CURRENT = "current"
    CANDIDATE = "candidate"
    HOLDOUT = "holdout"
    # A conversation kept on the version it started on.
    KEPT = "kept"
    # An operator's pin (the eval's users).
    PINNED = "pinned"


@dataclass(frozen=True, slots=True)
class Version:
    name: str
    # The engine model the nodes register; '' for whatever the pool's nodes serve.
    model: str = ""
    # '' for the gateway's configured system prompt.
    system_prompt: str = ""
    temperature: float = DEFAULT_TEMPERATURE


@dataclass(frozen=True, slots=True)
class RolloutChange:
    at: float
    action: str
    version: str
    detail: str


@dataclass(frozen=True, slots=True)
class GateRecord:
    """The eval gate's verdict on a candidate against the version current when it ran."""

    candidate: str
    baseline: str
    passed: bool
    at: float
    summary: str
    # What the verdict stands on (0: not said, as by a gate recorded before sizes were).
    golden_pairs: int = 0
    harmful_prompts: int = 0
    harmless_prompts: int = 0
    # The least of each set the eval took for a gate.
    min_set_size: int = 0

    @property
    def sizes(self) -> str:
        return (
            f"{self.golden_pairs} golden pairs, {self.harmful_prompts} harmful and "
            f"{self.harmless_prompts} harmless prompts (minimum {self.min_set_size} a set)"
        )


@dataclass(frozen=True, slots=True)
class RolloutState:
    versions: tuple[Version, ...] = (Version(BASE_VERSION),)
    current: str = BASE_VERSION
    candidate: str = ""
    # The candidate's share of each tier's users, in percent ("free", "plus").
    percent: tuple[tuple[str, float], ...] = ()
    salt: str = "0"
    holdout_version: str = BASE_VERSION
    holdout_salt: str = "holdout-0"
    holdout_percent: float = HOLDOUT_PERCENT
    # Users an operator put on a version whatever the split says (user id, version).
    pins: tuple[tuple[str, str], ...] = ()
    history: tuple[RolloutChange, ...] = field(default_factory=tuple)
    # The newest verdict per candidate.
    gates: tuple[GateRecord, ...] = ()

    def version(self, name: str) -> Version:
        for version in self.versions:
            if version.name == name:
                return version
        raise NotFound(f"no version {name!r}")

    def has(self, name: str) -> bool:
        return any(v.name == name for v in self.versions)

    def share(self, tier: Tier) -> float:
        return dict(self.percent).get(tier.value, 0.0)


@dataclass(frozen=True, slots=True)
class Assignment:
    version: Version
    slice: Slice


def bucket(user_id: str, salt: str) -> float:
    """The user's place in [0, 100) under this salt: the same every time, independent
    between salts (SHA-256, so no user id pattern lands users together)."""
    digest = hashlib.sha256(f"{salt}\x1f{user_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 100.0


def assign(state: RolloutState, user_id: str, tier: Tier) -> Assignment:
    """The version a new conversation of this user starts on."""
    pinned = dict(state.pins).get(user_id)
    if pinned is not None and state.has(pinned):
        return Assignment(state.version(pinned), Slice.PINNED)
    if bucket(user_id, state.holdout_salt) < state.holdout_percent:
        return Assignment(state.version(state.holdout_version), Slice.HOLDOUT)
    if state.candidate and bucket(user_id, state.salt) < state.share(tier):
        return Assignment(state.version(state.candidate), Slice.CANDIDATE)
    return Assignment(state.version(state.current), Slice.CURRENT)


def serving(state: RolloutState, user_id: str, tier: Tier, kept: str) -> Assignment:
    """The version for one message: the conversation's own (`kept`, '' for a new one) while
    it exists, else the user's slice. A pin wins, so an eval user is always on its version."""
    pinned = dict(state.pins).get(user_id)
    if kept and state.has(kept) and (pinned is None or pinned == kept):
        return Assignment(state.version(kept), Slice.KEPT)
    return assign(state, user_id, tier)


# Changes: each returns the new state with its history entry ---------------------------------


def _logged(state: RolloutState, at: float, action: str, version: str, detail: str,
            **changes: object) -> RolloutState:  # fmt: skip
    entry = RolloutChange(at, action, version, detail)
    history = (*state.history, entry)[-MAX_HISTORY:]
    # Each caller names RolloutState's fields with their own types; **changes cannot say so.
    return dataclasses.replace(state, history=history, **changes)  # type: ignore[arg-type]


def check_version(version: Version) -> None:
    if not NAME_PATTERN.match(version.name):
        raise InvalidArgument(
            "a version name is 1-48 characters of a-z, 0-9, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    if len(version.system_prompt) > MAX_PROMPT_CHARS:
        raise InvalidArgument(f"the system prompt may have at most {MAX_PROMPT_CHARS} characters")
    if not 0.0 <= version.temperature <= 2.0:
        raise InvalidArgument("temperature must be between 0 and 2")


def create(state: RolloutState, version: Version, at: float) -> RolloutState:
    check_version(version)
    if state.has(version.name):
        raise AlreadyExists(f"version {version.name!r} exists; versions never change")
    return _logged(state, at, "create", version.name, _describe(version),
                   versions=(*state.versions, version))  # fmt: skip


def split(state: RolloutState, name: str, tier: Tier, percent: float, at: float) -> RolloutState:
    """Gives the candidate `percent` of a tier's users. A new candidate starts a new rollout:
    a new salt, and every tier back at 0 % but this one."""
    state.version(name)
    if not 0.0 <= percent <= 100.0:
        raise InvalidArgument("a split is a percentage between 0 and 100")
    if name == state.current:
        raise FailedPrecondition(f"{name!r} is the current version; split a candidate")
    shares = dict(state.percent)
    salt = state.salt
    if name != state.candidate:
        shares, salt = {}, f"{name}@{at:.6f}"
    shares[tier.value] = percent
    detail = f"{tier.value} {percent:g} %"
    return _logged(state, at, "split", name, detail, candidate=name,
                   percent=tuple(sorted(shares.items())), salt=salt)  # fmt: skip


def gate_of(state: RolloutState, name: str) -> GateRecord | None:
    return next((g for g in reversed(state.gates) if g.candidate == name), None)


def check_gate(state: RolloutState, gate: GateRecord) -> None:
    """A verdict on two known, different versions; a pass only on sets of its minimum size."""
    state.version(gate.candidate)
    state.version(gate.baseline)
    if gate.candidate == gate.baseline:
        raise InvalidArgument(
            f"a gate compares a candidate with another version: {gate.candidate!r} against "
            "itself passes whatever it answers"
        )
    smallest = min(gate.golden_pairs, gate.harmful_prompts, gate.harmless_prompts)
    if gate.passed and (gate.min_set_size < 1 or smallest < gate.min_set_size):
        raise InvalidArgument(
            f"a gate passes only on sets of its minimum size or more: {gate.sizes}"
        )


def record_gate(state: RolloutState, gate: GateRecord) -> RolloutState:
    check_gate(state, gate)
    kept = tuple(g for g in state.gates if g.candidate != gate.candidate)
    verdict = "passed" if gate.passed else "failed"
    return _logged(state, gate.at, "gate", gate.candidate,
                   f"{verdict} against {gate.baseline} over {gate.sizes}: {gate.summary}",
                   gates=(*kept, gate)[-MAX_HISTORY:])  # fmt: skip


def promote(state: RolloutState, name: str, at: float, force: bool = False) -> RolloutState:
    """The candidate becomes current for everyone outside the holdout; conversations already
    started keep theirs. Only with a gate passed against the version current now, unless
    forced (the history says so)."""
    state.version(name)
    if name == state.current:
        raise FailedPrecondition(f"{name!r} is already the current version")
    gate = gate_of(state, name)
    passed = gate is not None and gate.passed and gate.baseline == state.current
    if not passed and not force:
        why = (
            "it has no gate result" if gate is None
            else f"its gate against {gate.baseline!r} failed" if not gate.passed
            else f"its gate ran against {gate.baseline!r}, not the current {state.current!r}"
        )  # fmt: skip
        raise FailedPrecondition(
            f"{name!r} cannot be promoted: {why}; run `chatctl eval run --candidate {name}` "
            "or promote with --force"
        )
    detail = "gate passed" if passed else "FORCED without a passing gate"
    return _logged(state, at, "promote", name, detail, current=name, candidate="", percent=())


def rollback(state: RolloutState, at: float, reason: str) -> RolloutState:
    """Every tier back to 0 % for the candidate; the candidate stays named, so the history
    and its metrics say which one was rolled back."""
    if not state.candidate:
        raise FailedPrecondition("there is no candidate to roll back")
    zero = tuple((tier, 0.0) for tier, _ in state.percent)
    return _logged(state, at, "rollback", state.candidate, reason, percent=zero)


def move_holdout(state: RolloutState, name: str, at: float) -> RolloutState:
    state.version(name)
    return _logged(state, at, "holdout", name, f"the {state.holdout_percent:g} % holdout moved",
                   holdout_version=name)  # fmt: skip


def pin_user(state: RolloutState, user_id: str, name: str, at: float) -> RolloutState:
    """Puts one user on a version ('' unpins)."""
    pins = dict(state.pins)
    if not name and user_id not in pins:
        return state
    if name:
        state.version(name)
        pins[user_id] = name
    else:
        pins.pop(user_id, None)
    return _logged(state, at, "pin", name, user_id, pins=tuple(sorted(pins.items())))


def live_share(state: RolloutState) -> dict[str, float]:
    """The candidate's share per tier, for display."""
    return dict(state.percent) if state.candidate else {}


def _describe(version: Version) -> str:
    model = version.model or "the pool's model"
    prompt = "the configured prompt" if not version.system_prompt else "its own prompt"
    return f"{model}, {prompt}, temperature {version.temperature:g}"
