"""The rollout (domain/rollout.py) as protobuf and back: the scheduler serves it, gateways and
chatctl read it, so the conversion is written once here."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import timestamp_pb2

from chat.v1 import scheduler_service_pb2 as pb
from domain.feedback import RatedAnswer, Rating
from domain.guardrails import Tally
from domain.rollout import GateRecord, RolloutChange, RolloutState, Version
from domain.scores import RATE_BOUNDS, TTFT_BOUNDS_S, fitted
from domain.types import Tier
from infra.convert import TIER_FROM_PB, TIER_TO_PB

# A count over uint32 (tallies summed over a window) is sent as the largest uint32.
_U32 = 2**32 - 1


def _u32(count: int) -> int:
    return min(count, _U32)


def tallies_to_pb(tallies: dict[tuple[str, Tier], Tally]) -> list[pb.VersionTally]:
    return [
        pb.VersionTally(
            version=version,
            tier=TIER_TO_PB[tier],
            answers=_u32(t.answers),
            errors=_u32(t.errors),
            refusals=_u32(t.refusals),
            slow=_u32(t.slow),
            thumbs_up=_u32(t.thumbs_up),
            thumbs_down=_u32(t.thumbs_down),
            failovers=_u32(t.failovers),
            ttft_counts=[_u32(n) for n in t.ttft],
            rate_counts=[_u32(n) for n in t.rates],
            citations=_u32(t.citations),
            bad_citations=_u32(t.bad_citations),
        )
        for (version, tier), t in tallies.items()
    ]


def tallies_from_pb(tallies: Iterable[pb.VersionTally]) -> dict[tuple[str, Tier], Tally]:
    found: dict[tuple[str, Tier], Tally] = {}
    for t in tallies:
        key = (t.version, TIER_FROM_PB.get(t.tier, Tier.FREE))
        ttft = fitted(t.ttft_counts, TTFT_BOUNDS_S)
        rates = fitted(t.rate_counts, RATE_BOUNDS)
        found[key] = found.get(key, Tally()) + Tally(
            t.answers, t.errors, t.refusals, t.slow, t.thumbs_up, t.thumbs_down, t.failovers,
            ttft, rates, t.citations, t.bad_citations,
        )  # fmt: skip
    return found


def ratings_to_pb(ratings: Iterable[RatedAnswer]) -> list[pb.RatedAnswer]:
    return [pb.RatedAnswer(user_id=r.user_id, message_id=r.message_id, version=r.version,
                           tier=TIER_TO_PB[r.tier], up=r.rating is Rating.UP)
            for r in ratings]  # fmt: skip


def ratings_from_pb(ratings: Iterable[pb.RatedAnswer]) -> list[RatedAnswer]:
    return [RatedAnswer(r.user_id, r.message_id, r.version, TIER_FROM_PB.get(r.tier, Tier.FREE),
                        Rating.UP if r.up else Rating.DOWN)
            for r in ratings]  # fmt: skip


def gate_sizes_to_pb(gate: GateRecord) -> pb.GateSizes:
    return pb.GateSizes(golden_pairs=_u32(gate.golden_pairs),
                        harmful_prompts=_u32(gate.harmful_prompts),
                        harmless_prompts=_u32(gate.harmless_prompts),
                        min_set_size=_u32(gate.min_set_size))  # fmt: skip


def gate_from_pb(
    candidate: str, baseline: str, passed: bool, at: float, summary: str, sizes: pb.GateSizes
) -> GateRecord:
    """A GateChange's or a GateResult's verdict (the two carry the same fields)."""
    return GateRecord(candidate, baseline, passed, at, summary, sizes.golden_pairs,
                      sizes.harmful_prompts, sizes.harmless_prompts,
                      sizes.min_set_size)  # fmt: skip


def version_to_pb(version: Version) -> pb.ModelVersion:
    return pb.ModelVersion(name=version.name, model=version.model,
                           system_prompt=version.system_prompt,
                           temperature=version.temperature)  # fmt: skip


def version_from_pb(message: pb.ModelVersion) -> Version:
    return Version(message.name, message.model, message.system_prompt, message.temperature)


def _stamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def rollout_to_pb(state: RolloutState) -> pb.Rollout:
    return pb.Rollout(
        versions=[version_to_pb(v) for v in state.versions],
        current=state.current,
        candidate=state.candidate,
        percent=dict(state.percent),
        salt=state.salt,
        holdout_version=state.holdout_version,
        holdout_salt=state.holdout_salt,
        holdout_percent=state.holdout_percent,
        pins=[pb.UserPin(user_id=u, version=v) for u, v in state.pins],
        history=[
            pb.RolloutChange(at=_stamp(c.at), action=c.action, version=c.version, detail=c.detail)
            for c in state.history
        ],
        gates=[
            pb.GateResult(
                candidate=g.candidate,
                baseline=g.baseline,
                passed=g.passed,
                at=_stamp(g.at),
                summary=g.summary,
                sizes=gate_sizes_to_pb(g),
            )
            for g in state.gates
        ],
    )


def rollout_from_pb(message: pb.Rollout) -> RolloutState:
    return RolloutState(
        versions=tuple(version_from_pb(v) for v in message.versions),
        current=message.current,
        candidate=message.candidate,
        percent=tuple(sorted(message.percent.items())),
        salt=message.salt,
        holdout_version=message.holdout_version,
        holdout_salt=message.holdout_salt,
        holdout_percent=message.holdout_percent,
        pins=tuple((p.user_id, p.version) for p in message.pins),
        history=tuple(
            RolloutChange(c.at.ToNanoseconds() / 1e9, c.action, c.version, c.detail)
            for c in message.history
        ),
        gates=tuple(
            gate_from_pb(
                g.candidate, g.baseline, g.passed, g.at.ToNanoseconds() / 1e9, g.summary, g.sizes
            )
            for g in message.gates
        ),
    )
