"""The send_email tool: a plain-text mail through the operator's SMTP relay, to one of the
recipients the operator allows.

The relay is the operator's, on a private network: plain SMTP, no TLS, no login, in this slice.
The allowed recipients are the schema's enum for `to`, so a grammar-constrained model can only
name one of them, and call() checks again (a model not so constrained may name anyone): a call
outside the list sends nothing.
"""

from __future__ import annotations

import asyncio
import json
import smtplib
from collections.abc import Mapping
from email.message import EmailMessage
from typing import Any

import structlog

from domain.answer_options import ToolDefinition
from gateway.tool_ports import ToolOutcome

TOOL_NAME = "send_email"
_FIELDS = ("to", "subject", "body")


class EmailTool:
    """One tool, send_email (a ToolServer, label "send_email"). Holds no connection: each call
    opens one to the relay, sends, and quits, in a worker thread (smtplib blocks).

    timeout_s bounds each socket operation with the relay (connect, each command). A call
    cancelled while its thread sends cannot stop the thread: the mail may still go.
    """

    def __init__(
        self,
        host: str,
        port: int,
        sender: str,
        recipients: frozenset[str],
        timeout_s: float = 10.0,
    ) -> None:
        self._host = host
        self._port = port
        self._sender = sender
        self._recipients = recipients
        self._timeout_s = timeout_s
        self._log = structlog.get_logger(component="email-tool")

    @property
    def label(self) -> str:
        return TOOL_NAME

    async def list_tools(self) -> list[ToolDefinition]:
        schema = {
            "type": "object",
            "properties": {
                "to": {"type": "string", "enum": sorted(self._recipients)},
                "subject": {"type": "string"},
                "body": {"type": "string"},
            },
            "required": list(_FIELDS),
            "additionalProperties": False,
        }
        return [
            ToolDefinition(
                name=TOOL_NAME,
                description="Sends a plain-text email to one of the allowed recipients.",
                parameters=json.dumps(schema),
            )
        ]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        if name != TOOL_NAME:
            return ToolOutcome(output="", error=f"no tool named {name!r}: only {TOOL_NAME}")
        problem = self._check(arguments)
        if problem:
            return ToolOutcome(output="", error=problem)
        to, subject, body = (arguments[field] for field in _FIELDS)
        try:
            message = EmailMessage()
            message["From"] = self._sender
            message["To"] = to
            message["Subject"] = subject
            message.set_content(body)
        except ValueError as bad:
            # A header with a line break in it, say: never a header injected.
            return ToolOutcome(output="", error=f"cannot write that mail: {bad}")
        try:
            await asyncio.to_thread(self._send, message)
        except smtplib.SMTPException as refused:
            error = f"the mail relay refused the mail: {refused}"
        except OSError as unreachable:
            reason = f"{type(unreachable).__name__}: {unreachable}"
            error = f"the mail relay {self._host}:{self._port} could not be reached: {reason}"
        else:
            return ToolOutcome(output=f"sent to {to}")
        self._log.warning("send_email failed", error=error)
        return ToolOutcome(output="", error=error)

    async def aclose(self) -> None:
        """Nothing is held between calls."""

    def _check(self, arguments: Mapping[str, Any]) -> str:
        """Why these arguments cannot be sent, or "" when they can."""
        unexpected = sorted(set(arguments) - set(_FIELDS))
        if unexpected:
            return f"unexpected arguments: {', '.join(unexpected)}"
        for field in _FIELDS:
            if field not in arguments:
                return f"missing argument: {field}"
            if not isinstance(arguments[field], str):
                return f"{field} must be a string"
        if arguments["to"] not in self._recipients:
            allowed = ", ".join(sorted(self._recipients))
            return f"{arguments['to']!r} is not an allowed recipient (allowed: {allowed})"
        return ""

    def _send(self, message: EmailMessage) -> None:
        with smtplib.SMTP(self._host, self._port, timeout=self._timeout_s) as relay:
            relay.send_message(message)
