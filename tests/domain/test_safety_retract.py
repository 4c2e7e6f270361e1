"""The streaming output check in retract mode: text is released as it comes, the same checks
read it, and a flag ends the answer so the caller withdraws what was shown."""

from __future__ import annotations

import pytest

from domain.safety import (
    ALLOWED,
    BlocklistClassifier,
    OutputGuard,
    OutputMode,
    StreamCheckConfig,
    Verdict,
)
from tests.domain.test_safety import (
    CANARY,
    CONFIGS,
    CountingClassifier,
    benign_answer,
    chunkings,
    read_blocklist,
    released_by,
    stream,
    token_chunks,
    tokens,
    with_phrase_at,
)

RETRACT = OutputMode.RETRACT


@pytest.fixture(scope="module")
def classifier() -> BlocklistClassifier:
    return read_blocklist()


@pytest.mark.parametrize("config_name", CONFIGS)
def test_every_chunk_of_a_benign_answer_is_released_as_it_comes(
    classifier: BlocklistClassifier, config_name: str
) -> None:
    answer = benign_answer(1000)
    for how, chunks in chunkings(answer).items():
        guard = OutputGuard(classifier, CONFIGS[config_name], mode=RETRACT)
        assert [guard.feed(chunk) for chunk in chunks] == chunks, how
        assert guard.finish() == ""
        assert not guard.violated
        assert guard.mode is RETRACT


def test_the_first_words_show_with_the_first_chunk(classifier: BlocklistClassifier) -> None:
    guard = OutputGuard(classifier, mode=RETRACT)
    assert guard.feed("Here") == "Here"
    assert guard.feed(" is a plan") == " is a plan"


@pytest.mark.parametrize("config_name", CONFIGS)
def test_a_flagged_phrase_is_caught_by_the_next_check_wherever_it_falls(
    classifier: BlocklistClassifier, config_name: str
) -> None:
    """The phrase at every token position: the guard flags it within one check interval of
    its end (or at the final pass), and releases nothing from then on."""
    config = CONFIGS[config_name]
    for position in range(0, 300):
        text = with_phrase_at(position, CANARY)
        guard = OutputGuard(classifier, config, mode=RETRACT)
        fed = ""
        for chunk in token_chunks(text):
            fed += chunk
            shown = guard.feed(chunk)
            if guard.violated:
                assert shown == "", position
                break
            assert shown == chunk
        else:
            guard.finish()
        assert guard.violated, position
        assert guard.verdict.category == "test_canary"
        phrase_end = position + tokens(CANARY)
        assert tokens(fed) <= phrase_end + config.check_every_tokens + 1, position


def test_a_violation_releases_nothing_more(classifier: BlocklistClassifier) -> None:
    text = with_phrase_at(300, CANARY, n_tokens=1000)
    guard = OutputGuard(classifier, mode=RETRACT)
    *_, (_, released) = stream(guard, token_chunks(text))
    assert guard.violated
    assert text.startswith(released) and CANARY in released  # shown, so to be withdrawn
    assert guard.feed("more text " * 100) == ""
    assert guard.finish() == ""


def test_a_phrase_in_the_last_tokens_is_caught_by_the_final_pass(
    classifier: BlocklistClassifier,
) -> None:
    text = benign_answer(500) + " and finally " + CANARY
    guard = OutputGuard(classifier, mode=RETRACT)
    *_, (_, released) = stream(guard, token_chunks(text))
    assert released == text and not guard.violated
    assert guard.finish() == ""
    assert guard.violated


def test_the_final_pass_reads_the_whole_answer() -> None:
    class AcrossAnswer:
        def classify(self, text: str) -> Verdict:
            if "ALPHA-MARK" in text and "OMEGA-MARK" in text:
                return Verdict(False, "across", "both marks")
            return ALLOWED

    text = "ALPHA-MARK " + benign_answer(600) + " OMEGA-MARK"
    guard = OutputGuard(AcrossAnswer(), mode=RETRACT)
    *_, (_, released) = stream(guard, token_chunks(text))
    assert released == text and not guard.violated
    assert guard.finish() == ""
    assert guard.verdict.category == "across"


def test_checks_are_as_frequent_and_as_wide_as_in_holdback_mode(
    classifier: BlocklistClassifier,
) -> None:
    config = StreamCheckConfig(check_every_tokens=16)
    counts = {}
    for mode in OutputMode:
        counting = CountingClassifier(classifier)
        guard = OutputGuard(counting, config, mode=mode)
        released_by(guard, token_chunks(benign_answer(1000)))
        *windows, final = counting.window_tokens
        assert max(windows) <= config.window_tokens + config.lookback_tokens
        assert final == 1000
        counts[mode] = len(windows)
    assert counts[OutputMode.RETRACT] == counts[OutputMode.HOLDBACK] == 999 // 16
