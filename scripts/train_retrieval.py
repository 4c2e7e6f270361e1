"""Trains the retrieval gate: whether a turn's message needs outside content (a page, a search,
the user's files, anything newer than the model), and makes the template part of its set.

    python scripts/train_retrieval.py train [--data PATH] [--out PATH]
    python scripts/train_retrieval.py make-data [--data PATH]

The gate is the router's kind of model (domain/difficulty.py: hashed words and character
trigrams and a few dense signals, a logistic regression), trained here on
data/retrieval/messages.jsonl (labels `retrieve` and `answer`) with the router's own training
code. `train` fits on three quarters of each label, chooses the threshold on the held-out
quarter so that at most 5 % of the messages that need retrieval score below it (a miss is a
confident, stale answer; a needless retrieval costs time and brings untrusted text in), and
writes weights, threshold and both errors on the held-out quarter to
domain/data/retrieval_model.json. Deterministic: the same data gives the same file.

`make-data` rewrites the template rows from a fixed seed and keeps the handwritten ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from train_router import Message, _model_dict, design, fit, read_messages  # noqa: E402

from domain.difficulty import (  # noqa: E402  (the script runs from a checkout)
    DifficultyModel,
    choose_threshold,
    routed_small_share,
    split_heldout,
)

DATA = ROOT / "data" / "retrieval" / "messages.jsonl"
MODEL = ROOT / "domain" / "data" / "retrieval_model.json"
SEED = 20261207
# The bar: at most this share of the messages that need retrieval go without it.
MAX_MISSED_SHARE = 0.05
DIGITS = 6
RETRIEVE, ANSWER = "retrieve", "answer"


def _errors(answer: list[float], retrieve: list[float], threshold: float) -> dict[str, float]:
    missed = routed_small_share(retrieve, threshold)
    needless = 1.0 - routed_small_share(answer, threshold)
    return {
        "missed_share": round(missed, 4),  # needed retrieval, did not get it
        "needless_share": round(needless, 4),  # retrieved for a message that did not need it
        "retrieve": len(retrieve),
        "answer": len(answer),
    }


def train(data: Path, out: Path) -> dict[str, object]:
    messages = read_messages(data)
    texts = [m.text for m in messages]
    train_rows, heldout = split_heldout(texts, [m.label for m in messages])
    y = np.array([messages[i].label == RETRIEVE for i in train_rows], dtype=np.float64)
    params = fit(design([texts[i] for i in train_rows]), y)
    unthresholded = DifficultyModel.from_dict(_model_dict(params, threshold=0.5))
    scores = {i: unthresholded.score(texts[i]) for i in heldout}

    def scored(label: str, source: str | None = None) -> list[float]:
        return [s for i, s in scores.items() if messages[i].label == label
                and source in (None, messages[i].source)]  # fmt: skip

    threshold = choose_threshold(scored(RETRIEVE), MAX_MISSED_SHARE)
    threshold = math.floor(threshold * 10**DIGITS) / 10**DIGITS
    report = {
        "max_missed_share": MAX_MISSED_SHARE,
        "model": _errors(scored(ANSWER), scored(RETRIEVE), threshold),
        # The handwritten rows are the better guess of real traffic: templates are easier.
        "model_by_source": {
            source: _errors(scored(ANSWER, source), scored(RETRIEVE, source), threshold)
            for source in sorted({messages[i].source for i in heldout})
        },
    }
    document = {
        **_model_dict(params, threshold),
        "heldout": report,
        "training": {
            "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
            "messages": len(messages),
            "train": len(train_rows),
            "heldout": len(heldout),
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n",
                   encoding="utf-8")  # fmt: skip
    return report


# Template data ----------------------------------------------------------------------------------
# The two labels share words on purpose ("what is", "the", places, "latest" in a question the
# model answers from what it knows), so one keyword does not decide.

# fmt: off
CITIES = ["Oslo", "Lima", "Nairobi", "Osaka", "Lyon", "Denver", "Porto", "Hanoi", "Cairo",
          "Quebec", "Tallinn", "Perth", "Bogota", "Seville"]
WHENS = ["today", "tomorrow", "this weekend", "right now", "tonight", "on Friday", "next week"]
ASSETS = ["bitcoin", "gold", "Apple stock", "the euro", "crude oil", "Tesla shares", "silver"]
EVENTS = ["the world cup", "the local election", "the Tour de France stage", "the Oscars",
          "the Nobel prize in chemistry", "the chess olympiad", "last night's match"]
DOCS = ["contract", "notes", "report", "slides", "invoice", "spreadsheet", "meeting transcript"]
TOPICS = ["pricing", "the deadline", "termination", "the budget", "hiring", "security",
          "the roadmap", "refunds"]
PRODUCTS = ["Python", "Node.js", "PostgreSQL", "the Linux kernel", "Kubernetes", "Firefox",
            "the iPhone", "React"]
PLACES = ["the city museum", "the public library", "the Italian place on Main Street",
          "the botanical garden", "the post office", "the aquarium", "the town pool"]
CONCEPTS = ["recursion", "photosynthesis", "inflation", "gravity", "a hash table", "DNS",
            "compound interest", "the water cycle", "supply and demand", "entropy"]
LANGS = ["French", "Spanish", "German", "Japanese", "Italian", "Dutch"]
PHRASES = ["good morning", "see you tomorrow", "where is the station", "thank you very much"]
FORMS = ["poem", "short story", "haiku", "limerick", "song verse"]
THEMES = ["the sea", "a lost cat", "autumn", "a robot learning to dance", "the moon", "coffee"]
PLANGS = ["Python", "Go", "Rust", "JavaScript", "Java"]
TASKS = ["reverses a linked list", "checks if a word is a palindrome", "merges two sorted lists",
         "counts word frequencies", "parses a CSV line"]
TONES = ["more formal", "friendlier", "shorter", "more polite"]
SENTENCES = ["we can't make it to the meeting", "send me the file", "the order is late",
             "your request was rejected"]
STABLE = ["the capital of Canada", "the largest planet", "the speed of light", "the author of "
          "Hamlet", "the chemical symbol for gold", "the tallest mountain on earth"]
# fmt: on


def _retrieve(rng: random.Random) -> str:
    pick = rng.choice
    kind = rng.randrange(10)
    if kind == 0:
        return f"what's the weather in {pick(CITIES)} {pick(WHENS)}?"
    if kind == 1:
        return f"what is the current price of {pick(ASSETS)}?"
    if kind == 2:
        return f"who won {pick(EVENTS)}?"
    if kind == 3:
        page = f"https://{pick(['example.test', 'news.example.com', 'blog.example.org'])}/" \
            f"{pick(TOPICS).replace(' ', '-')}"  # fmt: skip
        return f"{pick(['summarize', 'read', 'what does this say:', 'check'])} {page}"
    if kind == 4:
        return f"what does the {pick(DOCS)} I {pick(['uploaded', 'shared', 'sent'])} say " \
            f"about {pick(TOPICS)}?"  # fmt: skip
    if kind == 5:
        where = pick(["the web", "my files", "the docs", "our wiki"])
        return f"search {where} for {pick(TOPICS)} in {pick(PRODUCTS)}"
    if kind == 6:
        return f"what's new in the latest release of {pick(PRODUCTS)}?"
    if kind == 7:
        return f"is {pick(PLACES)} open {pick(WHENS)}?"
    if kind == 8:
        return f"what are the {pick(['opening hours', 'ticket prices', 'reviews'])} of " \
            f"{pick(PLACES)} {pick(WHENS)}?"  # fmt: skip
    return f"look up {pick(TOPICS)} for {pick(PLACES)} in {pick(CITIES)}"


def _answer(rng: random.Random) -> str:
    pick = rng.choice
    kind = rng.randrange(10)
    if kind == 0:
        return f"write a {pick(FORMS)} about {pick(THEMES)}"
    if kind == 1:
        a, b = rng.randrange(2, 999), rng.randrange(2, 99)
        return f"what is {a} {pick(['times', 'plus', 'minus'])} {b}?"
    if kind == 2:
        return f"explain {pick(CONCEPTS)} {pick(['simply', 'to a child', 'in one paragraph'])}"
    if kind == 3:
        return f"translate '{pick(PHRASES)}' into {pick(LANGS)}"
    if kind == 4:
        return f"rewrite this to be {pick(TONES)}: {pick(SENTENCES)}"
    if kind == 5:
        return f"write a {pick(PLANGS)} function that {pick(TASKS)}"
    if kind == 6:
        return f"summarize this: the {pick(DOCS)} says {pick(TOPICS)} will be decided " \
            f"{pick(WHENS)} in {pick(CITIES)}."  # fmt: skip
    if kind == 7:
        return f"what is {pick(STABLE)}?"
    if kind == 8:
        return f"give me {rng.randrange(3, 8)} ideas for {pick(THEMES)} at {pick(PLACES)}"
    greeting = pick(["hi", "hey", "hello"])
    return f"{greeting}, {pick(['how are you?', 'thanks!', 'what can you do?'])}"


def make_data(data: Path, per_label: int = 200) -> tuple[int, int]:
    kept = [m for m in read_messages(data) if m.source != "template"] if data.exists() else []
    seen = {m.text for m in kept}
    rng = random.Random(SEED)
    made: list[Message] = []
    for label, make in ((RETRIEVE, _retrieve), (ANSWER, _answer)):
        count = 0
        while count < per_label:
            text = make(rng)
            if text not in seen:
                seen.add(text)
                made.append(Message(text, label, "template"))
                count += 1
    lines = [json.dumps({"text": m.text, "label": m.label, "source": m.source},
                        ensure_ascii=False) for m in [*kept, *made]]  # fmt: skip
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
