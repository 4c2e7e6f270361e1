"""Conversation compaction: when to fold old turns into a summary, what survives verbatim, and
the words sent to the small model. Pure code, no I/O; gateway/compactor.py runs it.

Sizing 002's rule (docs/ARCHITECTURE.md, "Reference sizing"): one pass when the history
reaches 70 % of the working budget (never a little every turn: a changed prefix re-prefills
everything after it); the first user message (the task statement), the last 6 turns and
pinned constraints stay verbatim; the rest becomes a structured block. Choices made here
(docs/decisions.md, "Compaction"):

- "Tokens added since the last compaction" is derived, not stored: a compaction keeps exactly
  the last `keep_last_turns` turns after its summary point, so whatever follows them on the
  branch was added since. The first compaction has no previous summary to protect and is
  gated by the threshold alone.
- Past the whole budget the context builder would drop one old turn per message, which moves
  the prefix every turn; compacting then is cheaper than honouring `min_tokens_between`.
- A turn is one stored message (a question or an answer): the last 6 turns are the last 3
  exchanges.
- Constraints are whole sentences of the user's folded turns, kept character for character.
  At most `max_pinned` survive; the newest win, since a later instruction usually refines an
  earlier one. Questions never pin through the weak markers ("Do you always...?").
- The summary turn is the first user message, verbatim, then the structured summary, so a
  later compaction can take the previous summary back out of it exactly.
- The task is re-anchored at the end: the turn that sits just before the new message (the
  pinned turn) opens with the first user message, cut to `task_anchor_chars` at a word, then
  the constraints. Its whole text stays in the summary turn; the end of a prompt is where a
  model recalls best, and the rebuild is where the task is most easily lost.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from domain.types import Role, Turn

FIRST_MESSAGE_HEADER = "Earlier in this conversation. The user's first message, verbatim:"
SUMMARY_HEADER = "Summary of the conversation after it (older turns were folded into this):"
PINNED_HEADER = "Constraints the user set earlier in this conversation; they still apply:"
TASK_HEADER = "The task of this conversation, as the user first asked it:"
SUMMARY_SECTIONS = ("Facts", "Decisions", "Open questions", "User preferences")

# Chat-template tokens around each turn the summarizer reads, and a margin for the template
# and the tokenizer the stored counts did not come from.
TURN_OVERHEAD_TOKENS = 8
REQUEST_MARGIN_TOKENS = 64


@dataclass(frozen=True, slots=True)
class Split:
    """One compaction's view of a branch of turns, oldest first."""

    # The task statement, rendered verbatim into the summary turn.
    first: Turn | None
    folded: tuple[Turn, ...]
    # The newest turns, left in the history as they are.
    kept: tuple[Turn, ...]
    # Durable constraints found in the folded user turns, verbatim.
    pinned: tuple[str, ...]
    # Index, in the turns split, just past the last folded one.
    fold_end: int

    def fold_only(self, count: int) -> Split:
        """The same split folding only the oldest `count` turns; the rest stay verbatim
        (used when the summarizer's context cannot read them all at once)."""
        count = max(0, min(count, len(self.folded)))
        folded = self.folded[:count]
        return Split(
            self.first,
            folded,
            self.folded[count:] + self.kept,
            pinned_constraints(folded),
            self.fold_end - (len(self.folded) - count),
        )


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    threshold_share: float = 0.7
    keep_last_turns: int = 6
    # A new summary empties the replica's prefix cache, so never more often than this.
    min_tokens_between: int = 3000
    summary_max_tokens: int = 400
    max_pinned: int = 20
    # The first user message re-anchored at the end of every prompt after a compaction, cut
    # here (at a word) so a long first message does not cost its whole length every turn.
    task_anchor_chars: int = 400

    def needs_compaction(
        self,
        *,
        window_tokens: int,
        answer_reserve_tokens: int,
        system_tokens: int,
        summary_tokens: int,
        pinned_tokens: int,
        since_summary: Sequence[Turn],
        compacted: bool,
    ) -> bool:
        """Whether the next prompt is big enough, and the last summary old enough, to fold.

        `since_summary`: the branch's turns after the summary point (all of them, the first
        message included, when `compacted` is False).
        """
        foldable = len(since_summary) - self.keep_last_turns - (0 if compacted else 1)
        if foldable <= 0:
            return False
        budget = window_tokens - answer_reserve_tokens
        load = system_tokens + summary_tokens + pinned_tokens + _tokens(since_summary)
        if load < self.threshold_share * budget:
            return False
        if not compacted:
            return True
        added = _tokens(since_summary[self.keep_last_turns :])
        return added >= self.min_tokens_between or load > budget

    def split(self, turns: Sequence[Turn], already_folded: int = 0) -> Split:
        """What stays verbatim and what is folded. `turns` is the whole branch, oldest first,
        its first turn the task statement; `already_folded` of them sit in the summary."""
        fold_start = max(1, already_folded)
        fold_end = max(fold_start, len(turns) - self.keep_last_turns)
        folded = tuple(turns[fold_start:fold_end])
        return Split(
            turns[0] if turns else None,
            folded,
            tuple(turns[fold_end:]),
            pinned_constraints(folded),
            fold_end,
        )

    def merge_pinned(self, previous: Iterable[str], found: Iterable[str]) -> tuple[str, ...]:
        """Earlier constraints then new ones, each once, the newest `max_pinned` kept."""
        merged: dict[str, str] = {}
        for constraint in (*previous, *found):
            key = constraint.casefold()
            merged.pop(key, None)  # a repeated constraint moves to the newest position
            merged[key] = constraint
        return tuple(merged.values())[-self.max_pinned :] if self.max_pinned > 0 else ()


