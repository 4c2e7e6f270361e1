"""The simulated engine's whole answer to a first message, as the user should see it.

With `CHAT_NODEAGENT_ENGINE=sim` an answer is a function of its prompt (nodeagent/sim.py), so a
test can compare the text it was streamed with the answer the same prompt gets uninterrupted,
character for character: a failover that restarted the answer, or repeated or dropped words at
the seam, shows. The prompt is the gateway's system prompt and the message, which holds for a
conversation's first message with the router off (`CHAT_GATEWAY_ROUTER=false`).
"""

from __future__ import annotations

from domain.answer_options import PLAIN, AnswerOptions
from domain.types import Role
from nodeagent.engine import PromptTurn
from nodeagent.sim import planned_text
from nodeagent.sim_documents import chunks


def expected_answer(
    content: str,
    system_prompt: str,
    lengths: tuple[int, int],
    max_tokens: int | None = None,
    options: AnswerOptions = PLAIN,
) -> str:
    """The answer to content (with the citations it copies, under options' citation_ids),
    cut at max_tokens (the tier's answer cap) when given."""
    turns = [PromptTurn(Role.SYSTEM, system_prompt), PromptTurn(Role.USER, content)]
    return "".join(chunks(planned_text(turns, lengths, options))[:max_tokens])
