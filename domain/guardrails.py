"""A canary's online guardrails: the candidate's answers against the current version's over
the same trailing window, each share compared with a margin. Errors (failed and "busy"
answers), refusals (the platform's: input and output checks and the model) and slow starts
(first text later than the gateway's slow mark, so a share over 1 % is a p99 over it) are
counted per version by the gateways, and so are the passages answers cite: a cited id that was
not retrieved for the turn or resolves to no passage is a hallucinated citation, its share of
the cited ids a guardrail of its own. The scheduler rolls the candidate back on a breach."""

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
    # Cited passage ids the gateway checked once each answer was written, and those that
    # failed (hallucinated). Last, so that tallies built by position keep their meaning.
    citations: int = 0
    bad_citations: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.answers + other.answers, self.errors + other.errors,
                     self.refusals + other.refusals, self.slow + other.slow,
                     self.thumbs_up + other.thumbs_up, self.thumbs_down + other.thumbs_down,
                     self.failovers + other.failovers, _added(self.ttft, other.ttft),
                     _added(self.rates, other.rates), self.citations + other.citations,
                     self.bad_citations + other.bad_citations)  # fmt: skip

    def share(self, count: int) -> float:
        return count / self.answers if self.answers else 0.0

    @property
    def bad_citation_share(self) -> float:
        """Failed citations over cited ids (per id, not per answer: the rate an answer's reader
        meets a citation that leads nowhere); 0 with nothing cited."""
        return self.bad_citations / self.citations if self.citations else 0.0


@dataclass(frozen=True, slots=True)
class Guardrails:
    error_margin: float = 0.05
    refusal_margin: float = 0.05
    slow_margin: float = 0.05
    # Fewer candidate answers than this in the window decide nothing.
    min_answers: int = 20
    citation_margin: float = 0.02
    # Fewer candidate citations than this in the window decide nothing for the citation
    # guardrail: most answers cite nothing, so a window with enough answers can still hold a
    # handful of citations, where one bad one is a share of several points.
    min_citations: int = 20


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
    # Judged per cited id, on the answer minimum as well: one answer's citations are not
    # independent (an answer that makes up one passage tends to make up several).
    if candidate.citations >= rails.min_citations:
        mine, base = candidate.bad_citation_share, baseline.bad_citation_share
        margin = rails.citation_margin
        if mine > base + margin:
            found.append(f"hallucinated citation share {mine:.2f} > {base:.2f} + {margin:.2f} "
                         f"({candidate.citations} citations)")  # fmt: skip
    return found
