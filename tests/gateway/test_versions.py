"""The gateway's copy of the rollout: tallies go with the next poll, and come back to be sent
again when the poll fails; an unchanged revision keeps the state held."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import pytest

from domain.errors import Unavailable
from domain.feedback import RatedAnswer, Rating
from domain.guardrails import Tally
from domain.rollout import RolloutState, Version, create
from domain.scores import RATE_BOUNDS, TTFT_BOUNDS_S, one_in
from domain.types import Tier
from gateway.versions import VersionBook


class Source:
    def __init__(self) -> None:
        self.state = create(RolloutState(), Version("v2"), 1.0)
        self.told: list[dict] = []
        self.rated: list[list[RatedAnswer]] = []
        self.down = False

    async def rollout(
        self, known_revision: int, tallies: dict, wait_s: float = 0.0, ratings: Sequence = ()
    ) -> tuple[int, RolloutState | None]:
        if self.down:
            raise Unavailable("no scheduler")
        self.told.append(dict(tallies))
        self.rated.append(list(ratings))
        return 7, None if known_revision == 7 else self.state


async def test_tallies_are_sent_once_and_kept_when_the_poll_fails() -> None:
    source = Source()
    book = VersionBook(source, slow_ttft_s=5.0)
    book.tally("v2", Tier.FREE, "error", "", None)
    book.tally("v2", Tier.FREE, "stop", "I can't help with that.", 9.0)
    source.down = True
    with pytest.raises(Unavailable):
        await book.refresh()
    source.down = False
    book.tally("v2", Tier.FREE, "stop", "Paris.", 1.0)
    await book.refresh()
    await book.refresh()
    ttft = one_in(9.0, TTFT_BOUNDS_S)
    ttft = tuple(a + b for a, b in zip(ttft, one_in(1.0, TTFT_BOUNDS_S), strict=True))
    told = Tally(answers=3, errors=1, refusals=1, slow=1, ttft=ttft)
    assert source.told == [{("v2", Tier.FREE): told}, {}]
    assert (book.revision, book.state.has("v2")) == (7, True)


async def test_ratings_go_with_the_next_poll_and_every_version_named_is_told() -> None:
    source = Source()
    named: list[list[str]] = []
    book = VersionBook(source, on_versions=lambda names: named.append(list(names)))
    ratings = [RatedAnswer("u1", "m1.answer", "v2", Tier.PLUS, Rating.UP),
               RatedAnswer("u1", "m1.answer", "v2", Tier.PLUS, Rating.DOWN),
               RatedAnswer("u2", "m2.answer", "v2", Tier.PLUS, Rating.DOWN)]  # fmt: skip
    book.tally_rating(ratings[0])
    source.down = True
    with pytest.raises(Unavailable):
        await book.refresh()
    source.down = False
    for rated in ratings[1:]:
        book.tally_rating(rated)
    book.tally("v2", Tier.PLUS, "stop", "Paris.", None, rate=30.0, failed_over=True)
    await book.refresh()
    told = Tally(answers=1, failovers=1, rates=one_in(30.0, RATE_BOUNDS))
    # Each rating as it was given, in order (the one a failed poll did not deliver first):
    # the scheduler keeps each answer's newest.
    assert (source.told, source.rated) == ([{("v2", Tier.PLUS): told}], [ratings])
    # The configured version at the start, then the rollout's versions once it came.
    assert named == [["base"], ["base", "v2"]]


async def test_an_answers_citations_go_with_the_next_poll_beside_its_tally() -> None:
    source = Source()
    book = VersionBook(source)
    book.tally("v2", Tier.PLUS, "stop", "Paris [[cite:p1]].", None)
    book.count_citations("v2", Tier.PLUS, cited=3, failed=1)
    book.count_citations("v2", Tier.PLUS, cited=2, failed=0)
    book.count_citations("v2", Tier.FREE, cited=0, failed=0)  # cited nothing: nothing to tell
    await book.refresh()
    told = Tally(answers=1, citations=5, bad_citations=1)
    assert source.told == [{("v2", Tier.PLUS): told}]
    with pytest.raises(ValueError):
        book.count_citations("v2", Tier.PLUS, cited=1, failed=2)
    with pytest.raises(ValueError):
        book.count_citations("v2", Tier.PLUS, cited=1, failed=-1)


class HoldingSource(Source):
    """Holds a call with a wait until it is cancelled, as a scheduler does while the rollout
    stays as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[float, dict]] = []
        self.holding = asyncio.Event()

    async def rollout(
        self, known_revision: int, tallies: dict, wait_s: float = 0.0, ratings: Sequence = ()
    ) -> tuple[int, RolloutState | None]:
        self.calls.append((wait_s, dict(tallies)))
        if wait_s:
            self.holding.set()
            await asyncio.Event().wait()  # until cancelled
        return await super().rollout(known_revision, tallies)


async def test_an_idle_gateway_holds_its_call_and_an_answers_tally_goes_at_once() -> None:
    source = HoldingSource()
    book = VersionBook(source, poll_s=0.01, wait_s=10.0)
    running = asyncio.create_task(book.run())
    try:
        await asyncio.wait_for(source.holding.wait(), 5)
        # First a call at once (nothing known yet), then one held with the revision known.
        assert [wait for wait, _ in source.calls] == [0.0, 10.0]
        book.tally("v2", Tier.FREE, "stop", "Paris.", 1.0)
        source.holding.clear()
        await asyncio.wait_for(source.holding.wait(), 5)
        told = Tally(answers=1, ttft=one_in(1.0, TTFT_BOUNDS_S))
        # The held call gave up; the tally went in a call of its own, then it held again.
        assert source.calls[2:] == [(0.0, {("v2", Tier.FREE): told}), (10.0, {})]
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
