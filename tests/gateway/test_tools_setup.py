"""The `tools` settings as an operator writes them: made into the loop's policy, or refused
at start with the setting named."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from domain.capabilities import EVERY_CAPABILITY, Capability, ToolSpec
from domain.errors import PermissionDenied
from domain.types import Tier, User
from gateway.metrics import GatewayMetrics
from gateway.policies import MessagePolicies
from gateway.tool_loop import ToolLoop
from gateway.tool_requests import PlatformTool
from gateway.tools_setup import ToolsConfig, tool_loop
from infra.config import ConfigError


def built(config: ToolsConfig) -> ToolLoop:
    """The loop as main.py builds it (no model: nothing here calls one)."""
    return tool_loop(config, completions=None, metrics=GatewayMetrics(CollectorRegistry()),  # type: ignore[arg-type]
                     output_check=MessagePolicies())  # fmt: skip


FREE, PLUS = User("f", Tier.FREE), User("p", Tier.PLUS)


def test_servers_grants_and_mail_become_what_a_turn_may_run() -> None:
    loop = built(ToolsConfig(
        plus_grants=["request_servers", "docs.*", "send_email"], free_grants=["docs.*"],
        servers=["docs=http://docs:8000/mcp", "wiki = http://wiki/mcp"],
        server_capabilities=["docs=brings_untrusted+reads_private"],
        email_relay="relay:25", email_recipients=["me@example.test"],
    ))  # fmt: skip
    docs = PlatformTool(server_label="docs")
    assert loop.capabilities(FREE, [docs]).tools == {ToolSpec(
        "docs.*", frozenset({Capability.BRINGS_UNTRUSTED, Capability.READS_PRIVATE}))}  # fmt: skip
    assert loop.capabilities(PLUS, [PlatformTool(name="send_email")]).tools == {
        ToolSpec("send_email", frozenset({Capability.COMMUNICATES_EXTERNALLY}))}  # fmt: skip
    with pytest.raises(PermissionDenied, match="not part of this plan"):
        loop.capabilities(FREE, [PlatformTool(name="send_email")])
    # A server the operator registered but did not describe is taken to do everything; the
    # grant names it, so it is not granted here.
    with pytest.raises(PermissionDenied, match="not part of this plan"):
        loop.capabilities(PLUS, [PlatformTool(server_label="wiki")])
    loop = built(ToolsConfig(plus_grants=["wiki.*"], servers=["wiki=http://wiki/mcp"]))
    assert loop.capabilities(PLUS, [PlatformTool(server_label="wiki")]).tools == {
        ToolSpec("wiki.*", EVERY_CAPABILITY)}  # fmt: skip


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (ToolsConfig(servers=["docs"]), "tools.servers"),
        (ToolsConfig(servers=["docs=http://d/mcp"], server_capabilities=["docs=reads_minds"]),
         "tools.server_capabilities"),
        (ToolsConfig(server_capabilities=["wiki=brings_untrusted"]), "tools.server_capabilities"),
        (ToolsConfig(email_relay="relay"), "tools.email_relay"),
        (ToolsConfig(email_relay="relay:25"), "tools.email_recipients"),
    ],
)  # fmt: skip
def test_a_setting_that_cannot_be_read_stops_the_gateway_naming_it(config, named) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        built(config)
