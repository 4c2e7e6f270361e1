"""A node's measured engine speeds, and how many tokens an engine may gather into one streamed
event for a reader that takes text at an interval."""

from __future__ import annotations

import pytest

from nodeagent.engine_speed import MOST_TOKENS_PER_EVENT, EngineSpeed, tokens_per_event


def test_speeds_are_tokens_over_seconds_of_the_last_requests() -> None:
    speed = EngineSpeed(window=2)
    assert (speed.prefill_tokens_per_s, speed.decode_step_s) == (0.0, 0.0)
    speed.prompt_read(100, 1.0)
    speed.prompt_read(300, 1.0)
    assert speed.prefill_tokens_per_s == 200.0
    speed.prompt_read(0, 5.0)  # all cached: says nothing of the reading speed
    assert speed.prefill_tokens_per_s == 200.0
    speed.decoded(10, 0.25)
    speed.decoded(30, 0.75)
    speed.decoded(10, 0.5)  # the window keeps the last two
    assert speed.decode_step_s == pytest.approx(1.25 / 40)


def test_an_engine_gathers_the_steps_that_fit_in_the_readers_interval() -> None:
    assert tokens_per_event(0.05, 0.025) == 2
    assert tokens_per_event(0.25, 0.03) == 8
    # Each token as it comes: the reader wants every one, or the step is not measured yet.
    assert tokens_per_event(0.0, 0.025) == 1
    assert tokens_per_event(0.25, 0.0) == 1
    # A step longer than the interval: one token an event, never none.
    assert tokens_per_event(0.05, 0.2) == 1
    assert tokens_per_event(1.0, 0.001) == MOST_TOKENS_PER_EVENT
