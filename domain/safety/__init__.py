"""Safety checks outside the model: a narrow hard-block check on the user's message, and a
streaming check on the answer that holds text back until it has been read.

Compose once per service: `classifier = BlocklistClassifier.from_data(blocklist)` (the
blocklist document, read by the composition root), then `InputGuard(classifier)` for
messages and a fresh `OutputGuard(classifier, config)` for every answer:

    decision = input_guard.check(message)        # before anything is queued
    if not decision.allowed: ...                 # done, finish `refused`, decision.refusal_text
    guard = OutputGuard(classifier, config)      # one per answer
    for chunk in engine_chunks:
        shown = guard.feed(chunk)                # often ""
        if shown: append Delta(shown)
        if guard.violated: cancel upstream; break
    shown = guard.finish()                       # final pass over the whole answer
    if shown: append Delta(shown)
    if guard.violated: done, finish `refused`, guard.refusal_text (guard.verdict says why)

`OutputGuard(classifier, config, mode=OutputMode.RETRACT)` returns every chunk at once instead;
when it is violated, withdraw what was shown of the answer before the refusal."""

from domain.safety.guards import (
    InputDecision,
    InputGuard,
    OutputGuard,
    OutputMode,
    Refusals,
    StreamCheckConfig,
)
from domain.safety.rules import (
    ALLOWED,
    BlocklistClassifier,
    SafetyClassifier,
    Verdict,
)
from domain.safety.text import Folded, Folder

__all__ = [
    "ALLOWED",
    "BlocklistClassifier",
    "Folded",
    "Folder",
    "InputDecision",
    "InputGuard",
    "OutputGuard",
    "OutputMode",
    "Refusals",
    "SafetyClassifier",
    "StreamCheckConfig",
    "Verdict",
]
