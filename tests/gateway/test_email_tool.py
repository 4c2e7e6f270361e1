"""gateway/email_tool.py against a real SMTP server on loopback (aiosmtpd's, in a thread)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gateway.email_tool import EmailTool
from gateway.tool_ports import ToolOutcome, ToolServer
from tests.servers import free_port
from tests.tool_servers import SmtpTestServer, run_smtp_server

SENDER = "assistant@chat.test"
ALLOWED = frozenset({"ops@chat.test", "alice@chat.test"})


@pytest.fixture(scope="module")
def smtp_server() -> Iterator[SmtpTestServer]:
    with run_smtp_server() as server:
        yield server


@pytest.fixture
def relay(smtp_server: SmtpTestServer) -> SmtpTestServer:
    smtp_server.clear()
    return smtp_server


def tool_for(relay: SmtpTestServer) -> EmailTool:
    return EmailTool(relay.host, relay.port, SENDER, ALLOWED, timeout_s=5)


async def test_lists_one_tool_whose_recipients_are_the_allowed_ones(relay: SmtpTestServer) -> None:
    tool: ToolServer = tool_for(relay)
    assert tool.label == "send_email"
    [definition] = await tool.list_tools()
    assert definition.name == "send_email"
    schema = json.loads(definition.parameters)
    assert schema["type"] == "object"
    assert sorted(schema["required"]) == ["body", "subject", "to"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["to"] == {
        "type": "string",
        "enum": ["alice@chat.test", "ops@chat.test"],
    }
    assert schema["properties"]["subject"] == {"type": "string"}
    assert schema["properties"]["body"] == {"type": "string"}
    await tool.aclose()


async def test_a_mail_arrives_as_written(relay: SmtpTestServer) -> None:
    body = "The nightly job failed twice.\nSee the log at 02:00.\n"
    outcome = await tool_for(relay).call(
        "send_email", {"to": "ops@chat.test", "subject": "Nightly job", "body": body}
    )
    assert outcome == ToolOutcome(output="sent to ops@chat.test")
    [mail] = relay.wait_for(1)
    assert mail["From"] == SENDER
    assert mail["To"] == "ops@chat.test"
    assert mail["Subject"] == "Nightly job"
    assert mail.get_content_type() == "text/plain"
    assert mail.get_content() == body


async def test_a_recipient_not_allowed_gets_nothing(relay: SmtpTestServer) -> None:
    tool = tool_for(relay)
    refused = await tool.call(
        "send_email", {"to": "mallory@evil.test", "subject": "hi", "body": "secrets"}
    )
    assert refused.output == ""
    assert "mallory@evil.test" in refused.error and "not an allowed recipient" in refused.error
    # Sent after the refused one: once it is in, the refused one would have been before it.
    sent = await tool.call("send_email", {"to": "alice@chat.test", "subject": "s", "body": "b"})
    assert sent == ToolOutcome(output="sent to alice@chat.test")
    [only] = relay.wait_for(1)
    assert only["To"] == "alice@chat.test"
    assert len(relay.messages()) == 1


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"to": "ops@chat.test", "body": "b"}, "missing argument: subject"),
        ({"to": "ops@chat.test", "subject": "s", "body": 3}, "body must be a string"),
        ({"subject": "s", "body": "b"}, "missing argument: to"),
        ({"to": "ops@chat.test", "subject": "s", "body": "b", "cc": "x"}, "unexpected arguments"),
        ({"to": "ops@chat.test", "subject": "s\nBcc: x@evil.test", "body": "b"}, "cannot write"),
    ],
)
async def test_bad_arguments_are_error_outcomes(
    relay: SmtpTestServer, arguments: dict[str, object], reason: str
) -> None:
    tool = tool_for(relay)
    outcome = await tool.call("send_email", arguments)
    assert outcome.output == ""
    assert reason in outcome.error
    await tool.call("send_email", {"to": "ops@chat.test", "subject": "after", "body": "b"})
    assert [mail["Subject"] for mail in relay.wait_for(1)] == ["after"]


async def test_an_unknown_tool_name_is_an_error_outcome(relay: SmtpTestServer) -> None:
    outcome = await tool_for(relay).call("send_mail", {"to": "ops@chat.test"})
    assert outcome.output == "" and "send_mail" in outcome.error


async def test_a_relay_not_listening_is_an_error_outcome() -> None:
    tool = EmailTool("127.0.0.1", free_port(), SENDER, ALLOWED, timeout_s=2)
    outcome = await tool.call("send_email", {"to": "ops@chat.test", "subject": "s", "body": "b"})
    assert outcome.output == ""
    assert "could not be reached" in outcome.error
