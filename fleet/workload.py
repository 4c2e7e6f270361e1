"""Who sends messages, when, and how long they are: a seeded model of chat users.

Users hold conversations of several turns and read and type between them (think time). A
conversation is Free or Plus and easy or hard, and each of its messages gets a difficulty score
as the router's classifier would give it (`Workload.score`; domain.router decides on it).
New conversations start at a rate that follows a daily curve and spikes, so that messages arrive
at `peak_messages_per_s` x curve x spikes once the fleet has warmed up: in steady state every
conversation sends all its turns, so messages/s = conversations/s x turns per conversation,
whatever the think and answer times.

Calibration (sizing 000): 100-token messages and 400-token answers on average; "about 3,000
tokens of prompt per message" is the system prompt plus the history plus the new message, so a
conversation's turn k reads about system + 500 (k - 1) + 100 tokens. With turns per conversation
geometric of mean m, a message's mean turn is m (size bias: E[n(n+1)/2] / E[n] = 1/p), so a
400-token system prompt and m = 6 give 500 x 6 = 3,000. Think time: "users read and type for
about a minute between messages". Free sends 60 % of messages; 70 % of conversations are easy
by default, and `easy_share_for` gives the share at which the router sends a wanted share of
messages small (sizing 000's 70 %: 75 % of conversations easy).

Scores: an easy conversation's messages score below the router's threshold, a hard one's at or
above it, except that its opening message is misjudged at the shipped classifier's held-out
rates (data/router/README.md: 7.2 % of easy messages score hard, 4.3 % of hard ones easy). A
misjudged easy conversation stays on the large model (the router never de-escalates); a
misjudged hard one starts small and escalates at its next message. That the classifier is
wrong about a conversation at its start or not at all is an assumption: drawn independently
for every message at 7.2 %, its errors would escalate about a third of easy conversations
over their six turns, and no share of easy conversations would give sizing 000's 70 %.

Pure: no I/O, no clock; every draw comes from the seeded generator the caller owns.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np

from domain.types import Tier


@dataclass(frozen=True, slots=True)
class TokenLengths:
    """A log-normal length in tokens with the given mean, clipped to [low, high]."""

    mean: float
    sigma: float
    low: int
    high: int

    def draw_many(self, generator: np.random.Generator, count: int) -> list[int]:
        """`count` draws at once (a region draws millions, one by one they were slow)."""
        # mu such that the (unclipped) mean is `mean`: E = exp(mu + sigma^2 / 2).
        mu = math.log(self.mean) - self.sigma * self.sigma / 2
        lengths = np.rint(generator.lognormal(mu, self.sigma, count))
        draws: list[int] = np.clip(lengths, self.low, self.high).astype(np.int64).tolist()
        return draws


class _Drawn:
    """Lengths drawn ahead in blocks and handed out one by one: numpy draws a block in about
    the time Python's `random` draws a few dozen."""

    BLOCK = 16_384

    def __init__(self, lengths: TokenLengths, generator: np.random.Generator) -> None:
        self._lengths = lengths
        self._generator = generator
        self._ahead: list[int] = []

    def next(self) -> int:
        if not self._ahead:
            self._refill(1)
        return self._ahead.pop()

    def take(self, count: int) -> list[int]:
        if len(self._ahead) < count:
            self._refill(count)
        taken = self._ahead[-count:] if count else []
        del self._ahead[len(self._ahead) - count :]
        return taken

    def _refill(self, needed: int) -> None:
        block = self._lengths.draw_many(self._generator, max(self.BLOCK, needed))
        self._ahead = block + self._ahead


@dataclass(frozen=True, slots=True)
class Spike:
    """Traffic times `factor` from `at_s` for `for_s` seconds (a launch, a news event)."""

    at_s: float
    for_s: float
    factor: float


# Relative message rate by hour of the day, peak = 1: the evening peak of the biggest time zone
# is about 3x the day's average (sizing 000), and nights are quiet.
EVENING_PEAK = (
    0.15,
    0.1,
    0.07,
    0.05,
    0.05,
    0.07,
    0.12,
    0.2,
    0.27,
    0.31,
    0.33,
    0.34,
    0.35,
    0.35,
    0.34,
    0.34,
    0.37,
    0.44,
    0.58,
    0.8,
    1.0,
    0.85,
    0.55,
    0.3,
)


