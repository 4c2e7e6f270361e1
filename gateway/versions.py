"""The gateway's copy of the model versions and their rollout, followed from the schedulers
(gateways never read etcd). An idle gateway asks with the revision it holds and the
scheduler holds the call until the rollout changes (or wait_s passes), so a change reaches
every gateway within a second without a poll twice a second; answers' tallies go at most
every poll_s, the held call given up as soon as the first one comes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import structlog

from domain.errors import Unavailable
from domain.feedback import RatedAnswer
from domain.guardrails import Tally
from domain.refusal import is_refusal
from domain.rollout import Assignment, RolloutState, Slice, serving
from domain.scores import RATE_BOUNDS, TTFT_BOUNDS_S, one_in
from domain.types import Finish, Tier, User

# An evaluation compares versions, not sampling luck: pinned (eval) users get greedy answers.
EVAL_TEMPERATURE = 0.0


Tallies = dict[tuple[str, Tier], Tally]


class RolloutSource(Protocol):
    async def rollout(
        self, known_revision: int, tallies: Tallies, wait_s: float = 0.0,
        ratings: Sequence[RatedAnswer] = (),
    ) -> tuple[int, RolloutState | None]: ...  # fmt: skip


class VersionBook:
    def __init__(
        self,
        source: RolloutSource,
        poll_s: float = 0.5,
        slow_ttft_s: float = 10.0,
        on_versions: Callable[[Iterable[str]], None] = lambda names: None,
        wait_s: float = 10.0,
    ) -> None:
        # Told every version's name as the rollout names them (their metrics start at zero).
        self._on_versions = on_versions
        self._source = source
        self._poll_s = poll_s
        self._wait_s = wait_s
        self._slow_ttft_s = slow_ttft_s
        self.state = RolloutState()
        self.revision = 0
        # Whether a scheduler has answered once: only then is revision 0 a revision held.
        self._known = False
        # The held call in flight, given up when an answer's tally comes.
        self._held: asyncio.Task[None] | None = None
        # Answers since the last report, per version and tier: sent with the next poll.
        self._tallies: Tallies = {}
        # Users' ratings since the last report: the scheduler counts each answer's newest.
        self._ratings: list[RatedAnswer] = []
        self._log = structlog.get_logger(component="versions")
        on_versions(v.name for v in self.state.versions)

    def tally(
        self, version: str, tier: Tier, finish: str, text: str, ttft_s: float | None,
        rate: float | None = None, failed_over: bool = False,
    ) -> None:  # fmt: skip
        """Counts one ended answer for the version's online guardrails and scores."""
        slow = ttft_s is not None and ttft_s > self._slow_ttft_s
        one = Tally(1, int(finish == Finish.ERROR.value), int(is_refusal(text, finish)), int(slow),
                    failovers=int(failed_over), ttft=one_in(ttft_s, TTFT_BOUNDS_S),
                    rates=one_in(rate, RATE_BOUNDS))  # fmt: skip
        self._add(version, tier, one)

    def count_citations(self, version: str, tier: Tier, cited: int, failed: int) -> None:
        """Counts one written answer's checked citations for the version's hallucinated-citation
        guardrail: `cited` ids it cited, `failed` of them not retrieved for the turn or
        resolving to no passage. Apart from tally(): the turn that retrieved the passages
        checks them, once its answer is written, and only answers that cite have any."""
        if not 0 <= failed <= cited:
            raise ValueError(f"failed citations must be 0 to {cited}, not {failed}")
        if cited:  # an answer that cites nothing tells the guardrail nothing, so sends nothing
            self._add(version, tier, Tally(citations=cited, bad_citations=failed))

    def tally_rating(self, rated: RatedAnswer) -> None:
        """One user's rating of a version's answer, sent with the next poll."""
        self._ratings.append(rated)
        self._send_now()

    def _add(self, version: str, tier: Tier, tally: Tally) -> None:
        self._tallies[version, tier] = self._tallies.get((version, tier), Tally()) + tally
        self._send_now()

    def _send_now(self) -> None:
        if self._held is not None:
            self._held.cancel()  # the tallies go now; the next call holds again once idle

    async def refresh(self, wait_s: float = 0.0) -> None:
        sent, self._tallies = self._tallies, {}
        rated, self._ratings = self._ratings, []
        try:
            revision, state = await self._source.rollout(self.revision, sent, wait_s, rated)
        except BaseException:
            for key, tally in sent.items():  # told next time instead
                self._tallies[key] = self._tallies.get(key, Tally()) + tally
            self._ratings[:0] = rated
            raise
        self._known = True
        if state is not None:
            if revision != self.revision and self.revision:
                self._log.info("rollout changed", revision=revision, current=state.current,
                               candidate=state.candidate, split=dict(state.percent))  # fmt: skip
            self.state, self.revision = state, revision
            self._on_versions(v.name for v in state.versions)

    async def run(self) -> None:
        # A scheduler from before held calls answers at once: then this is the poll it was.
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self._ask()
            except Unavailable as error:
                # Messages go on with the rollout last seen; it changes again once one answers.
                self._log.warning("rollout not refreshed", reason=error.reason)

    async def _ask(self) -> None:
        """One call: held while nothing is to be told and a revision is known, else at once."""
        if self._tallies or self._ratings or not self._known or self._wait_s <= 0:
            await self.refresh()
            return
        self._held = asyncio.create_task(self.refresh(self._wait_s))
        try:
            await asyncio.wait({self._held})
        finally:
            held, self._held = self._held, None
            if not held.done():
                held.cancel()  # this loop itself is cancelled
        if not held.cancelled():
            held.result()  # its error, if any, is this call's

    def serving(self, user: User, kept: str) -> Assignment:
        return serving(self.state, user.user_id, user.tier, kept)


def temperature_of(assignment: Assignment) -> float:
    if assignment.slice is Slice.PINNED:
        return EVAL_TEMPERATURE
    return assignment.version.temperature
