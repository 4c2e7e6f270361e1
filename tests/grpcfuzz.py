"""The gRPC fuzzer's engine (tests/e2e/test_grpc_fuzz.py): calls a method with hypothesis'
requests as raw bytes, reads the store's rows before and after, and says what went wrong.

Calls go through a generic channel with identity serializers: the fuzzer's bytes reach the
server as they are, parseable or not, which a generated stub would never send.

What goes wrong: a status that says the server failed (FAULTS); an error event whose code
does; a refused call, or one that only reads, that changed the store; a call that changed
rows of a user other than the one it may change (`Target.owner`); whatever a target's own
checks say.
"""

from __future__ import annotations

import sqlite3
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import hypothesis
from google.protobuf.descriptor import Descriptor, MethodDescriptor
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from chat.v1 import chat_service_pb2
from infra.tls import TlsConfig
from tests import protofuzz
from tests.protofuzz import message_class
from tests.seeded import Metadata

RETRY_INFO = error_details_pb2.RetryInfo.DESCRIPTOR
# What gRPC itself says of a request over its size limit: the one RESOURCE_EXHAUSTED that
# comes without RetryInfo. Any other (a reply's trailers too large for the client, say) hides
# the server's real answer.
REQUEST_TOO_LARGE = "Received message larger than max"
# A streamed answer's error (ChatService); its code is a google.rpc.Code number.
ERROR_EVENT = chat_service_pb2.ErrorEvent.DESCRIPTOR

# google.rpc.Code numbers an error event must never carry: UNKNOWN, INTERNAL.
SERVER_FAULT_CODES = frozenset({2, 13})
# Statuses that say the server failed, not the request: none may come back.
FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    }
)
# The methods that may change the store when they succeed; every other call leaves it as it was.
WRITERS = frozenset(
    {
        "SendMessage",
        "DeleteConversation",
        "CreateUser",
        "SetUserTier",
        "RotateUserToken",
        "RevokeUserTokens",
    }
)
CALL_S = 30.0


def method_path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def sync_channel(address: str, tls: TlsConfig) -> grpc.Channel:
    """A blocking channel (hypothesis drives plain functions) with the holder's certificate."""
    if tls.insecure:
        return grpc.insecure_channel(address)
    ca, key, cert = tls.read()
    credentials = grpc.ssl_channel_credentials(ca, private_key=key, certificate_chain=cert)
    return grpc.secure_channel(address, credentials)


@dataclass
class Outcome:
    code: grpc.StatusCode
    details: str
    responses: list[Message] = field(default_factory=list)
    # Whether the status carried google.rpc.RetryInfo (the platform's limits always do).
    retry_info: bool = False


def call(
    channel: grpc.Channel,
    method: MethodDescriptor,
    requests: list[bytes],
    metadata: tuple[tuple[str, str], ...],
    timeout_s: float,
) -> Outcome:
    """Sends `requests` (one, unless the method takes a stream) and reads every response."""
    path, reply = method_path(method), message_class(method.output_type)
    kind = (
        ("stream" if method.client_streaming else "unary")
        + "_"
        + ("stream" if method.server_streaming else "unary")
    )
    multicallable = getattr(channel, kind)(path)
    payload = iter(requests) if method.client_streaming else requests[0]
    received: list[Message] = []
    try:
        if method.server_streaming:
            for raw in multicallable(payload, metadata=metadata, timeout=timeout_s):
                received.append(reply.FromString(raw))
        else:
            raw = multicallable(payload, metadata=metadata, timeout=timeout_s)
            received.append(reply.FromString(raw))
    except grpc.RpcError as error:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
        retry_info = any(d.Is(RETRY_INFO) for d in status.details) if status else False
        return Outcome(error.code(), error.details() or "", received, retry_info)
    return Outcome(grpc.StatusCode.OK, "", received)


def nested(message: Message, descriptor: Descriptor) -> Iterable[Message]:
    """Every message of type `descriptor` inside `message`, at any depth."""
    if message.DESCRIPTOR is descriptor:
        yield message
    for field_descriptor, value in message.ListFields():
        entry = field_descriptor.message_type
        if entry is None:
            continue
        if entry.GetOptions().map_entry:
            # A map iterates over its keys; its values are what may hold messages.
            if entry.fields_by_name["value"].message_type is None:
                continue
            items = list(value.values())
        else:
            items = list(value) if field_descriptor.is_repeated else [value]
        for item in items:
            yield from nested(item, descriptor)


def parsed(descriptor: Descriptor, raw: bytes) -> Message | None:
    try:
        return message_class(descriptor).FromString(raw)
    except Exception:
        return None