@dataclass(frozen=True, slots=True)
class DailyCurve:
    hourly: tuple[float, ...] = EVENING_PEAK
    start_hour: float = 20.0  # the simulation's time 0, as an hour of the day

    def factor(self, t_s: float) -> float:
        """The rate at t relative to the day's peak, interpolated between hours."""
        hour = (self.start_hour + t_s / 3600.0) % 24.0
        low = int(hour)
        frac = hour - low
        rate = self.hourly[low] * (1 - frac) + self.hourly[(low + 1) % 24] * frac
        return rate / max(self.hourly)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    peak_messages_per_s: float = 3_500.0
    daily: DailyCurve = field(default_factory=DailyCurve)
    spikes: tuple[Spike, ...] = ()
    plus_share: float = 0.4  # Free sends 60 % of messages
    easy_share: float = 0.7  # conversations the router should keep on the small model
    # The router's threshold the scores are drawn against, and the classifier's mistakes on
    # opening messages (the module notes).
    score_threshold: float = 0.5
    easy_misjudged: float = 0.072
    hard_misjudged: float = 0.043
    turns_mean: float = 6.4
    max_turns: int = 40
    think_min_s: float = 5.0  # nobody reads an answer and types a reply in under this
    think_mean_s: float = 60.0  # the minimum plus an exponential tail
    system_prompt_tokens: int = 400
    message_tokens: TokenLengths = field(default_factory=lambda: TokenLengths(100, 0.8, 5, 3_000))
    answer_tokens: TokenLengths = field(default_factory=lambda: TokenLengths(400, 0.6, 10, 3_000))
    # A user who sees no first token for this long gives up; the app stops the answer, which
    # frees its GPU slot (sizing 000: "every user waits 10 seconds, many get an error").
    patience_s: float = 10.0
    # Seconds an answer streams at about 30 tokens/s, for sizing the starting population.
    nominal_stream_s: float = 400 / 30

    def rate(self, t_s: float) -> float:
        """Messages/s at t: the peak rate times the daily curve times any spike."""
        rate = self.peak_messages_per_s * self.daily.factor(t_s)
        for spike in self.spikes:
            if spike.at_s <= t_s < spike.at_s + spike.for_s:
                rate *= spike.factor
        return rate


@dataclass(frozen=True, slots=True)
class ConversationPlan:
    """A conversation as the user will hold it: who, how hard, and how many turns are left."""

    user_id: str
    tier: Tier
    easy: bool
    turns: int
    # (message, answer) tokens of turns already held before the simulation starts.
    earlier_turns: tuple[tuple[int, int], ...] = ()


