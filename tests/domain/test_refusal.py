"""What counts as a refusal, for the online share and the eval gate alike."""

from __future__ import annotations

import pytest

from domain.refusal import is_refusal


@pytest.mark.parametrize(
    "text",
    [
        "I can't help with that request. If you think this is a mistake, let us know.",
        "I cannot assist with that.",
        "Sorry, but I can't provide that information.",
        "I'm sorry, I am unable to help with this.",
        "I must decline this request.",
        "I won't help with that.",
        "I'm not able to answer that.",
    ],
)
def test_answers_that_decline_are_refusals(text: str) -> None:
    assert is_refusal(text)


@pytest.mark.parametrize(
    "text",
    [
        "Paris is the capital of France.",
        "To kill a Python process, run `kill <pid>`.",
        "Here is how: first, I can't stress enough how important backups are.",
        "The answer is 42. I cannot know your exact setup, but this usually works.",
    ],
)
def test_answers_are_not_refusals(text: str) -> None:
    assert not is_refusal(text)


def test_a_refused_finish_is_a_refusal_whatever_the_text() -> None:
    assert is_refusal("anything", "refused")
