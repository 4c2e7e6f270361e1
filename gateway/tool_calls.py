"""One tool call as the tool loop (gateway/tool_loop.py) runs it, with the controls around it:
a call whose write outlives the turn is not run once the turn has read untrusted content, and
the call's arguments and result pass the output check (flagged text goes nowhere)."""

from __future__ import annotations

from typing import Protocol

from domain.answer_options import ToolCall
from domain.safety import Verdict
from domain.trifecta import untrusted_origins
from gateway.metrics import GatewayMetrics
from gateway.tool_ports import ToolOutcome
from gateway.tool_turn import Offered, TurnState, arguments_of


class TextCheck(Protocol):
    """The output check over a whole text (gateway/policies.py's MessagePolicies)."""

    def check_text(self, text: str) -> Verdict | None: ...


class CallRunner:
    def __init__(
        self, lasting: frozenset[str], output_check: TextCheck, metrics: GatewayMetrics
    ) -> None:
        # The operator's tools whose writes outlive the turn (remember).
        self._lasting = lasting
        self._output_check = output_check
        self._metrics = metrics

    async def run(self, turn: TurnState, tool: Offered, call: ToolCall) -> ToolOutcome:
        return self._unlasting(turn, tool) or await self._call(tool, call)

    def _unlasting(self, turn: TurnState, tool: Offered) -> ToolOutcome | None:
        """Why a call whose write outlives the turn is not run (the turn read untrusted
        content), or None when it may run."""
        if tool.qualified not in self._lasting:
            return None
        untrusted = untrusted_origins(turn.parts)
        if not untrusted:
            return None
        self._metrics.tool_calls.labels(tool.server_label or tool.qualified,
                                        "refused_after_untrusted").inc()  # fmt: skip
        return ToolOutcome("", f"not run: this turn read untrusted content "
                           f"({', '.join(untrusted)}), and nothing may be kept from it for "
                           "later turns")  # fmt: skip

    async def _call(self, tool: Offered, call: ToolCall) -> ToolOutcome:
        """Runs one call. Its arguments are the model's output and pass the output check
        before anything is sent; its result passes it before the model or the caller reads
        it. Flagged text goes nowhere: the call is not run, or its result is withheld."""
        server = tool.server_label or call.name
        arguments = arguments_of(call)
        if arguments is None:
            return ToolOutcome("", "the arguments are not a JSON object")
        if self._output_check.check_text(call.arguments) is not None:
            self._metrics.tool_calls.labels(server, "arguments_withheld").inc()
            return ToolOutcome("", "the call was not run: its arguments did not pass the "
                               "platform's output check")  # fmt: skip
        outcome = await tool.server.call(tool.definition.name, arguments)
        if outcome.output and self._output_check.check_text(outcome.output) is not None:
            self._metrics.tool_calls.labels(server, "result_withheld").inc()
            return ToolOutcome("", "the result was withheld: it did not pass the platform's "
                               "output check")  # fmt: skip
        self._metrics.tool_calls.labels(server, "error" if outcome.error else "ok").inc()
        return outcome
