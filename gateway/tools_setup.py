"""The gateway's platform tools as the operator configures them (the `tools` section), made into
the tool loop's policy and adapters: who may run what, how many steps a turn may take, the
operator's MCP servers and what their tools can do, and send_email through the operator's
relay."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import domain
from domain.capabilities import EVERY_CAPABILITY, REQUEST_SERVERS, Capability, ToolSpec
from domain.citations import Form
from domain.retrieval import AlwaysRetrieve, RetrievalDecider, RetrievalGate
from domain.types import Tier
from gateway.email_tool import EmailTool
from gateway.files import FILE_SEARCH, FileDesk
from gateway.mcp_tools import McpServers
from gateway.memories import REMEMBER, MemoryDesk
from gateway.metrics import GatewayMetrics
from gateway.tool_calls import TextCheck
from gateway.tool_loop import CompletionRunner, ToolLoop
from gateway.tool_requests import OperatorServer, OwnTool, ToolPolicy
from gateway.turn_citations import CONVERSATION, RESPONSES, CitationTally
from infra.config import ConfigError

SEND_EMAIL = "send_email"
SHIPPED_RETRIEVAL_MODEL = Path(domain.__file__).parent / "data" / "retrieval_model.json"


@dataclass
class ToolsConfig:
    # What each tier may run: the operator's tools by name (send_email, remember,
    # file_search), its servers as "label.*", and request_servers for MCP servers a request
    # names itself. A grant lets a request name the tool; nothing is offered to a turn that
    # did not ask for it.
    free_grants: list[str] = field(default_factory=lambda: ["remember", FILE_SEARCH])
    plus_grants: list[str] = field(
        default_factory=lambda: ["remember", FILE_SEARCH, REQUEST_SERVERS]
    )
    # Model calls with tool calls a turn may make before it is ended (each is a completion,
    # billed as one).
    free_max_steps: int = 4
    plus_max_steps: int = 8
    # Each listing or call of a remote server, and what its result may hold (cut past it, with
    # a notice, so one result cannot fill the window).
    timeout_s: float = 30.0
    max_output_chars: int = 16_000
    # The operator's MCP servers, "label=url" each, and what their tools can do,
    # "label=capability+capability" (reads_private, brings_untrusted,
    # communicates_externally); a server not described is taken to do all three.
    servers: list[str] = field(default_factory=list)
    server_capabilities: list[str] = field(default_factory=list)
    # send_email through the operator's relay, "host:port" (empty: no such tool), from
    # `email_sender`, to `email_recipients` only.
    email_relay: str = ""
    email_sender: str = "assistant@localhost"
    email_recipients: list[str] = field(default_factory=list)
    # The retrieval gate (domain/retrieval.py): a turn whose message needs no outside content
    # gets no tool that brings it in. Off: every tool the request names is offered. The model
    # file: empty = the shipped domain/data/retrieval_model.json.
    retrieval_gate: bool = True
    retrieval_model: str = ""
    # Citation-shaped prose with no id that an answer which read the user's files keeps, per
    # surface (bracket_number, footnote, source_note, broken_cite, lenticular); every other
    # such form is removed before it is shown (domain/citations.py).
    responses_citation_forms: list[str] = field(default_factory=list)
    conversation_citation_forms: list[str] = field(default_factory=list)
    # An answer that read passages is decoded under a grammar that lets it cite only their
    # ids (llama-server's GBNF, vLLM's structured outputs). Off for an engine without grammar
    # support: the resolver alone then removes invented ids before they are shown.
    citation_grammar: bool = True


def _pairs(entries: list[str], what: str) -> dict[str, str]:
    pairs = {}
    for entry in entries:
        label, equals, value = entry.partition("=")
        if not equals or not label.strip() or not value.strip():
            raise ConfigError(f"tools.{what}: {entry!r} is not label=value")
        pairs[label.strip()] = value.strip()
    return pairs


def _capabilities(text: str, label: str) -> frozenset[Capability]:
    try:
        return frozenset(Capability(name.strip()) for name in text.split("+"))
    except ValueError as exc:
        known = ", ".join(c.value for c in Capability)
        raise ConfigError(f"tools.server_capabilities: {label}={text!r}; known: {known}") from exc


def _servers(config: ToolsConfig) -> dict[str, OperatorServer]:
    urls = _pairs(config.servers, "servers")
    described = _pairs(config.server_capabilities, "server_capabilities")
    unknown = set(described) - set(urls)
    if unknown:
        raise ConfigError(f"tools.server_capabilities names no server: {', '.join(unknown)}")
    servers = {}
    for label, url in urls.items():
        capabilities = (_capabilities(described[label], label) if label in described
                        else EVERY_CAPABILITY)  # fmt: skip
        servers[label] = OperatorServer(label, url, ToolSpec(label + ".*", capabilities))
    return servers


def _own_tools(
    config: ToolsConfig, memories: MemoryDesk | None, files: FileDesk | None
) -> dict[str, tuple[ToolSpec, OwnTool]]:
    tools: dict[str, tuple[ToolSpec, OwnTool]] = {}
    if files is not None:
        # It reads the user's own files into the turn: private data, for the trifecta.
        spec = ToolSpec(FILE_SEARCH, frozenset({Capability.READS_PRIVATE}))
        tools[FILE_SEARCH] = (spec, files.search_tool)
    if memories is not None:
        # It writes the user's own memory: no private data read into the turn, nothing
        # brought in, nothing sent out (its result repeats the model's own arguments).
        tools[REMEMBER] = (ToolSpec(REMEMBER, frozenset()), memories.remember_tool)
    if config.email_relay:
        tools[SEND_EMAIL] = _email(config)
    return tools


def _email(config: ToolsConfig) -> tuple[ToolSpec, OwnTool]:
    host, colon, port = config.email_relay.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise ConfigError(f"tools.email_relay: {config.email_relay!r} is not host:port")
    if not config.email_recipients:
        raise ConfigError("tools.email_recipients: send_email needs the addresses it may write to")
    email = EmailTool(host, int(port), config.email_sender, frozenset(config.email_recipients),
                      timeout_s=config.timeout_s)  # fmt: skip
    spec = ToolSpec(SEND_EMAIL, frozenset({Capability.COMMUNICATES_EXTERNALLY}))
    return spec, lambda user: email


def _retrieval(config: ToolsConfig) -> RetrievalDecider:
    if not config.retrieval_gate:
        return AlwaysRetrieve()
    path = Path(config.retrieval_model) if config.retrieval_model else SHIPPED_RETRIEVAL_MODEL
    return RetrievalGate.from_dict(json.loads(path.read_text(encoding="utf-8")))


def _citation_forms(config: ToolsConfig) -> dict[str, frozenset[str]]:
    known = {form.value for form in Form}
    forms = {RESPONSES: config.responses_citation_forms,
             CONVERSATION: config.conversation_citation_forms}  # fmt: skip
    for surface, names in forms.items():
        unknown = sorted(set(names) - known)
        if unknown:
            raise ConfigError(f"tools.{surface}_citation_forms: {unknown[0]!r} is no citation "
                              f"form; known: {', '.join(sorted(known))}")  # fmt: skip
    return {surface: frozenset(names) for surface, names in forms.items()}


def tool_loops(
    config: ToolsConfig,
    metrics: GatewayMetrics,
    output_check: TextCheck,
    memories: MemoryDesk | None = None,
    files: FileDesk | None = None,
    tally: CitationTally | None = None,
) -> Callable[[CompletionRunner], ToolLoop]:
    """Loops over the steps given, all sharing one policy and one MCP client, so the settings
    are read, the retrieval model loaded and the mail tool made once per gateway. With
    memories, `remember` is one of the operator's tools (a grant lets a request name it);
    with files, `file_search`, whose answers' citations count in the versions' tally."""
    policy = ToolPolicy(
        grants={Tier.FREE: frozenset(config.free_grants), Tier.PLUS: frozenset(config.plus_grants)},
        max_steps={Tier.FREE: config.free_max_steps, Tier.PLUS: config.plus_max_steps},
        own_tools=_own_tools(config, memories, files),
        servers=_servers(config),
        retrieval=_retrieval(config),
        lasting=frozenset({REMEMBER}),
        searches=frozenset({FILE_SEARCH}),
        citation_forms=_citation_forms(config),
        citation_grammar=config.citation_grammar,
    )
    remote = McpServers(timeout_s=config.timeout_s, max_output_chars=config.max_output_chars)
    return lambda completions: ToolLoop(completions, policy, remote, metrics, output_check,
                                        tally)  # fmt: skip


def tool_loop(
    config: ToolsConfig,
    completions: CompletionRunner,
    metrics: GatewayMetrics,
    output_check: TextCheck,
) -> ToolLoop:
    return tool_loops(config, metrics, output_check)(completions)
