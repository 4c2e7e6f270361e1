"""The race's chat workloads: users who hold multi-turn conversations, OpenAI style (the client
keeps the history and re-sends all of it every turn), under one shared system prompt, with
think time between turns. Everything is drawn from a fixed seed, so every system in the race
is sent the same conversations, the same lengths and the same pauses.

    plain   every conversation alike: short questions, the prompt grows by one exchange a turn
    skewed  a third of the users (at least one) paste long documents (about 450 tokens, twice
            per conversation) into otherwise plain conversations: hot spots where they land
    churn   the plain shape; the race kills one replica mid-run and brings it back cold
"""

from __future__ import annotations

import random
from dataclasses import dataclass

WORKLOADS = ("plain", "skewed", "churn")

SYSTEM_PROMPT = (
    "You are Atlas, the assistant of a small travel and outdoor-gear shop. Answer clearly and "
    "briefly, in plain English, in at most three short sentences unless the user asks for more. "
    "Be friendly but not chatty. If a question is about an order, ask for the order number. If "
    "a question is about safety in the mountains, on rivers or at sea, remind the user to check "
    "the local weather and to tell someone where they are going. Never invent prices, opening "
    "hours or stock levels: say that you do not know and point to the shop's web page instead. "
    "When the user pastes notes or a document, read all of it before answering, quote at most "
    "one short line of it, and answer the question the user asked about it."
)

TOPICS = (
    "rivers", "bridges", "owls", "volcanoes", "bread", "comets", "glass", "tides", "lanterns",
    "maps", "tents", "compasses", "glaciers", "lighthouses", "kayaks", "boots", "forests",
    "islands", "canyons", "meadows", "harbours", "trails", "bicycles", "sailboats",
)  # fmt: skip
ASKS = (
    "What should I know about {t} before a weekend trip?",
    "Can you tell me one surprising fact about {t}?",
    "How would you explain {t} to a ten-year-old?",
    "What is a common mistake people make with {t}?",
    "Give me a short tip about {t} for a beginner.",
    "Why do people find {t} interesting?",
    "Compare {t} and {u} in two sentences.",
    "What should I pack if my plan involves {t} and {u}?",
)
WORDS = (
    "the", "a", "old", "green", "quiet", "river", "path", "north", "camp", "morning", "light",
    "stone", "water", "wind", "hill", "valley", "village", "market", "road", "bridge", "map",
    "rain", "sun", "evening", "walk", "boat", "shore", "field", "tree", "bird", "cold", "warm",
    "long", "short", "early", "late", "we", "they", "saw", "crossed", "found", "left", "kept",
    "near", "above", "below", "along", "through", "after", "before", "slowly", "quickly",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Conversation:
    conversation_id: str  # also the session key the clients send (X-Session-Id)
    messages: tuple[str, ...]  # the user's messages, one a turn
    think_s: tuple[float, ...]  # the pause after each answer before the next message
    heavy: bool


@dataclass(frozen=True, slots=True)
class UserScript:
    user: int
    start_s: float  # when this user's first message goes out, after the run starts
    conversations: tuple[Conversation, ...]


@dataclass(frozen=True, slots=True)
class Shape:
    users: int = 4
    conversations: int = 1  # per user per round, one after another
    turns: int = 4
    think_s: float = 0.8  # mean of an exponential pause
    stagger_s: float = 0.3  # users start this far apart
    paste_tokens: int = 450  # skewed: the size of one pasted document, about


def _sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def _paste(rng: random.Random, tokens: int) -> str:
    # About 1.3 tokens a word for these words and their punctuation.
    sentences, words = [], 0
    while words < tokens / 1.3:
        n = rng.randint(8, 16)
        sentences.append(_sentence(rng, n))
        words += n
    return " ".join(sentences)


def _question(rng: random.Random) -> str:
    """A line of the user's own context, then the question: about 25-45 tokens."""
    t, u = rng.sample(TOPICS, 2)
    return f"{_sentence(rng, rng.randint(10, 24))} {rng.choice(ASKS).format(t=t, u=u)}"


def build(kind: str, shape: Shape, seed: int, round_index: int) -> list[UserScript]:
    """The users of one round of a workload; the same arguments give the same scripts."""
    if kind not in WORKLOADS:
        raise ValueError(f"unknown workload {kind!r}; one of {', '.join(WORKLOADS)}")
    rng = random.Random(f"{seed}/{kind}/{round_index}")
    heavy_users = set(range(max(1, shape.users // 3))) if kind == "skewed" else set()
    scripts = []
    for user in range(shape.users):
        conversations = []
        for c in range(shape.conversations):
            heavy = user in heavy_users
            messages = []
            for turn in range(shape.turns):
                text = _question(rng)
                if heavy and turn in (0, 2):
                    text = f"Here are my notes:\n{_paste(rng, shape.paste_tokens)}\n\n{text}"
                messages.append(text)
            think = tuple(rng.expovariate(1 / shape.think_s) for _ in range(shape.turns))
            conversations.append(
                Conversation(f"{kind}-r{round_index}-u{user}-c{c}", tuple(messages), think, heavy)
            )
        scripts.append(UserScript(user, user * shape.stagger_s, tuple(conversations)))
    return scripts


def salted(first_message: str, salt: str) -> str:
    """Each system's run gets its own salt at the start of every conversation, so one system's
    cached prefixes on the shared engines never serve another's: only the system prompt,
    which every system sends alike, is shared."""
    return f"[{salt}] {first_message}"
