"""Trains the router's difficulty classifier and makes the template part of its labelled set.

    python scripts/train_router.py train [--data PATH] [--out PATH]
    python scripts/train_router.py make-data [--data PATH]

`train` fits a logistic regression on the training three quarters of data/router/messages.jsonl,
chooses the threshold on the held-out quarter so that at most 5 % of the hard held-out messages
score below it, and writes weights, threshold and held-out metrics to
domain/data/difficulty_model.json. Everything is deterministic: the same data gives the same
file, byte for byte.

`make-data` rewrites the template rows of the data file from a fixed seed and keeps every
other row (the handwritten ones) as it is; see data/router/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from domain.difficulty import (  # noqa: E402  (the script runs from a checkout, not an install)
    DENSE_FEATURES,
    FORMAT_VERSION,
    DifficultyModel,
    choose_threshold,
    features,
    routed_small_share,
    split_heldout,
    word_count,
)

DATA = ROOT / "data" / "router" / "messages.jsonl"
MODEL = ROOT / "domain" / "data" / "difficulty_model.json"
SEED = 20240501
BUCKETS = 1 << 14
# The bar: at most this share of hard messages may be sent to the small model (docs/decisions.md,
# "The router").
MAX_HARD_SMALL_SHARE = 0.05
L2 = 1e-3
STEPS = 3000
LEARNING_RATE = 2.0
MOMENTUM = 0.9
# Weights are rounded when written, so a last-bit difference in float arithmetic between
# machines does not change the file.
DIGITS = 6


@dataclass(frozen=True, slots=True)
class Message:
    text: str
    label: str
    source: str


def read_messages(path: Path) -> list[Message]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [Message(row["text"], row["label"], row["source"]) for row in rows]


# Training ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Design:
    """The feature matrix in a compact sparse form: numpy alone, no scipy."""

    rows: np.ndarray  # the message each nonzero belongs to
    columns: np.ndarray  # its hashed bucket
    values: np.ndarray
    dense: np.ndarray  # messages x DENSE_FEATURES


def design(texts: list[str]) -> Design:
    rows: list[int] = []
    columns: list[int] = []
    values: list[float] = []
    dense: list[tuple[float, ...]] = []
    for row, text in enumerate(texts):
        found = features(text, BUCKETS)
        for group in (found.word_buckets, found.char_buckets):
            # The same 1/sqrt(count) scale the model applies when it scores.
            scale = 1.0 / np.sqrt(len(group)) if group else 0.0
            rows += [row] * len(group)
            columns += group
            values += [scale] * len(group)
        dense.append(found.dense)
    return Design(
        np.array(rows, dtype=np.int64),
        np.array(columns, dtype=np.int64),
        np.array(values, dtype=np.float64),
        np.array(dense, dtype=np.float64).reshape(len(texts), len(DENSE_FEATURES)),
    )


def _logits(x: Design, params: np.ndarray) -> np.ndarray:
    hashed, dense, bias = params[:BUCKETS], params[BUCKETS:-1], params[-1]
    sparse = np.bincount(x.rows, weights=x.values * hashed[x.columns], minlength=len(x.dense))
    return sparse + x.dense @ dense + bias


def _gradient(x: Design, y: np.ndarray, params: np.ndarray) -> np.ndarray:
    error = (1.0 / (1.0 + np.exp(-_logits(x, params))) - y) / len(y)
    hashed = np.bincount(x.columns, weights=x.values * error[x.rows], minlength=BUCKETS)
    grad = np.concatenate([hashed, x.dense.T @ error, [error.sum()]])
    grad[:-1] += L2 * params[:-1]  # the bias is not pulled towards zero
    return grad


def fit(x: Design, y: np.ndarray) -> np.ndarray:
    """L2-regularised logistic regression by full-batch gradient descent with momentum.

    The loss is convex and every step sees the whole set in a fixed order, so the result
    depends on the data alone; zero start, no random initialisation.
    """
    params = np.zeros(BUCKETS + len(DENSE_FEATURES) + 1)
    velocity = np.zeros_like(params)
    for _ in range(STEPS):
        # Nesterov: the gradient is taken where the momentum is about to carry the weights.
        velocity = MOMENTUM * velocity - LEARNING_RATE * _gradient(
            x, y, params + MOMENTUM * velocity
        )
        params = params + velocity
    return params


def _model_dict(params: np.ndarray, threshold: float) -> dict[str, object]:
    hashed = params[:BUCKETS]
    return {
        "format": FORMAT_VERSION,
        "buckets": BUCKETS,
        "bias": round(float(params[-1]), DIGITS),
        "dense": {
            name: round(float(w), DIGITS)
            for name, w in zip(DENSE_FEATURES, params[BUCKETS:-1], strict=True)
        },
        "hashed": [
            [int(i), round(float(hashed[i]), DIGITS)]
            for i in np.flatnonzero(np.round(hashed, DIGITS))
        ],
        "threshold": threshold,
    }


def _metrics(easy: list[float], hard: list[float], threshold: float) -> dict[str, float]:
    hard_small = routed_small_share(hard, threshold)
    easy_small = routed_small_share(easy, threshold)
    correct = easy_small * len(easy) + (1.0 - hard_small) * len(hard)
    return {
        "hard_sent_small_share": round(hard_small, 4),
        "easy_sent_small_share": round(easy_small, 4),
        "accuracy": round(correct / (len(easy) + len(hard)), 4),
        "easy": len(easy),
        "hard": len(hard),
    }


def _heldout_report(
    messages: list[Message], heldout: list[int], scores: list[float]
) -> tuple[float, dict[str, object]]:
    easy = [s for i, s in zip(heldout, scores, strict=True) if messages[i].label == "easy"]
    hard = [s for i, s in zip(heldout, scores, strict=True) if messages[i].label == "hard"]
    # Rounded down before use: the file then holds exactly the threshold the metrics describe,
    # and rounding up could lift the line past a hard score and break the allowance.
    threshold = math.floor(choose_threshold(hard, MAX_HARD_SMALL_SHARE) * 10**DIGITS) / 10**DIGITS
    # The crude yardstick the model must beat: route by length alone, same 5 % allowance.
    length = {i: float(word_count(messages[i].text)) for i in heldout}
    easy_len = [length[i] for i in heldout if messages[i].label == "easy"]
    hard_len = [length[i] for i in heldout if messages[i].label == "hard"]
    length_threshold = choose_threshold(hard_len, MAX_HARD_SMALL_SHARE)
    by_source = {
        source: _metrics(
            [
                s
                for i, s in zip(heldout, scores, strict=True)
                if (messages[i].source, messages[i].label) == (source, "easy")
            ],
            [
                s
                for i, s in zip(heldout, scores, strict=True)
                if (messages[i].source, messages[i].label) == (source, "hard")
            ],
            threshold,
        )
        for source in sorted({messages[i].source for i in heldout})
    }
    return threshold, {
        "max_hard_small_share": MAX_HARD_SMALL_SHARE,
        "model": _metrics(easy, hard, threshold),
        # Template rows are easier to tell apart than handwritten ones: the handwritten figures
        # are the better guess of how the model does on real traffic.
        "model_by_source": by_source,
        "length_baseline": {
            "max_words_small": length_threshold - 1,
            **_metrics(easy_len, hard_len, length_threshold),
        },
    }


def train(data: Path, out: Path) -> dict[str, object]:
    messages = read_messages(data)
    texts = [m.text for m in messages]
    train_rows, heldout = split_heldout(texts, [m.label for m in messages])
    y = np.array([messages[i].label == "hard" for i in train_rows], dtype=np.float64)
    params = fit(design([texts[i] for i in train_rows]), y)
    unthresholded = DifficultyModel.from_dict(_model_dict(params, threshold=0.5))
    # Scored with the rounded weights the gateway will load, not the raw ones.
    scores = [unthresholded.score(texts[i]) for i in heldout]
    threshold, report = _heldout_report(messages, heldout, scores)
    document = {
        **_model_dict(params, threshold),
        "heldout": report,
        "training": {
            "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
            "messages": len(messages),
            "train": len(train_rows),
            "heldout": len(heldout),
            "l2": L2,
            "steps": STEPS,
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    # Compact: 8,000 weight pairs one per line would double the file for no reader's benefit.
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    out.write_text(text + "\n", encoding="utf-8")
    return report


# Template data ----------------------------------------------------------------------------------
# Slots are filled at random from a fixed seed. Easy and hard templates share vocabulary
# (numbers, "write", "explain", code words) on purpose so length or one keyword cannot
# separate them; the handwritten rows add the borderline cases templates cannot make.

# fmt: off
COUNTRIES = ["France", "Kenya", "Peru", "Vietnam", "Norway", "Canada", "Egypt", "Chile", "Japan",
             "Portugal", "Ghana", "Mongolia", "New Zealand", "Austria", "Morocco", "Thailand"]
LANGS = ["French", "Spanish", "German", "Italian", "Japanese", "Portuguese", "Dutch", "Korean",
         "Turkish", "Polish", "Swahili", "Hindi"]
PHRASES = ["good morning", "see you tomorrow", "how much does this cost", "I'm lost",
           "happy birthday", "where is the bathroom", "nice to meet you", "the bill, please",
           "I don't understand", "congratulations", "have a nice weekend", "I'm allergic to nuts"]
WORDS = ["ubiquitous", "pragmatic", "melancholy", "resilient", "ambiguous", "candid", "frugal",
         "nostalgia", "quarantine", "benevolent", "paradigm", "tenacious", "eloquent", "verbose",
         "latency", "algorithm", "mortgage", "inflation", "entropy", "irony"]
UNITS = [("miles", "kilometers"), ("pounds", "kilograms"), ("inches", "centimeters"),
         ("cups", "milliliters"), ("feet", "meters"), ("ounces", "grams"),
         ("gallons", "liters"), ("celsius", "fahrenheit"), ("kilometers per hour", "mph"),
         ("acres", "hectares")]
GREETINGS = ["hi", "hello", "hey", "good morning", "hey there", "hiya", "yo", "good afternoon",
             "howdy", "morning"]
GREETING_ENDS = ["", "!", "!!", " :)", ", how are you?", " there"]
TONES = ["more formal", "friendlier", "more polite", "less harsh", "more professional",
         "more casual", "shorter", "warmer"]
SENTENCES = ["we can't make it to the meeting", "the package will be late", "send me the file",
             "your invoice is overdue", "i need the day off on friday", "the price went up",
             "thanks for the quick reply", "the event is cancelled", "please stop emailing me",
             "we picked another candidate"]
THINGS = ["movie", "book", "board game", "podcast", "song", "hobby", "dessert", "video game",
          "houseplant", "hiking trail"]
TOPICS = ["cats", "the ocean", "autumn", "coffee", "mondays", "pizza", "the moon", "trains",
          "friendship", "rain"]
FACTS = ["who invented the telephone", "what is the largest desert",
         "how many bones are in the human body", "what's the longest river in africa",
         "who was the first person on the moon", "what is the hardest natural substance",
         "how many players are on a soccer team", "what planet is closest to the sun",
         "what's the smallest country", "who wrote hamlet", "what gas do plants breathe in",
         "how many strings does a violin have"]
CHAT_ENDS = ["just saying hi", "just wanted to chat a bit", "how are you doing?",
             "what are you up to today?"]
SIMPLE_HOWTOS = ["make a list in python", "undo the last git commit", "check my python version",
                 "rename a file in linux", "open a new tab in chrome", "make a folder on mac"]
PLANGS = ["Python", "JavaScript", "Go", "Rust", "Java", "C#", "TypeScript", "C++", "Kotlin"]
CODE_TASKS = ["parses ISO 8601 timestamps with time zones and rejects invalid dates",
              "finds the longest palindromic substring in linear time",
              "deduplicates a stream of events by id within a sliding 10 minute window",
              "retries an HTTP call with exponential backoff, jitter and a total deadline",
              "serializes a binary tree to a string and back",
              "computes the shortest path in a weighted grid with obstacles",
              "merges k sorted iterators lazily",
              "validates a sudoku board and solves it with backtracking",
              "implements a thread-safe bounded queue with blocking put and get",
              "evaluates arithmetic expressions with parentheses and operator precedence",
              "diffs two text files line by line like the unix diff tool",
              "rate-limits requests per user with a sliding window log"]
CONSTRAINTS = ["no external libraries", "full type hints", "O(n) memory", "unit tests",
               "clear error handling", "docstrings", "constant extra space",
               "support for very large inputs"]
BUG_SNIPPETS = [
    ("Python", "it prints the same value three times",
     "funcs = []\nfor i in range(3):\n    funcs.append(lambda: i)\n"
     "for f in funcs:\n    print(f())"),
    ("Python", "the default list keeps growing between calls",
     "def add(item, bucket=[]):\n    bucket.append(item)\n    return bucket"),
    ("JavaScript", "it logs 5 five times",
     "for (var i = 0; i < 5; i++) {\n  setTimeout(() => console.log(i), 100);\n}"),
    ("JavaScript", "the total is NaN",
     "let total;\nitems.forEach(x => { total += x.price; });\nconsole.log(total);"),
    ("Go", "the goroutines all print the last item",
     "for _, v := range items {\n    go func() {\n        fmt.Println(v)\n    }()\n}"),
    ("Java", "the comparison is false for equal strings",
     'String a = new String("hi");\nString b = "hi";\n'
     'if (a == b) { System.out.println("same"); }'),
    ("C", "it reads garbage after the loop",
     "int arr[5];\nfor (int i = 0; i <= 5; i++) {\n    arr[i] = i * 2;\n}"),
    ("Rust", "the borrow checker rejects it",
     "let mut v = vec![1, 2, 3];\nlet first = &v[0];\nv.push(4);\nprintln!(\"{}\", first);"),
    ("SQL", "it returns duplicate rows",
     "SELECT c.name, o.total\nFROM customers c\nJOIN orders o ON o.customer_id = c.id\n"
     "JOIN payments p ON p.customer_id = c.id;"),
    ("Python", "the threads never speed it up",
     "from threading import Thread\ndef work(n):\n    return sum(i * i for i in range(n))\n"
     "ts = [Thread(target=work, args=(10**7,)) for _ in range(4)]"),
]
STATEMENTS = ["the product of two odd numbers is odd",
              "there are infinitely many primes of the form 4k+3",
              "every finite integral domain is a field", "sqrt(3) is irrational",
              "n^3 - n is divisible by 6 for every integer n",
              "the set of real numbers is uncountable",
              "a continuous function on [a, b] attains its maximum",
              "the sum of the angles of a triangle is 180 degrees in euclidean geometry",
              "2^n > n^2 for all n >= 5", "every planar graph is 5-colorable",
              "the composition of two injective functions is injective",
              "there is no rational number whose square is 2"]
METHODS = ["induction", "contradiction", "a direct argument", "the pigeonhole principle",
           "a counting argument"]
DERIVATIONS = ["quadratic formula", "variance of a binomial distribution",
               "formula for compound interest", "kinetic energy formula from work",
               "normal equations for least squares"]
SYSTEMS = ["a chat app", "a ride-sharing dispatch service", "a news feed", "a payments ledger",
           "a video upload pipeline", "a multiplayer game lobby", "an inventory system",
           "a metrics store", "a notification service", "a search autocomplete service"]
SCALES = ["10 million daily users", "50k requests per second", "a billion rows a day",
          "users on three continents", "a team of 4 engineers and a tight budget"]
DESIGN_TOPICS = ["consistency", "caching", "failure handling", "sharding"]
DESIGN_EXTRAS = ["cost", "monitoring", "rollout", "security"]
CITIES = ["Lisbon", "Tokyo", "Mexico City", "Rome", "Istanbul", "Vancouver", "Marrakech",
          "Seoul", "Buenos Aires", "Prague"]
GROUPS = ["a family with two toddlers", "four friends on a student budget",
          "my parents in their seventies", "a couple with a dog",
          "a vegan and a celiac traveller"]
TRIP_CONSTRAINTS = ["no flights over 3 hours", "one museum a day at most", "trains only",
                    "a rest day in the middle", "everything wheelchair accessible",
                    "kid-friendly restaurants", "under $120 a night for hotels",
                    "at least one day trip outside the city"]
ANALYSES = [("remote work", "office work", "productivity, hiring and culture"),
            ("nuclear power", "solar plus storage", "cost, reliability and land use"),
            ("a monolith", "microservices", "a team of 12 and a two-year-old product"),
            ("renting", "buying a home", "a 7 year horizon and 6% mortgage rates"),
            ("index funds", "picking individual stocks", "fees, risk and taxes"),
            ("SQL", "a document database", "reporting, schema changes and consistency"),
            ("universal basic income", "targeted welfare", "incentives, cost and fairness")]
WORD_PROBLEMS = [
    "Two trains leave cities {gap} km apart at {a} km/h and {b} km/h, the second one leaving "
    "45 minutes later. Where and when do they meet? Show your reasoning.",
    "A tank fills in {small_a} hours with pipe A and {small_b} hours with pipe B, and drains in "
    "{small_c} hours. With all three open from empty, when is it full?",
    "I invest ${money} at {rate}% compounded monthly and add ${b} each month. How long until it "
    "doubles, and how does that change if fees take 1% a year?",
]
LEGAL_MEDICAL = [
    "My {relation} takes {drug_a} and was just prescribed {drug_b}. Are there interactions we "
    "should know about, and what symptoms would mean calling the doctor right away?",
    "In {place}, can my landlord {action}? The lease says nothing about it and I've lived here "
    "{years} years. What are my rights and what should I do first?",
    "My employer in {place} wants me to sign a non-compete covering {years} years after I leave. "
    "Is that enforceable, and what should I negotiate?",
    "I've had {symptom} for {years} weeks along with {symptom2}. What conditions could cause "
    "both, and which ones are urgent?",
]
RELATIONS = ["dad", "mom", "grandmother", "husband", "wife", "uncle", "partner"]
DRUGS = ["metformin", "lisinopril", "sertraline", "atorvastatin", "warfarin", "levothyroxine",
         "omeprazole", "amlodipine", "prednisone", "clarithromycin", "tramadol", "fluconazole"]
PLACES = ["Ontario", "Texas", "England", "Bavaria", "New South Wales", "Illinois", "Quebec",
          "Scotland"]
LANDLORD_ACTIONS = ["raise the rent by 25% mid-lease", "enter my flat without notice",
                    "keep my deposit for normal wear and tear", "evict me to renovate",
                    "ban guests from staying over"]
SYMPTOMS = ["headaches every morning", "numbness in my left hand", "a persistent dry cough",
            "night sweats", "chest tightness when climbing stairs", "blurred vision",
            "joint pain and swelling"]
DOC_SENTENCES = [
    "Revenue grew 12% year over year, driven mostly by the enterprise segment.",
    "Churn in the self-serve tier rose from 3.1% to 4.6% per month after the price change.",
    "The supplier may terminate this agreement with 30 days notice for any reason.",
    "Support tickets about billing doubled in the second half of the quarter.",
    "All intellectual property created under this agreement vests in the Client upon payment.",
    "The pilot reduced average handling time by 18%, but satisfaction scores dipped slightly.",
    "Liability is capped at the fees paid in the three months preceding the claim.",
    "Hiring fell behind plan by six engineers, delaying the mobile release to Q4.",
    "Our largest customer accounts for 31% of revenue and renews in March.",
    "Either party may assign this agreement to an affiliate without consent.",
    "Gross margin improved to 71% as hosting costs were renegotiated.",
    "The confidentiality obligations survive for two years after termination.",
]
DOC_TASKS = [
    "Summarize the main risks in this and recommend what to do about each",
    "Analyze this report: what is going well, what is going badly, what should the board ask",
    "Review these clauses, tell me which are unfavourable to us and how to renegotiate them",
    "Read this and write a one-page memo with the three decisions leadership must make",
]
CHATTY = ["hope you're having a great day", "it's been a long week honestly",
          "I just made the best pancakes of my life", "my cat just knocked over a plant again",
          "the weather here is finally nice", "I'm sitting in a cafe killing time",
          "I finally finished that book I was reading", "we just got back from the beach"]
# fmt: on


def _easy(rng: random.Random) -> str:
    pick = rng.choice
    kind = rng.randrange(12)
    if kind == 0:
        return f"{pick(GREETINGS)}{pick(GREETING_ENDS)}"
    if kind == 1:
        country = pick(COUNTRIES)
        return pick(
            [
                f"what's the capital of {country}?",
                f"what language do they speak in {country}",
                f"what currency does {country} use",
                f"{pick(FACTS)}?",
            ]
        )
    if kind == 2:
        a, b = pick(UNITS)
        n = pick([1, 2, 5, 10, 12, 20, 37, 100, 250, 3.5])
        return pick(
            [
                f"convert {n} {a} to {b}",
                f"how many {b} is {n} {a}?",
                f"{n} {a} in {b}",
                f"what's {n} {a} in {b} roughly",
            ]
        )
    if kind == 3:
        phrase, lang = pick(PHRASES), pick(LANGS)
        return pick(
            [
                f"how do you say '{phrase}' in {lang}?",
                f"translate '{phrase}' to {lang}",
                f"{phrase} in {lang.lower()}",
                f'what\'s the {lang} for "{phrase}"',
            ]
        )
    if kind == 4:
        word = pick(WORDS)
        return pick(
            [
                f"what does {word} mean?",
                f"define {word}",
                f"synonym for {word}",
                f"use {word} in a sentence",
                f"what's the opposite of {word}",
                f"explain what {word} means in simple words",
            ]
        )
    if kind == 5:
        sentence, tone = pick(SENTENCES), pick(TONES)
        return pick(
            [
                f"make this {tone}: {sentence}",
                f"rephrase '{sentence}' to sound {tone}",
                f"fix the grammar and spelling: {sentence}",
                f"write a short text message saying {sentence}",
            ]
        )
    if kind == 6:
        thing, topic = pick(THINGS), pick(TOPICS)
        return pick(
            [
                f"recommend a {thing}",
                f"tell me a joke about {topic}",
                f"write a haiku about {topic}",
                f"what's your favorite {thing}?",
                f"give me a fun fact about {topic}",
            ]
        )
    if kind == 7:
        a, b = rng.randrange(2, 999), rng.randrange(2, 99)
        return pick(
            [
                f"what is {a} + {b}",
                f"what's {b}% of {a}?",
                f"{a} divided by {b}",
                f"what is {a} times {b}?",
                f"round {a}.{b} to the nearest ten",
            ]
        )
    if kind == 8:
        # Long but easy: chatty, with nothing to work out.
        return (
            f"{pick(GREETINGS)}! {pick(CHATTY)}. {pick(CHATTY)}, and {pick(CHATTY)}. "
            f"anyway no big question, {pick(CHAT_ENDS)}"
        )
    if kind == 9:
        lang = pick(PLANGS)
        return pick(
            [
                f"how do I print hello world in {lang}",
                f"how do I comment out a line in {lang}",
                f"how do I {pick(SIMPLE_HOWTOS)}",
            ]
        )
    if kind == 10:
        return f"what time is it in {pick(CITIES)} when it's noon in {pick(CITIES)}?"
    first, second = pick(SENTENCES).capitalize(), pick(SENTENCES).capitalize()
    return f"translate this into {pick(LANGS)}: '{first}. {second}. Thanks!'"


def _hard(rng: random.Random) -> str:
    pick = rng.choice
    kind = rng.randrange(11)
    if kind == 0:
        a, b = rng.sample(CONSTRAINTS, 2)
        lang, task = pick(PLANGS), pick(CODE_TASKS)
        return pick(
            [
                f"write a {lang} function that {task}, with {a} and {b}",
                f"implement something in {lang} that {task}. I need {a}.",
                f"how would I write code that {task}? {lang} please",
            ]
        )
    if kind == 1:
        lang, symptom, code = pick(BUG_SNIPPETS)
        fence = f"```{lang.lower()}\n{code}\n```"
        return pick(
            [
                f"why does this {lang} code do this: {symptom}?\n{fence}",
                f"{symptom} and I don't get why\n{fence}\nhow do I fix it properly?",
                f"debug this please ({symptom}):\n\n{code}",
            ]
        )
    if kind == 2:
        statement = pick(STATEMENTS)
        return pick(
            [
                f"prove that {statement}",
                f"show that {statement} using {pick(METHODS)}",
                f"can you give a rigorous proof that {statement}?",
            ]
        )
    if kind == 3:
        a, b, gap = rng.randrange(40, 90), rng.randrange(50, 120), rng.randrange(100, 600)
        return pick(WORD_PROBLEMS).format(
            a=a,
            b=b,
            gap=gap,
            small_a=a % 9 + 3,
            small_b=b % 7 + 4,
            small_c=gap % 11 + 6,
            money=gap * 10,
            rate=a % 7 + 2,
        )
    if kind == 4:
        return (
            f"design {pick(SYSTEMS)} for {pick(SCALES)}. cover the data model, "
            f"{pick(DESIGN_TOPICS)} and {pick(DESIGN_EXTRAS)}"
        )
    if kind == 5:
        a, b, criteria = pick(ANALYSES)
        return pick(
            [
                f"compare {a} and {b}, considering {criteria}. which would you pick and why?",
                f"what are the real tradeoffs between {a} and {b} for {criteria}?",
                f"{a} vs {b}: give me a thorough analysis of {criteria}",
            ]
        )
    if kind == 6:
        drug_a, drug_b = rng.sample(DRUGS, 2)
        symptom, symptom2 = rng.sample(SYMPTOMS, 2)
        return pick(LEGAL_MEDICAL).format(
            relation=pick(RELATIONS),
            drug_a=drug_a,
            drug_b=drug_b,
            place=pick(PLACES),
            action=pick(LANDLORD_ACTIONS),
            years=rng.randrange(2, 6),
            symptom=symptom,
            symptom2=symptom2,
        )
    if kind == 7:
        a, b, c = rng.sample(TRIP_CONSTRAINTS, 3)
        days, budget = rng.randrange(3, 15), rng.randrange(8, 60) * 100
        return (
            f"plan a {days}-day trip to {pick(CITIES)} for {pick(GROUPS)}, budget ${budget}, "
            f"with {a}, {b} and {c}. day by day please"
        )
    if kind == 8:
        # A pasted document to analyse.
        document = " ".join(rng.sample(DOC_SENTENCES, rng.randrange(4, 9)))
        return f"{pick(DOC_TASKS)}:\n\n{document}"
    if kind == 9:
        # Short and hard: a few words that still need the large model.
        return pick(
            [
                f"derive the {pick(DERIVATIONS)}",
                f"is {rng.randrange(1000, 9999) * 2 + 1} prime? show how you check",
                f"why is it true that {pick(STATEMENTS)}?",
                f"{pick(PLANGS)} vs {pick(PLANGS)} for a low-latency trading system?",
            ]
        )
    # Chatty opening, hard request.
    return (
        f"{pick(GREETINGS)}! {pick(CHATTY)}. quick one though: I need to "
        f"{pick(['write', 'implement'])} something in {pick(PLANGS)} that {pick(CODE_TASKS)}, "
        f"and it has to have {pick(CONSTRAINTS)}. how would you structure it?"
    )


def make_data(data: Path, per_label: int = 200) -> tuple[int, int]:
    """Rewrites the template rows from the fixed seed; every other row stays as it is."""
    kept = [m for m in read_messages(data) if m.source != "template"] if data.exists() else []
    seen = {m.text for m in kept}
    rng = random.Random(SEED)
    made: list[Message] = []
    for label, make in (("easy", _easy), ("hard", _hard)):
        count = 0
        while count < per_label:
            text = make(rng)
            if text not in seen:  # a duplicate could land on both sides of the split
                seen.add(text)
                made.append(Message(text, label, "template"))
                count += 1
    lines = [
        json.dumps({"text": m.text, "label": m.label, "source": m.source}, ensure_ascii=False)
        for m in [*kept, *made]
    ]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(kept), len(made)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["train", "make-data"])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=MODEL)
    args = parser.parse_args()
    if args.command == "make-data":
        kept, made = make_data(args.data)
        print(f"kept {kept} handwritten rows, wrote {made} template rows to {args.data}")
        return
    print(json.dumps(train(args.data, args.out), indent=1))


if __name__ == "__main__":
    main()
