"""The two safety checkpoints outside the model: one on the user's message
before anything is queued, one on the answer as it streams, holding text back until it is
checked (or, in retract mode, showing it at once and withdrawing it when a check flags it)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from domain.safety.rules import ALLOWED, SafetyClassifier, Verdict
from domain.safety.text import TOKEN


@dataclass(frozen=True, slots=True)
class Refusals:
    """What the user is shown instead of an answer. Generic on purpose: naming the rule that
    fired would teach how to get around it."""

    input: str = "I can't help with that request. If you think this is a mistake, let us know."
    output: str = "I can't continue this answer. If you think this is a mistake, let us know."


@dataclass(frozen=True, slots=True)
class InputDecision:
    verdict: Verdict
    # The answer to show when refused (a normal `done` with finish `refused`); "" when allowed.
    refusal_text: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict.allowed


class InputGuard:
    """Checks a user's message once, before it is queued, so a refused one costs no GPU time."""

    def __init__(self, classifier: SafetyClassifier, refusals: Refusals = Refusals()) -> None:
        self._classifier = classifier
        self._refusals = refusals

    def check(self, message: str) -> InputDecision:
        verdict = self._classifier.classify(message)
        if verdict.allowed:
            return InputDecision(verdict)
        return InputDecision(verdict, self._refusals.input)


@dataclass(frozen=True, slots=True)
class StreamCheckConfig:
    """Sizes of the streaming output check, in estimated tokens (text.TOKEN, not the model's).

    Each check reads the newest `window_tokens` plus `lookback_tokens` before them, so a phrase
    cut by a window edge is read whole by the next check. Text reaches the user only once a
    clean check has read it with at least `holdback_tokens` after it: a flagged span of up to
    `holdback_tokens` tokens is then never shown, not even its first words. A check runs every
    `check_every_tokens` new tokens: 50 keeps the added delay near sizing 002's 50 tokens (about
    1.2 s at 40 tokens/s); 200 would check back-to-back windows, with fewer classifier calls
    but ~250 tokens before the first text shows."""

    window_tokens: int = 200
    lookback_tokens: int = 50
    holdback_tokens: int = 50
    check_every_tokens: int = 50

    def __post_init__(self) -> None:
        if min(self.window_tokens, self.check_every_tokens) < 1:
            raise ValueError("window_tokens and check_every_tokens must be at least 1")
        if min(self.lookback_tokens, self.holdback_tokens) < 0:
            raise ValueError("lookback_tokens and holdback_tokens cannot be negative")
        if self.check_every_tokens > self.max_advance:
            raise ValueError(
                "check_every_tokens + holdback_tokens must not exceed window_tokens + "
                "lookback_tokens, or some text would be released before a check read it "
                "with holdback_tokens after it"
            )

    @property
    def max_advance(self) -> int:
        """The most tokens one check may move the checked edge: any further and the text just
        released would not have been read with its hold-back in the same check."""
        return self.window_tokens + self.lookback_tokens - self.holdback_tokens


class OutputMode(StrEnum):
    """How the output check meets the user's first words (docs/decisions.md, "Retract mode").

    HOLDBACK: text shows only once a clean check read it with `holdback_tokens` after it, so a
    flagged span is never shown; the first words wait for that many tokens. RETRACT: text shows
    as it comes, the same checks run, and a flag withdraws everything shown of the answer: the
    first words are not delayed, but flagged text may be on screen until the next check."""

    HOLDBACK = "holdback"
    RETRACT = "retract"


