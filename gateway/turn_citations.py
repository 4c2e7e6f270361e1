"""One tool-loop turn's citations (docs/decisions.md, "Citations cannot be invented"): the
passages its searches brought in, the ids its answer step may cite (the engine decodes that
step under a grammar allowing no other), the resolver every step's text passes before it is
shown, and, once the turn ends, the count of what it found (a metric, and the serving
version's tally for the canary's citation guardrail).

A turn that lists no passage source (file_search) creates none of this: its text is shown as
it comes, at no cost."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Protocol

import structlog

from domain.answer_options import AnswerOptions, ToolChoice
from domain.citations import MOST_IDS, CitationResolver, Finding, hallucinated
from domain.types import Tier, User
from gateway.metrics import GatewayMetrics
from gateway.tool_ports import PassageSource

# The surfaces a turn is shown on, each with the citation-shaped forms (C03) it keeps.
RESPONSES = "responses"
CONVERSATION = "conversation"


class CitationTally(Protocol):
    """The serving version's tally (gateway/versions.py): the canary's citation guardrail."""

    def count_citations(self, version: str, tier: Tier, cited: int, failed: int) -> None: ...


class NoTally:
    def count_citations(self, version: str, tier: Tier, cited: int, failed: int) -> None:
        """A loop composed without versions counts for no canary."""


class TurnCitations:
    def __init__(self, allowed_forms: Collection[str], grammar: bool = True) -> None:
        self._allowed_forms = frozenset(allowed_forms)
        self._grammar = grammar
        self._sources: list[PassageSource] = []
        self._read: dict[str, None] = {}  # passage ids, in the order read
        self._resolver: CitationResolver | None = None

    def listed(self, source: object) -> None:
        """A server opened for the turn: a passage source makes the turn one with citations."""
        if isinstance(source, PassageSource):
            self._sources.append(source)
            if self._resolver is None:
                self._resolver = CitationResolver((), self._allowed_forms)

    def read(self, passage_ids: Collection[str]) -> None:
        for passage_id in passage_ids:
            self._read.setdefault(passage_id, None)
        if self._resolver is not None:
            self._resolver.retrieved = frozenset(self._read)

    def step_options(self, options: AnswerOptions) -> AnswerOptions:
        """A step after passages were read answers: it is offered no tools, and the engine
        decodes it under the grammar of the ids read (the first MOST_IDS, in the order read).
        A grammar for text and one for tool calls cannot hold together, and a citation the
        engine cannot invent is the stronger control. Without the grammar (an operator's
        engine that has none) the step is still the answer, checked by the resolver alone."""
        if not self._read:
            return options
        ids = tuple(self._read)[:MOST_IDS] if self._grammar else ()
        return replace(options, tools=(), tool_choice=ToolChoice.AUTO, citation_ids=ids)

    def shown(self, text: str) -> str:
        return text if self._resolver is None else self._resolver.feed(text)

    def step_ended(self) -> str:
        """What the resolver held at the step's end: a step's text is not continued by the
        next one's (tool turns come between)."""
        return "" if self._resolver is None else self._resolver.flush()

    def withdrawn(self) -> None:
        """The output check withdrew what was shown: the resolver starts again."""
        if self._resolver is not None:
            self._resolver = CitationResolver(self._read, self._allowed_forms)

    async def ended(
        self, user: User, version: str, metrics: GatewayMetrics, tally: CitationTally
    ) -> None:
        """The final pass over the whole shown answer, and the count of what was found."""
        resolver = self._resolver
        if resolver is None:
            return
        resolver.finish()
        unretrieved = resolver.report.unretrieved_ids
        resolving: frozenset[str] = frozenset()
        for source in self._sources:
            resolving |= await source.resolving(unretrieved) if unretrieved else frozenset()
        report = resolver.classify(resolving)
        for finding, count in report.counts.items():
            metrics.citations.labels(finding.value).inc(count)
        cited, failed = hallucinated(report)
        if cited:
            tally.count_citations(version, user.tier, cited, failed)
        if failed or report.counts.get(Finding.MISSED):
            structlog.get_logger(component="tool_loop").warning(
                "citations_repaired", user_id=user.user_id, version=version,
                findings={f.value: n for f, n in report.counts.items()},
                unretrieved=unretrieved[:8],
            )  # fmt: skip
