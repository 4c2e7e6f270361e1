"""A canary's online guardrails: the candidate's answers against the current version's over
the same trailing window, each share compared with a margin. Errors (failed and "busy"
answers), refusals (the platform's: input and output checks and the model) and slow starts
(first text later than the gateway's slow mark, so a share over 1 % is a p99 over it) are
counted per version by the gateways; the scheduler rolls the candidate back on a breach."""

from __future__ import annotations

from dataclasses import dataclass


def _added(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Two histograms' counts bucket by bucket (an empty one is all zeros)."""
    longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
    return tuple(n + (shorter[i] if i < len(shorter) else 0) for i, n in enumerate(longer))


@dataclass(frozen=True, slots=True)
class Tally:
    answers: int = 0
    errors: int = 0
    refusals: int = 0
    slow: int = 0
    # Users' ratings of the version's answers (domain/feedback.py): shown, not judged.
    thumbs_up: int = 0
    thumbs_down: int = 0
    # Answers moved to another replica mid-answer at least once.
    failovers: int = 0
    # Counts per bucket of time to first text and of output tokens a second (domain/scores.py's
    # bounds): shown as percentiles, not judged (the slow share is the latency guardrail).
    ttft: tuple[int, ...] = ()
    rates: tuple[int, ...] = ()

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.answers + other.answers, self.errors + other.errors,
                     self.refusals + other.refusals, self.slow + other.slow,
                     self.thumbs_up + other.thumbs_up, self.thumbs_down + other.thumbs_down,
                     self.failovers + other.failovers, _added(self.ttft, other.ttft),
                     _added(self.rates, other.rates))  # fmt: skip

    def share(self, count: int) -> float:
        return count / self.answers if self.answers else 0.0


@dataclass(frozen=True, slots=True)
class Guardrails:
    error_margin: float = 0.05
    refusal_margin: float = 0.05
    slow_margin: float = 0.05
    # Fewer candidate answers than this in the window decide nothing.
    min_answers: int = 20


def breaches(candidate: Tally, baseline: Tally, rails: Guardrails) -> list[str]:
    """Each guardrail the candidate is worse on beyond its margin, with the figures."""
    if candidate.answers < rails.min_answers:
        return []
    found = []
    for name, margin, ours, theirs in (
        ("error share", rails.error_margin, candidate.errors, baseline.errors),
        ("refusal share", rails.refusal_margin, candidate.refusals, baseline.refusals),
        ("slow-start share", rails.slow_margin, candidate.slow, baseline.slow),
    ):
        mine, base = candidate.share(ours), baseline.share(theirs)
        if mine > base + margin:
            found.append(f"{name} {mine:.2f} > {base:.2f} + {margin:.2f} "
                         f"({candidate.answers} answers)")  # fmt: skip
    return found