class OutputGuard:
    """Checks one answer as it streams. Feed it the engine's chunks; send the user only what it
    returns. Once it finds a violation it releases nothing more: stop the answer and show
    `refusal_text`. `finish()` reads the whole answer once more, for harm no window sees alone.

    In RETRACT mode every chunk is returned at once (after the checks it completes, so a chunk
    that completes a flagged window is not shown); once `violated`, the caller withdraws what it
    showed of this answer before showing `refusal_text`.

    Cost: a chunk appends to a short buffer and re-reads only the newest, possibly unfinished
    token; a check reads at most window + lookback tokens, once every `check_every_tokens`."""

    def __init__(
        self,
        classifier: SafetyClassifier,
        config: StreamCheckConfig = StreamCheckConfig(),
        refusals: Refusals = Refusals(),
        mode: OutputMode = OutputMode.HOLDBACK,
    ) -> None:
        self._classifier = classifier
        self._config = config
        self._mode = mode
        # Nothing waits behind a check in retract mode, so a check may read further ahead.
        holdback = config.holdback_tokens if mode is OutputMode.HOLDBACK else 0
        self._max_advance = config.window_tokens + config.lookback_tokens - holdback
        self._refusal_text = refusals.output
        self._pieces: list[str] = []  # the whole answer, for the final pass
        # The answer from char offset `_base` on: older text no check or release needs again.
        self._live = ""
        self._base = 0
        self._token_starts: list[int] = []  # char offset of every estimated token
        self._rescan_from = 0  # where the newest token starts, while it may still grow
        self._checked = 0  # tokens [0, _checked) were read by clean checks
        self._released_to = 0  # char offset: everything before it went to the user
        self._verdict = ALLOWED
        self._finished = False

    @property
    def violated(self) -> bool:
        return not self._verdict.allowed

    @property
    def verdict(self) -> Verdict:
        return self._verdict

    @property
    def refusal_text(self) -> str:
        return self._refusal_text

    @property
    def mode(self) -> OutputMode:
        return self._mode

    @property
    def holds_back(self) -> bool:
        """Whether text waits behind the newest tokens before it shows (hold-back mode with a
        hold-back): then what the user sees moves only in the checks' steps."""
        return self._mode is OutputMode.HOLDBACK and self._config.holdback_tokens > 0

    def feed(self, chunk: str) -> str:
        """Takes the next chunk of the answer; returns the text that may be shown now (often "")."""
        if self._finished:
            raise RuntimeError("the answer was already finished")
        if self.violated:
            return ""
        self._pieces.append(chunk)
        self._live += chunk
        self._count_new_tokens()
        released: list[str] = []
        while self._complete_tokens() - self._checked >= self._config.check_every_tokens:
            if not self._check_next_window():
                break
            if self._mode is OutputMode.HOLDBACK:
                released.append(self._release(self._checked - self._config.holdback_tokens))
        if self._mode is OutputMode.RETRACT and not self.violated:
            return self._release_rest()
        return "".join(released)

    def finish(self) -> str:
        """The final pass over the whole answer; returns the rest of it if clean, else ""."""
        if self._finished:
            raise RuntimeError("the answer was already finished")
        self._finished = True
        if self.violated:
            return ""
        verdict = self._classifier.classify("".join(self._pieces))
        if not verdict.allowed:
            self._verdict = verdict
            return ""
        return self._release_rest()

    def _count_new_tokens(self) -> None:
        # Only the newest token can grow ("forb" + "idden"), so reading resumes at its start.
        if self._token_starts and self._token_starts[-1] == self._rescan_from:
            self._token_starts.pop()
        end = len(self._live)
        last_end = last_start = -1
        for match in TOKEN.finditer(self._live, self._rescan_from - self._base):
            self._token_starts.append(self._base + match.start())
            last_start, last_end = match.start(), match.end()
        self._rescan_from = self._base + (last_start if last_end == end else end)

    def _complete_tokens(self) -> int:
        # The newest token may still grow, so a window ends where it starts.
        return max(0, len(self._token_starts) - 1)

    def _check_next_window(self) -> bool:
        config = self._config
        end = min(self._complete_tokens(), self._checked + self._max_advance)
        start = max(0, end - config.window_tokens - config.lookback_tokens)
        window = self._text(self._token_starts[start], self._token_starts[end])
        verdict = self._classifier.classify(window)
        if not verdict.allowed:
            self._verdict = verdict
            return False
        self._checked = end
        # The next check ends at least check_every_tokens further on, so starts no earlier.
        next_start = end + config.check_every_tokens - config.window_tokens - config.lookback_tokens
        self._forget_before(next_start)
        return True

    def _release(self, tokens: int) -> str:
        if tokens <= 0:
            return ""
        end = self._token_starts[tokens]
        if end <= self._released_to:
            return ""
        # Up to the last released token's end: the space before the next token goes with it.
        # What was shown is what a takeover continues from, and an engine's next token carries
        # its own leading space: a shown text ending in one would get it twice.
        text = self._text(self._released_to, end).rstrip()
        self._released_to += len(text)
        return text

    def _release_rest(self) -> str:
        rest = self._live[self._released_to - self._base :]
        self._released_to = self._base + len(self._live)
        return rest

    def _forget_before(self, token: int) -> None:
        """Drops buffered text that no later check (which starts at this token or after) and no
        release needs, so a chunk's cost does not grow with the answer."""
        keep_from = min(self._token_starts[max(0, token)], self._released_to)
        if keep_from > self._base:
            self._live = self._live[keep_from - self._base :]
            self._base = keep_from

    def _text(self, start: int, end: int) -> str:
        return self._live[start - self._base : end - self._base]
