"""The race's churn kills the replica a system leans on: the one that read the most prompt
tokens for it in the round so far; or, asked for the earlier race, always the last one."""

from __future__ import annotations

from pathlib import Path

from bench.race import Churn


def test_churn_kills_the_replica_the_system_read_most_prompt_tokens_on() -> None:
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]
    busiest = Churn([11, 12, 13], urls, Path("."))
    assert busiest.choose([120.0, 9_000.0, 450.0]) == 1
    assert busiest.choose([0.0, 0.0, 5.0]) == 2
    # A router that sent everything to one replica loses that one, wherever it is.
    assert busiest.choose([7_000.0, 0.0, 0.0]) == 0
    last = Churn([11, 12, 13], urls, Path("."), target="last")
    assert last.choose([7_000.0, 0.0, 0.0]) == 2
