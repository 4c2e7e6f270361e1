"""Watches the candidate's online guardrails and rolls it back to 0 % on a breach.

Gateways send, with each rollout poll, their answers per version since the last poll
(domain/guardrails.py's tallies). This scheduler keeps the ones it was told for a trailing
window and compares the candidate's with the current version's; a breach rolls the candidate
back at once, with the guardrail, its figures and the window in the rollout's history. With
several schedulers each judges the gateways that ask it; any of them may roll back (a
compare-and-swap in the shared store), which errs on the side of the users."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

import structlog

from domain import rollout
from domain.errors import FailedPrecondition
from domain.feedback import RatedAnswer, Rating
from domain.guardrails import Guardrails, Tally, breaches
from domain.types import Tier
from scheduler.ladder import ETCD_ERRORS
from scheduler.rollout import RolloutKeeper


@dataclass(frozen=True, slots=True)
class CanaryPolicy:
    rails: Guardrails = field(default_factory=Guardrails)
    # The trailing window the shares are computed over.
    window_s: float = 300.0
    check_s: float = 1.0


class CanaryWatch:
    def __init__(
        self,
        keeper: RolloutKeeper,
        policy: CanaryPolicy,
        clock: Callable[[], float],
        on_rollback: Callable[[], None] = lambda: None,
    ) -> None:
        self._on_rollback = on_rollback
        self._keeper = keeper
        self._policy = policy
        self._clock = clock
        self._seen: deque[tuple[float, str, Tier, Tally]] = deque()
        # Each rated answer's newest rating and when it came, oldest first: a change moves
        # the answer's one count (and its time) rather than adding one.
        self._ratings: dict[tuple[str, str], tuple[float, RatedAnswer]] = {}
        self._log = structlog.get_logger(component="canary")

    def told(self, tallies: dict[tuple[str, Tier], Tally]) -> None:
        now = self._clock()
        for (version, tier), tally in tallies.items():
            self._seen.append((now, version, tier, tally))

    def rated(self, ratings: list[RatedAnswer]) -> None:
        now = self._clock()
        for rated in ratings:
            key = (rated.user_id, rated.message_id)
            self._ratings.pop(key, None)
            self._ratings[key] = (now, rated)

    @property
    def window_s(self) -> float:
        return self._policy.window_s

    def _trim(self) -> None:
        horizon = self._clock() - self._policy.window_s
        while self._seen and self._seen[0][0] < horizon:
            self._seen.popleft()
        for key, (at, _) in list(self._ratings.items()):
            if at >= horizon:
                break
            del self._ratings[key]

    def totals(self) -> dict[str, Tally]:
        """Each version's answers within the window, every tier together."""
        self._trim()
        found: dict[str, Tally] = {}
        for _, version, _, tally in self._seen:
            found[version] = found.get(version, Tally()) + tally
        return found

    def by_tier(self, version: str = "") -> dict[tuple[str, Tier], Tally]:
        """Each version's tallies within the window per tier ('': every version): what
        `chatctl versions show` prints. A rollback clears the window (see check)."""
        self._trim()
        found: dict[tuple[str, Tier], Tally] = {}
        standing = ((r.version, r.tier, Tally(thumbs_up=int(r.rating is Rating.UP),
                                              thumbs_down=int(r.rating is Rating.DOWN)))
                    for _, r in self._ratings.values())  # fmt: skip
        for name, tier, tally in chain(((n, t, c) for _, n, t, c in self._seen), standing):
            if not version or name == version:
                found[name, tier] = found.get((name, tier), Tally()) + tally
        return found

    async def check(self) -> None:
        state, _ = await self._keeper.read()
        if not state.candidate or not any(share > 0 for _, share in state.percent):
            return
        totals = self.totals()
        found = breaches(totals.get(state.candidate, Tally()), totals.get(state.current, Tally()),
                         self._policy.rails)  # fmt: skip
        if not found:
            return
        reason = (f"automatic: {'; '.join(found)} against {state.current} "
                  f"over {self._policy.window_s:g} s")  # fmt: skip
        try:
            await self._keeper.change(lambda s, at: rollout.rollback(s, at, reason))
        except FailedPrecondition:
            return  # rolled back meanwhile
        self._log.error("canary rolled back", version=state.candidate, reason=reason)
        self._on_rollback()
        self._seen.clear()
        self._ratings.clear()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._policy.check_s)
            try:
                await self.check()
            except (*ETCD_ERRORS, TimeoutError) as error:
                self._log.warning("canary check skipped", error=type(error).__name__)