def _tokens(turns: Iterable[Turn]) -> int:
    return sum(turn.tokens for turn in turns)


def fold_fitting(folded: Sequence[Turn], budget_tokens: int) -> int:
    """How many of the oldest folded turns the summarizer can read within its budget."""
    used = 0
    for count, turn in enumerate(folded):
        used += turn.tokens + TURN_OVERHEAD_TOKENS
        if used > budget_tokens:
            return count
    return len(folded)


# Durable constraints ---------------------------------------------------------------------------
#
# A narrow rule set over single sentences of the user's own turns. It misses paraphrases
# rather than pinning chatter: a false pin costs a few tokens on every prompt, a missed one
# is caught by the summary's "User preferences" section.

_LANGUAGES = (
    "English|French|German|Spanish|Italian|Portuguese|Dutch|Swedish|Norwegian|Danish|Finnish|"
    "Polish|Czech|Greek|Turkish|Russian|Ukrainian|Arabic|Hebrew|Hindi|Bengali|Urdu|Chinese|"
    "Mandarin|Cantonese|Japanese|Korean|Vietnamese|Thai|Indonesian|Malay|Swahili|Latin"
)
# Fillers a directive may start with: "Also, please always ...".
_LEAD = r"^(?:(?:ok(?:ay)?|also|and|so|but|please|quick note|note|one more thing|btw)\W+)*"
_DIETS = (
    r"allergic|intolerant|lactose[- ]intolerant|vegetarian|vegan|pescatarian|diabetic|"
    r"pregnant|celiac|coeliac|gluten[- ]free|dairy[- ]free|halal|kosher|colou?r[- ]?blind|"
    r"deaf|blind|dyslexic|a beginner|new to"
)
# Markers that make a sentence durable wherever they are, questions included.
_STRONG = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\b(?:from now on|going forward|from here on|for the rest of (?:this|our|the) "
        r"(?:conversation|chat)|in (?:all )?(?:future|your next) (?:answers|replies|responses))\b",
        _LEAD + r"(?:remember|keep in mind|bear in mind|don'?t forget|do not forget)\b",
        _LEAD + r"(?:do not|don'?t|never|avoid|stop)\s+(?:ever\s+)?(?:use|using|mention|"
        r"mentioning|include|including|add|adding|suggest|suggesting|recommend|recommending|"
        r"call|calling|say|saying|give|giving)\b",
        r"\b(?:i am|i'm|im)\s+(?:an?\s+|also\s+|very\s+|severely\s+|strictly\s+|really\s+)?"
        rf"(?:{_DIETS})\b",
        r"\bi\s+(?:can'?t|cannot|can not|don'?t|do not|never)\s+(?:eat|have|drink|tolerate|"
        r"take)\b",
        r"\bmy\s+(?:allergy|allergies|diet)\b",
        r"\b(?:my name is|call me)\b",
        _LEAD + r"(?:(?:always|only)\s+)?(?:answer|reply|respond|write|speak|talk)"
        rf"(?:\s+to\s+me)?(?:\s+only)?\s+in\s+(?:{_LANGUAGES})\b",
        r"\b(?:keep|limit)\s+(?:your\s+|the\s+|all\s+|my\s+)?(?:answers?|repl(?:y|ies)|"
        r"responses?)\s+(?:under|below|to|within|short|brief|concise|at)\b",
        r"\bi\s+(?:prefer|want all|want your answers|like my answers)\b",
    )
)
# "Always ..." / "you should never ..." read as standing orders only outside questions.
_WEAK = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        _LEAD + r"(?:always|never)\b",
        r"\byou\s+(?:should|must|need to|have to|will)\s+(?:always|never)\b",
    )
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def is_durable_constraint(sentence: str) -> bool:
    """Whether one sentence of a user's turn sets a rule for the rest of the conversation:
    an instruction ("always ...", "never ...", "from now on ...", "don't use ...", "answer
    in French", "keep answers under 100 words", "remember that ...") or a lasting fact about
    the user ("I am allergic to nuts", "I'm vegetarian", "I can't eat gluten")."""
    text = sentence.strip()
    if any(pattern.search(text) for pattern in _STRONG):
        return True
    return not text.endswith("?") and any(pattern.search(text) for pattern in _WEAK)


def sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]


def pinned_constraints(turns: Iterable[Turn]) -> tuple[str, ...]:
    """The durable sentences of the user's turns, verbatim, in order, each once."""
    found: dict[str, str] = {}
    for turn in turns:
        if turn.role is not Role.USER:
            continue  # the assistant's words are not the user's rules
        for sentence in sentences(turn.text):
            if is_durable_constraint(sentence):
                found.setdefault(sentence.casefold(), sentence)
    return tuple(found.values())


# Rendering ------------------------------------------------------------------------------------


def _summary_prefix(first_message: str) -> str:
    return f"{FIRST_MESSAGE_HEADER}\n{first_message}\n\n{SUMMARY_HEADER}\n"


def render_summary(first_message: str, summary: str) -> str:
    """The summary turn's text: the task statement verbatim, then the structured summary."""
    return _summary_prefix(first_message) + summary.strip()


def summary_body(rendered: str, first_message: str) -> str:
    """The structured summary back out of a rendered summary turn (for the next pass)."""
    prefix = _summary_prefix(first_message)
    return rendered[len(prefix) :] if rendered.startswith(prefix) else rendered


def render_pinned(constraints: Sequence[str]) -> str:
    """The constraints' text ('' without constraints): one '- ' line per constraint."""
    if not constraints:
        return ""
    return PINNED_HEADER + "\n" + "\n".join(f"- {constraint}" for constraint in constraints)


def render_anchor(first_message: str, constraints: Sequence[str], task_chars: int) -> str:
    """The pinned turn after a compaction: the task statement (cut at a word past task_chars,
    with an ellipsis), then the constraints."""
    task = " ".join(first_message.split())
    if len(task) > task_chars:
        task = task[: task_chars + 1].rsplit(" ", 1)[0].rstrip() + " …"
    pinned = render_pinned(constraints)
    return f"{TASK_HEADER}\n{task}" + (f"\n{pinned}" if pinned else "")


def parse_pinned(rendered: str) -> tuple[str, ...]:
    """The constraints back out of a pinned turn, with or without the task before them."""
    lines = rendered.splitlines()
    if PINNED_HEADER in lines:
        lines = lines[lines.index(PINNED_HEADER) + 1 :]
    elif lines[:1] == [TASK_HEADER]:
        return ()  # the task alone: its lines are the user's words, not constraints
    else:
        lines = lines[1:]
    return tuple(line[2:] for line in lines if line.startswith("- "))


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What the small model is asked: an instruction (system turn) and the material (user)."""

    instruction: str
    material: str


def summary_request(
    policy: CompactionPolicy, folded: Sequence[Turn], previous_summary: str
) -> SummaryRequest:
    # Words, not tokens: small models follow a word count; 3/4 of a token a word leaves room.
    words = policy.summary_max_tokens * 3 // 4
    sections = "\n".join(f"{name}:\n- ..." for name in SUMMARY_SECTIONS)
    instruction = (
        "You compress the older part of a chat between a user and an assistant, so the "
        "assistant can go on without reading it. Write the summary in exactly these "
        "sections, each a short list of '- ' lines, and '- none' when a section is empty:\n"
        f"{sections}\n"
        "Rules: use only what the conversation below says; never add, guess or invent "
        "anything; keep names, numbers, dates and code identifiers exactly as written; "
        "merge the earlier summary, if any, with the new turns; no greeting, no commentary; "
        f"at most {words} words."
    )
    parts = []
    if previous_summary.strip():
        parts.append(f"Earlier summary:\n{previous_summary.strip()}")
    transcript = "\n".join(f"{_speaker(turn.role)}: {turn.text}" for turn in folded)
    parts.append(f"Conversation to fold in:\n{transcript}")
    parts.append("Write the summary now.")
    return SummaryRequest(instruction, "\n\n".join(parts))


def _speaker(role: Role) -> str:
    return "User" if role is Role.USER else "Assistant"


def tidy_summary(text: str, cut_at_length: bool) -> str:
    """The model's summary, stripped; an answer cut at max_tokens loses its unfinished line."""
    text = text.strip()
    if cut_at_length and "\n" in text:
        text = text.rsplit("\n", 1)[0].rstrip()
    return text
