"""The safety classifier seam, and the default one: a narrow hard-block rule set built from data
(the blocklist file is read where the gateway is composed, gateway/main.py).

Narrow on purpose: the input check covers only categories every platform
hard-blocks, with high precision; the model's trained refusals and the output check do the rest.
A false refusal is a product failure too, so every rule needs more than a scary word to fire."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from domain.safety.text import Folded, Folder


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    # Empty when allowed. The category names the policy, the reason the rule that fired; neither
    # repeats the matched text, so verdicts can be logged and recorded as they are.
    category: str = ""
    reason: str = ""


ALLOWED = Verdict(allowed=True)


class SafetyClassifier(Protocol):
    """Anything that judges a text on its own: the rule set here, or a small model later."""

    def classify(self, text: str) -> Verdict: ...


@dataclass(frozen=True, slots=True)
class TermGroup:
    """Interchangeable terms ("sarin", "nerve agent"...), any of which counts as a hit.

    Checked with set and substring operations, not a regex alternation: with dozens of terms
    that is several times faster, and most windows fail on their first group."""

    words: frozenset[str]  # one-word terms, matched whole
    word_needles: tuple[str, ...]  # the same as " word ", to find where they occur
    # Several words (" mustard gas "), or a word start (" synthes"), searched in Folded.padded.
    needles: tuple[str, ...]
    fragments: tuple[str, ...]  # every term without spaces, looked for inside spelled-out words

    def present(self, text: Folded) -> bool:
        return (
            not self.words.isdisjoint(text.vocabulary)
            or any(needle in text.padded for needle in self.needles)
            or any(self._in_spelled(text.words[i]) for i in text.spelled)
        )

    def hits(self, text: Folded) -> list[int]:
        """Word indices where a term starts, in order. Slower; run only when `present`."""
        offsets: set[int] = set()
        for needle in self.word_needles + self.needles:
            at = text.padded.find(needle)
            while at >= 0:
                offsets.add(at)
                at = text.padded.find(needle, at + 1)
        found = set(text.word_indices(sorted(offsets)))
        found.update(i for i in text.spelled if self._in_spelled(text.words[i]))
        return sorted(found)

    def _in_spelled(self, word: str) -> bool:
        return any(fragment in word for fragment in self.fragments)


@dataclass(frozen=True, slots=True)
class SquashedRule:
    """A distinctive phrase matched with every separator removed: no spacing, punctuation or
    invisible character between its letters hides it. Only for phrases no ordinary text holds."""

    rule_id: str
    squashed: tuple[str, ...]

    def matches(self, text: Folded) -> bool:
        return any(phrase in text.squashed for phrase in self.squashed)


@dataclass(frozen=True, slots=True)
class NearRule:
    """Fires when a term of every group occurs within `span_words` words of each other, unless a
    term of `unless` is that close too ("symptoms of sarin exposure" is not a recipe)."""

    rule_id: str
    groups: tuple[TermGroup, ...]  # rarest first: the first group absent ends the check
    span_words: int
    unless: TermGroup | None = None

    def matches(self, text: Folded) -> bool:
        if not all(group.present(text) for group in self.groups):
            return False
        hits = [group.hits(text) for group in self.groups]
        exempt = self.unless.hits(text) if self.unless else []
        return _close_together(hits, self.span_words, exempt)


def _close_together(hits: Sequence[list[int]], span: int, exempt: list[int]) -> bool:
    """Whether one hit of every group fits in `span` words with no exempting term near them."""
    events = sorted((index, group) for group, indices in enumerate(hits) for index in indices)
    latest = [-1] * len(hits)  # the newest hit of each group so far: the tightest window
    for index, group in events:
        latest[group] = index
        first = min(latest)
        if first >= 0 and index - first <= span:
            if not _any_within(exempt, first - span, index + span):
                return True
    return False


def _any_within(indices: list[int], lo: int, hi: int) -> bool:
    return any(lo <= i <= hi for i in indices)


Rule = SquashedRule | NearRule


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    rules: tuple[Rule, ...]


class BlocklistClassifier:
    """The default SafetyClassifier: the rules of a blocklist, over folded text."""

    def __init__(self, folder: Folder, categories: Sequence[Category]) -> None:
        self._folder = folder
        self._categories = tuple(categories)

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> BlocklistClassifier:
        """The rules of a blocklist document (domain/safety/blocklist.json's shape); built once
        when a service is composed, never per message."""
        folder = Folder(data.get("char_map", {}))
        categories = [
            Category(name, tuple(_rule(folder, name, raw) for raw in body["rules"]))
            for name, body in data["categories"].items()
        ]
        if not categories:
            raise ValueError("a blocklist needs at least one category")
        return cls(folder, categories)

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(category.name for category in self._categories)

    def classify(self, text: str) -> Verdict:
        folded = self._folder.fold(text)
        for category in self._categories:
            for rule in category.rules:
                if rule.matches(folded):
                    return Verdict(False, category.name, f"rule {category.name}/{rule.rule_id}")
        return ALLOWED


def _rule(folder: Folder, category: str, raw: Mapping[str, Any]) -> Rule:
    rule_id = str(raw.get("id", "?"))
    if "squashed" in raw:
        phrases = tuple(folder.fold(p).squashed for p in raw["squashed"])
        if not all(phrases):
            raise ValueError(f"{category}/{rule_id}: an empty phrase would match every text")
        return SquashedRule(rule_id, phrases)
    if "near" in raw:
        groups = tuple(_group(folder, terms) for terms in raw["near"])
        unless = _group(folder, raw["unless"]) if raw.get("unless") else None
        if not groups:
            raise ValueError(f"{category}/{rule_id}: 'near' needs at least one group")
        return NearRule(rule_id, groups, int(raw.get("span_words", 8)), unless)
    raise ValueError(f"{category}/{rule_id}: a rule needs 'squashed' or 'near'")


def _group(folder: Folder, terms: Sequence[str]) -> TermGroup:
    """Terms are folded like the text they are matched against; a trailing '*' matches any
    ending ("synthes*": synthesize, synthesise, synthesis)."""
    words: set[str] = set()
    needles: list[str] = []
    fragments: list[str] = []
    for term in terms:
        folded = folder.fold(term.removesuffix("*")).words
        if not folded:
            raise ValueError(f"the term {term!r} has no letters")
        prefix = term.endswith("*")
        if len(folded) == 1 and not prefix:
            words.add(folded[0])
        else:
            needles.append(" " + " ".join(folded) + ("" if prefix else " "))
        fragments.append("".join(folded))
    word_needles = tuple(f" {word} " for word in sorted(words))
    return TermGroup(frozenset(words), word_needles, tuple(needles), tuple(fragments))
