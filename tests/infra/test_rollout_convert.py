"""Tallies over the wire: what a gateway sends is what the scheduler counts, every field of it,
and a count past uint32 is sent as the largest one rather than wrapped."""

from __future__ import annotations

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as pb
from domain.guardrails import Tally
from domain.scores import TTFT_BOUNDS_S, one_in
from domain.types import Tier
from infra.rollout_convert import tallies_from_pb, tallies_to_pb


def over_the_wire(tallies: dict[tuple[str, Tier], Tally]) -> dict[tuple[str, Tier], Tally]:
    sent = pb.GetVersionScoresResponse(tallies=tallies_to_pb(tallies)).SerializeToString()
    return tallies_from_pb(pb.GetVersionScoresResponse.FromString(sent).tallies)


def test_a_tally_comes_back_as_it_went_citations_and_all() -> None:
    every = Tally(answers=9, errors=1, refusals=2, slow=3, thumbs_up=4, thumbs_down=5,
                  failovers=6, ttft=one_in(0.3, TTFT_BOUNDS_S), rates=(0, 1), citations=12,
                  bad_citations=7)  # fmt: skip
    tallies = {("v2", Tier.FREE): every, ("base", Tier.PLUS): Tally(answers=1)}
    assert over_the_wire(tallies) == tallies


def test_a_sender_without_citations_counts_none() -> None:
    old = pb.VersionTally(version="v2", tier=common_pb2.TIER_FREE, answers=3, errors=1)
    (tally,) = tallies_from_pb([old]).values()
    assert (tally.citations, tally.bad_citations, tally.bad_citation_share) == (0, 0, 0.0)


def test_a_count_past_uint32_is_sent_as_the_largest() -> None:
    (sent,) = tallies_to_pb({("v2", Tier.FREE): Tally(citations=2**33, bad_citations=2**32)})
    assert (sent.citations, sent.bad_citations) == (2**32 - 1, 2**32 - 1)