class Workload:
    """Draws conversations, turns and think times from one seeded generator."""

    def __init__(
        self, spec: WorkloadSpec, seed: int, scale: float = 1.0, user_prefix: str = "u"
    ) -> None:
        self.spec = spec
        # Several regions draw their users apart: a prefix each keeps the users' ids (the
        # picker's and the buckets' keys) apart when a conversation moves between them.
        self.user_prefix = user_prefix
        self.scale = scale
        self._rng = random.Random(seed)
        lengths = np.random.default_rng(seed)
        self._message_tokens = _Drawn(spec.message_tokens, lengths)
        self._answer_tokens = _Drawn(spec.answer_tokens, lengths)
        self._users = 0
        # Geometric turns with the given mean; the cap is rare enough to ignore in the rate.
        self._stop_p = 1.0 / spec.turns_mean

    def rate(self, t_s: float) -> float:
        """Messages/s at t for this scale of the region."""
        return self.spec.rate(t_s) * self.scale

    def _turns(self) -> int:
        turns = 1
        while turns < self.spec.max_turns and self._rng.random() >= self._stop_p:
            turns += 1
        return turns

    def _plan(self, turns: int, done: int) -> ConversationPlan:
        rng, spec = self._rng, self.spec
        self._users += 1
        earlier = tuple(
            zip(self._message_tokens.take(done), self._answer_tokens.take(done), strict=True)
        )
        return ConversationPlan(
            f"{self.user_prefix}{self._users}",
            Tier.PLUS if rng.random() < spec.plus_share else Tier.FREE,
            rng.random() < spec.easy_share,
            turns - done,
            earlier,
        )

    def starting_population(self) -> list[tuple[float, ConversationPlan]]:
        """Conversations already under way at time 0, each with its next message's time, so
        the fleet starts near steady state instead of ramping up over ten minutes.

        Only conversations between two of their messages: one whose first message is still to
        come is a new conversation, which `new_conversations` starts. Little's law: there are
        messages/s x (1 - 1 / turns) x the gap between messages of them. One caught in a gap is
        longer than average (a conversation of n turns has n - 1 gaps to be caught in), its
        next turn is equally likely to be any of its 2..n, and the wait for it is a renewal
        process's residual time (a long gap is more likely to be caught than a short one)."""
        spec, rng = self.spec, self._rng
        fixed = spec.nominal_stream_s + spec.think_min_s  # the part of a gap that never varies
        tail = spec.think_mean_s - spec.think_min_s
        cycle = fixed + tail
        population = []
        for _ in range(round(self.rate(0.0) * cycle * (1 - 1 / spec.turns_mean))):
            turns = self._caught_turns()
            done = rng.randint(1, turns - 1)
            if rng.random() < fixed / cycle:
                wait = rng.uniform(0.0, fixed)
            else:
                wait = fixed + rng.expovariate(1.0 / tail)
            population.append((wait, self._plan(turns, done)))
        return population

    def _caught_turns(self) -> int:
        """Turns of a conversation caught between two messages: size-biased by its n - 1 gaps
        (two geometric draws make the n-biased one; keeping it with odds (n - 1) / n makes it
        (n - 1)-biased)."""
        while True:
            turns = min(self.spec.max_turns, self._turns() + self._turns() - 1)
            if turns > 1 and self._rng.random() < (turns - 1) / turns:
                return turns

    def new_conversations(
        self, start_s: float, end_s: float
    ) -> list[tuple[float, ConversationPlan]]:
        """Conversations that start in [start_s, end_s): Poisson, at the message rate divided
        by the turns per conversation, the rate taken at the interval's middle."""
        rng = self._rng
        mean = self.rate((start_s + end_s) / 2) * (end_s - start_s) / self.spec.turns_mean
        return [
            (rng.uniform(start_s, end_s), self._plan(self._turns(), 0))
            for _ in range(_poisson(rng, mean))
        ]

    def score(self, easy: bool, opening: bool) -> float:
        """A message's difficulty score, as the router's classifier would give it: below the
        threshold for an easy conversation's message, at or above it for a hard one's; an
        opening message on the other side at the classifier's rate of mistakes."""
        spec = self.spec
        threshold = spec.score_threshold
        wrong = (spec.easy_misjudged if easy else spec.hard_misjudged) if opening else 0.0
        # One draw gives the side and the place on it.
        draw = self._rng.random()
        right = draw < 1.0 - wrong
        place = draw / (1.0 - wrong) if right else (draw - (1.0 - wrong)) / wrong
        if right == easy:
            return threshold * place
        return threshold + (1.0 - threshold) * place

    def message_tokens(self) -> int:
        return self._message_tokens.next()

    def answer_tokens(self) -> int:
        return self._answer_tokens.next()

    def think_s(self) -> float:
        spec = self.spec
        return spec.think_min_s + self._rng.expovariate(
            1.0 / (spec.think_mean_s - spec.think_min_s)
        )


def easy_share_for(small_share: float, spec: WorkloadSpec) -> float:
    """The share of easy conversations at which the router sends `small_share` of messages to
    the small model: an easy conversation's messages all go small unless its opening was
    misjudged; a misjudged hard one sends its opening alone (one message in `turns_mean`)."""
    hard_small = spec.hard_misjudged / spec.turns_mean
    return (small_share - hard_small) / (1.0 - spec.easy_misjudged - hard_small)


def _poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw; past a mean of 50 its normal approximation (rounded, never negative)."""
    if mean <= 0:
        return 0
    if mean > 50:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count
