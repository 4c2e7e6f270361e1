"""The lethal-trifecta check, made before every model call of a turn that may run tools.

A model that can read the user's private data, has untrusted content in its context, and can
call a tool that communicates externally can be talked by that content into sending the data
out. The check looks at what is actually in the context about to be sent (each part tagged
with where it came from) and at the turn's capability set; when all three legs are present
it raises, and the model is not called. A flag saying "this turn read something untrusted"
would be either set too late to matter or set always, making the external tool dead code;
the materialised parts are what the model will read, so they are what is checked."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from domain.capabilities import Capability, CapabilitySet, SecurityEvent, SecurityViolation


class Origin(enum.StrEnum):
    # The operator's own text (system prompt, instructions): trusted, and not the user's.
    OPERATOR = "operator"
    # The user's private data.
    CONVERSATION = "conversation"
    MEMORY = "memory"
    USER_FILE = "user_file"
    # Untrusted content: anyone may have written it.
    TOOL_RESULT = "tool_result"
    FETCHED_DOCUMENT = "fetched_document"


PRIVATE = frozenset({Origin.CONVERSATION, Origin.MEMORY, Origin.USER_FILE})
UNTRUSTED = frozenset({Origin.TOOL_RESULT, Origin.FETCHED_DOCUMENT})


@dataclass(frozen=True, slots=True)
class ContextPart:
    """One piece of the context as it will be sent. A part may come from more than one place:
    a search over the user's files is both the user's data and a tool's result."""

    text: str
    origins: frozenset[Origin]

    def __post_init__(self) -> None:
        if not isinstance(self.origins, frozenset) or not self.origins:
            raise TypeError("a context part names a frozenset of at least one origin")


class LethalTrifecta(SecurityViolation):
    """Private data and untrusted content in the context, and a tool that communicates
    externally in the capability set: the model call is not made."""


def _holding(parts: Iterable[ContextPart], kinds: frozenset[Origin]) -> list[Origin]:
    # An empty part puts nothing before the model: only text that is there counts.
    found = {origin for part in parts if part.text.strip() for origin in part.origins & kinds}
    return sorted(found)


def untrusted_origins(parts: Iterable[ContextPart]) -> list[Origin]:
    """The untrusted origins the context holds (text anyone may have written)."""
    return _holding(parts, UNTRUSTED)


def check(
    parts: Iterable[ContextPart],
    capabilities: CapabilitySet,
    confirmed: frozenset[str] = frozenset(),
) -> None:
    """Raises LethalTrifecta when the three legs are all present; returns otherwise.
    confirmed: the tools in the set each of whose calls a person approves before it runs
    (their arguments shown): no call of theirs can carry data out unseen, so they are not
    the outward leg. That confirmation is the one control left when a turn needs both an
    outside page and a tool that writes out."""
    parts = tuple(parts)
    private = _holding(parts, PRIVATE)
    untrusted = _holding(parts, UNTRUSTED)
    outward = sorted(capabilities.able_to(Capability.COMMUNICATES_EXTERNALLY) - confirmed)
    if not (private and untrusted and outward):
        return
    detail = (
        f"the context holds the user's private data ({', '.join(private)}) and untrusted "
        f"content ({', '.join(untrusted)}), and {', '.join(outward)} can send data out: "
        "the model was not called"
    )
    raise LethalTrifecta(SecurityEvent("lethal_trifecta", tuple(outward), detail))
