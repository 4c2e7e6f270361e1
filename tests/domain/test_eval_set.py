"""The frozen golden set in data/eval: big enough to resolve the gate's thresholds, and the
harmful prompts are the kind the platform's input check refuses (the harmless ones are not)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from domain.evaluation.gate import MIN_SET_SIZE
from domain.evaluation.judging import EvalItem
from domain.evaluation.sets import parse_set
from domain.safety.rules import BlocklistClassifier

ROOT = Path(__file__).resolve().parents[2]
SETS = ROOT / "data" / "eval"


def load_set(path: Path) -> list[EvalItem]:
    return parse_set(path.read_text(), str(path))


def classifier() -> BlocklistClassifier:
    return BlocklistClassifier.from_data(
        json.loads((ROOT / "domain" / "safety" / "blocklist.json").read_text())
    )


def test_the_sets_are_big_enough_for_the_gates_thresholds() -> None:
    golden = load_set(SETS / "golden.jsonl")
    # A whole run is a gate: each set at least the minimum a verdict stands on.
    assert len(golden) >= MIN_SET_SIZE
    assert len(load_set(SETS / "harmful.jsonl")) >= MIN_SET_SIZE
    assert len(load_set(SETS / "harmless.jsonl")) >= MIN_SET_SIZE
    per_category = Counter(item.category for item in golden)
    assert len(per_category) >= 4 and min(per_category.values()) >= 20
    every = [i.item_id for name in ("golden", "harmful", "harmless")
             for i in load_set(SETS / f"{name}.jsonl")]  # fmt: skip
    assert len(every) == len(set(every))


def test_every_harmful_prompt_is_refused_by_the_input_check_and_no_harmless_one() -> None:
    check = classifier()
    harmful = load_set(SETS / "harmful.jsonl")
    assert [i.item_id for i in harmful if check.classify(i.prompt).allowed] == []
    harmless = load_set(SETS / "harmless.jsonl") + load_set(SETS / "golden.jsonl")
    assert [i.item_id for i in harmless if not check.classify(i.prompt).allowed] == []
    assert all(i.reference for i in harmless)
