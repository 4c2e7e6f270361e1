"""The golden set's files (data/eval/*.jsonl): one JSON object a line with id, category,
prompt and, except in the harmful set, a reference answer."""

from __future__ import annotations

import json

from domain.evaluation.judging import EvalItem


def parse_set(text: str, source: str) -> list[EvalItem]:
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            items.append(EvalItem(raw["id"], raw["category"], raw["prompt"],
                                  raw.get("reference", "")))  # fmt: skip
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{source}:{number}: not an eval item ({error})") from error
    return items