@dataclass(frozen=True)
class Rows:
    """What the platform's store holds: every row that a request could add, change or delete,
    keyed by its owner's user id first."""

    users: frozenset[tuple]
    conversations: frozenset[tuple]
    messages: frozenset[tuple]

    def of_others(self, user_id: str | None) -> Rows:
        """The rows that do not belong to `user_id` (None: every row)."""
        return Rows(*(frozenset(r for r in rows if r[0] != user_id) for rows in self.tables()))

    def tables(self) -> tuple[frozenset[tuple], ...]:
        return (self.users, self.conversations, self.messages)

    def diff(self, later: Rows) -> list[str]:
        lines = []
        for name, before, after in zip(
            ("users", "conversations", "messages"), self.tables(), later.tables(), strict=True
        ):
            lines += [f"{name} - {row!r}"[:200] for row in sorted(before - after, key=repr)]
            lines += [f"{name} + {row!r}"[:200] for row in sorted(after - before, key=repr)]
        return lines


def rows(database: Path) -> Rows:
    """The store's rows, read beside the platform (without the times that only say when)."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        users = db.execute("SELECT user_id, tier, token_hash FROM users").fetchall()
        conversations = db.execute(
            "SELECT user_id, conversation_id, title, model, pool, summary, summary_upto_seq, "
            "total_tokens, pinned FROM conversations"
        ).fetchall()
        messages = db.execute(
            "SELECT user_id, conversation_id, seq, message_id, parent_seq, role, content, "
            "tokens, model, finish FROM messages"
        ).fetchall()
    return Rows(frozenset(users), frozenset(conversations), frozenset(messages))


def message_row(snapshot: Rows, user_id: str, message_id: str) -> tuple | None:
    for row in snapshot.messages:
        if row[0] == user_id and row[3] == message_id:
            return row
    return None


@dataclass(frozen=True)
class Call:
    """One fuzzed call, as the checks see it."""

    method: MethodDescriptor
    requests: list[bytes]
    metadata: Metadata
    outcome: Outcome
    before: Rows
    after: Rows

    @property
    def request(self) -> Message | None:
        """The first request as the server read it; None when it does not parse."""
        return parsed(self.method.input_type, self.requests[0])


@dataclass
class Target:
    """One method to fuzz: the channel (whose certificate) it is called on, the values it
    knows to be plausible for some fields, the metadata it sends, and whose rows a call may
    change (None: nobody's)."""

    method: MethodDescriptor
    channel: grpc.Channel
    hints: protofuzz.Hints
    metadata: st.SearchStrategy[Metadata]
    owner: Callable[[Call], str | None]
    examples: int
    checks: list[Callable[[Call, str | None], list[str]]] = field(default_factory=list)


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    statuses: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    calls: int = 0

    def table(self) -> str:
        return "\n".join(
            f"{name:<20} {', '.join(f'{code} {n}' for code, n in sorted(counts.items()))}"
            for name, counts in self.statuses.items()
        )


def problems_of(target: Target, call: Call) -> list[str]:
    outcome, problems = call.outcome, []
    if outcome.code in FAULTS:
        problems.append(f"{outcome.code.name}: {outcome.details[:300]}")
    if outcome.code == grpc.StatusCode.RESOURCE_EXHAUSTED and not (
        outcome.retry_info or REQUEST_TOO_LARGE in outcome.details
    ):
        problems.append(f"RESOURCE_EXHAUSTED without RetryInfo: {outcome.details[:300]}")
    for response in outcome.responses:
        for error in nested(response, ERROR_EVENT):
            if error.code in SERVER_FAULT_CODES:
                problems.append(f"an error event with code {error.code}: {error.message}")
    refused = outcome.code != grpc.StatusCode.OK
    if (refused or call.method.name not in WRITERS) and call.before != call.after:
        problems.append(
            f"{outcome.code.name}, yet the store changed: {call.before.diff(call.after)}"
        )
    owner = target.owner(call)
    if call.before.of_others(owner) != call.after.of_others(owner):
        problems.append(f"rows not of {owner!r} changed: {call.before.diff(call.after)}")
    for extra in target.checks:
        problems += extra(call, owner)
    sent = f"{call.requests[0][:60]!r} ({len(call.requests[0])} bytes)"
    return [f"{call.method.name}: {problem[:300]}; request {sent}" for problem in problems]


def fuzz_method(target: Target, database: Path, findings: Findings) -> None:
    method = target.method
    single = protofuzz.encodings(method.input_type, target.hints)
    if method.client_streaming:
        requests = st.lists(single, min_size=1, max_size=3)
    else:
        requests = single.map(lambda raw: [raw])

    @given(requests=requests, metadata=target.metadata)
    @hypothesis.settings(
        max_examples=target.examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def probe(requests: list[bytes], metadata: Metadata) -> None:
        before = rows(database)
        outcome = call(target.channel, method, requests, metadata, CALL_S)
        done = Call(method, requests, metadata, outcome, before, rows(database))
        findings.calls += 1
        findings.statuses[method.name][outcome.code.name] += 1
        findings.problems.extend(problems_of(target, done))

    probe()


def fuzz(targets: list[Target], database: Path) -> Findings:
    """Every target's examples, one method after the other, one call at a time."""
    findings = Findings()
    for target in targets:
        fuzz_method(target, database, findings)
    return findings
