"""Hypothesis fuzzes the gRPC API from its protobuf descriptors, against a running platform with
mutual TLS: every ChatService method as a user (with ids of their own, of another user, random
ones; huge fields; enum numbers no enum names; bytes that do not parse; no token or a wrong
one), and every SchedulerService method with the certificate of the role that calls it (the
operator's admin calls, the gateway's pick, a node's stream). Each call ends OK or with a
specific status, never UNKNOWN or INTERNAL; a refused call leaves the store as it was; no call
touches another user's rows; an answer a user saw is the answer stored.

The requests come from tests/protofuzz.py, so a field or method added to proto/ is fuzzed too;
tests/grpcfuzz.py makes the calls and the checks. The examples are derandomized: a failure
replays the same way on every run. Run with -s to see the statuses each method answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import string
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from hypothesis import strategies as st

from chat.v1 import chat_service_pb2 as chat_pb
from chat.v1 import chat_service_pb2_grpc as chat_grpc
from chat.v1 import common_pb2 as common_pb
from chat.v1 import node_service_pb2 as node_pb
from chat.v1 import scheduler_service_pb2 as scheduler_pb
from clients.chat_client import AdminClient, ChatClient, ClientError, Done, Meta, answer_text
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from infra.access import allowed_roles
from infra.tls import Role
from tests import protofuzz
from tests.grpcfuzz import (
    CALL_S,
    Call,
    Findings,
    Metadata,
    Target,
    fuzz,
    message_row,
    method_path,
    rows,
    sync_channel,
)

pytestmark = pytest.mark.slow

CHAT = chat_pb.DESCRIPTOR.services_by_name["ChatService"]
SCHEDULER = scheduler_pb.DESCRIPTOR.services_by_name["SchedulerService"]
NODE = node_pb.DESCRIPTOR.services_by_name["NodeService"]
# Calls per method. Most are unary and answered in milliseconds; an accepted send streams an
# answer of at most 8 tokens. Sends and completions need several valid fields at once to get
# past validation, so they get more.
EXAMPLES = 100
EXAMPLES_OF = {"SendMessage": 250, "Complete": 200}
NODE_ID = "local-small-0"
POOL = "small"
# Printable ASCII without the line breaks gRPC metadata cannot carry.
HEADER_TEXT = st.text(alphabet=string.ascii_letters + string.digits + "-._~+/= ", max_size=40)
VALID_IDS = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
ODD_IDS = st.sampled_from(
    ["", " ", "a" * 64, "a" * 65, "../x", "c\x00", "\u00e9t\u00e9", "x.answer"]
)
# Ids too long for any store or echo, though not for gRPC: they reach the servicers.
HUGE_IDS = protofuzz.huge_texts((1_000, 40_000, 300_000))
# The certificate each service's fuzzing uses: the first role the access table lets call it.
ROLE_ORDER = (Role.CLIENT, Role.OPERATOR, Role.GATEWAY, Role.NODE)


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


@dataclass(frozen=True)
class Ids:
    """A conversation and its first message, of one user."""

    user_id: str
    conversation_id: str
    message_id: str

    def all(self) -> list[str]:
        answer = self.message_id + ".answer"
        return [self.user_id, self.conversation_id, self.message_id, answer]


@dataclass
class Fuzzed:
    platform: LocalPlatform
    database: Path
    free: Ids
    plus: Ids


async def first_exchange(platform: LocalPlatform, tier: str, stop: bool) -> Ids:
    """A conversation with one answered message; `stop` ends the answer after its meta."""
    conversation_id, message_id = f"c_{tier}_{uuid.uuid4().hex[:8]}", f"m_{uuid.uuid4().hex[:8]}"
    tls = platform.tls(Role.CLIENT)
    async with ChatClient(platform.gateway_address, platform.tokens[tier], tls=tls) as chat:
        async for event in chat.send(conversation_id, "Hello there.", message_id=message_id):
            if isinstance(event, Meta) and stop:
                assert await chat.stop(message_id)
            if isinstance(event, Done):
                break
    return Ids(f"dev-{tier}", conversation_id, message_id)


@pytest.fixture(scope="module")
async def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fuzzed]:
    state = tmp_path_factory.mktemp("grpc-fuzz")
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=state,
            edge_listen="127.0.0.1:0",
            pool=POOL,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                # Answers of 5 s at the simulated speed: a Plus answer is still streaming
                # while another user tries it; Free's are cut at 8 tokens, so the fuzzer's
                # accepted sends are quick.
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "500,500",
                "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "8",
                "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e9",
                "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e9",
                # Compaction writes a summary in the background after an answer: a later
                # call would see the store change under it. The fuzzer probes the API.
                "CHAT_GATEWAY_COMPACTION": "false",
            },
        )
    )
    try:
        await platform.start()
        free = await first_exchange(platform, "free", stop=False)
        plus = await first_exchange(platform, "plus", stop=True)
        yield Fuzzed(platform, state / "chat.db", free, plus)
    finally:
        await platform.stop()


def channel_for(
    platform: LocalPlatform, method: MethodDescriptor, stack: ExitStack
) -> grpc.Channel:
    """A channel with the certificate of the role that calls `method` (a node's: its own id)."""
    roles = allowed_roles(method_path(method))
    role = next(r for r in ROLE_ORDER if r in roles)
    service = method.containing_service
    if service is CHAT:
        address = platform.gateway_address
    elif service is NODE:
        (address,) = platform.node_addresses()
    else:
        address = platform.scheduler_address
    tls = platform.tls(role, NODE_ID if role == Role.NODE else "")
    return stack.enter_context(sync_channel(address, tls))


def examples_of(method: MethodDescriptor) -> int:
    return EXAMPLES_OF.get(method.name, EXAMPLES)


# ChatService ------------------------------------------------------------------------------------


def chat_hints(own: Ids, other: Ids) -> protofuzz.Hints:
    """Ids (`..._id` fields) that are mostly the caller's own or new and valid, else another
    user's, odd, huge or any text; a parent mostly none or the caller's; turns mostly the
    user's (a completion must end with one); an affinity key mostly none or valid."""
    own_messages = st.sampled_from([own.message_id, own.message_id + ".answer"])
    others = st.sampled_from(other.all())
    fresh = protofuzz.weighted(
        (3, VALID_IDS), (1, st.sampled_from([own.conversation_id, own.message_id]))
    )
    ids = protofuzz.weighted(
        (6, fresh), (1, others), (1, ODD_IDS), (1, protofuzz.default_strings()), (1, HUGE_IDS)
    )
    parents = protofuzz.weighted((3, st.just("")), (2, own_messages), (1, others), (1, ODD_IDS))
    keys = protofuzz.weighted((2, st.just("")), (2, VALID_IDS), (1, protofuzz.default_strings()))

    def hints(field: FieldDescriptor) -> st.SearchStrategy[object] | None:
        if field.name == "role":
            user = st.just(common_pb.ROLE_USER)
            return protofuzz.weighted((3, user), (1, protofuzz.enums(field.enum_type)))
        if field.type != FieldDescriptor.TYPE_STRING:
            return None
        if field.name == "parent_id":
            return parents
        if field.name.endswith("_id"):
            return ids
        if field.name == "session_key":
            return keys
        return None

    return hints


def stored_as_seen(call: Call, user_id: str | None) -> list[str]:
    """An accepted send whose answer a model or the input check wrote: the question and the
    answer are stored, each exactly as sent and as seen."""
    if call.method.name != "SendMessage" or call.outcome.code != grpc.StatusCode.OK:
        return []
    events = [e for r in call.outcome.responses for e in (r.event, *r.more)]
    request = call.request
    if request is None or user_id is None or not events or not events[-1].HasField("done"):
        return []
    if events[0].meta.model == "busy":
        return []  # composed when no pool could answer: nothing stored, by design
    seen = "".join(e.delta.text for e in events if e.HasField("delta"))
    question = message_row(call.after, user_id, request.message_id)
    answer = message_row(call.after, user_id, request.message_id + ".answer")
    if question is None or answer is None:
        return [f"answered, but stored question {question!r} and answer {answer!r}"]
    problems = []
    if question[6] != request.content:
        problems.append(f"the stored question is not the one sent: {question[6][:80]!r}")
    if answer[6] != seen:
        problems.append(f"stored answer {answer[6]!r} but the user saw {seen!r}")
    return problems


def chat_targets(fuzzed: Fuzzed, stack: ExitStack) -> list[Target]:
    platform = fuzzed.platform
    free = platform.tokens["free"]
    metadata = protofuzz.weighted(
        (16, st.just(bearer(free))),
        (1, st.sampled_from([(), (("authorization", "Basic Zm9vOmJhcg=="),)])),
        (1, st.just(bearer(platform.admin_token))),
        (1, HEADER_TEXT.map(bearer)),
    )
    users = {bearer(free): fuzzed.free.user_id}
    hints = chat_hints(fuzzed.free, fuzzed.plus)
    return [
        Target(
            m,
            channel_for(platform, m, stack),
            hints,
            metadata,
            owner=lambda call: users.get(call.metadata),
            examples=examples_of(m),
            checks=[stored_as_seen],
        )
        for m in CHAT.methods
    ]


async def test_the_chat_api_answers_every_request_with_a_specific_status(fuzzed: Fuzzed) -> None:
    with ExitStack() as stack:
        targets = chat_targets(fuzzed, stack)
        findings = await asyncio.to_thread(fuzz, targets, fuzzed.database)
    report(findings, "ChatService")
    assert findings.problems == []
    assert findings.statuses["SendMessage"]["OK"] >= 10  # some sends got through to answers
    assert all(child.process.returncode is None for child in fuzzed.platform.children)


def report(findings: Findings, service: str) -> None:
    print(f"\n{service}: statuses of {findings.calls} calls\n{findings.table()}")
    for problem in findings.problems[:40]:
        print(problem[:400])


# SchedulerService -------------------------------------------------------------------------------


def admin_hints(users: list[str]) -> protofuzz.Hints:
    """Users the test made (never the dev users the chat test calls as), the real node (but
    not in a registration: that would stand in for the node), the real pool, or anything."""
    user_ids = protofuzz.weighted(
        (3, st.sampled_from(users)),
        (3, VALID_IDS),
        (1, ODD_IDS),
        (1, protofuzz.default_strings()),
        (1, HUGE_IDS),
    )
    node_ids = protofuzz.weighted(
        (2, st.just(NODE_ID)), (3, VALID_IDS), (1, ODD_IDS), (1, HUGE_IDS)
    )
    pools = protofuzz.weighted((3, st.just(POOL)), (1, protofuzz.default_strings()))

    def hints(field: FieldDescriptor) -> st.SearchStrategy[object] | None:
        if field.type != FieldDescriptor.TYPE_STRING:
            return None
        if field.name == "user_id":
            return user_ids
        if field.name in ("node_id", "exclude_node_ids"):
            registering = field.containing_type.name == "NodeRegistration"
            return VALID_IDS if registering else node_ids
        if field.name == "pool":
            return pools
        return None

    return hints


def named_user(call: Call) -> str | None:
    """The user an admin call names: the only one whose row it may change."""
    request = call.request
    if request is None or "user_id" not in request.DESCRIPTOR.fields_by_name:
        return None
    return request.user_id  # type: ignore[attr-defined]


def scheduler_targets(fuzzed: Fuzzed, stack: ExitStack, users: list[str]) -> list[Target]:
    platform = fuzzed.platform
    metadata = protofuzz.weighted(
        (16, st.just(bearer(platform.admin_token))),
        (1, st.just(())),
        (1, st.just(bearer(platform.tokens["free"]))),
        (1, HEADER_TEXT.map(bearer)),
    )
    hints = admin_hints(users)
    return [
        Target(
            m,
            channel_for(platform, m, stack),
            hints,
            metadata,
            owner=named_user,
            examples=examples_of(m),
        )
        for m in SCHEDULER.methods
    ]


async def restored(platform: LocalPlatform) -> None:
    """What the admin fuzzing may have changed beside the store, as it was: the node back in
    service (and reporting ready), the ladder moving on its own."""
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls(Role.OPERATOR)
    ) as admin:
        await admin.undrain(NODE_ID)
        await admin.pin(None)
        deadline = time.monotonic() + 30
        # The node says so in its next load report (every 250 ms).
        while (nodes := await admin.nodes()) and [n.state for n in nodes] != ["ready"]:
            assert time.monotonic() < deadline, f"the node is not ready again: {nodes}"
            await asyncio.sleep(0.05)


async def test_the_scheduler_api_answers_every_request_with_a_specific_status(
    fuzzed: Fuzzed,
) -> None:
    platform = fuzzed.platform
    users = [f"fuzz-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls(Role.OPERATOR)
    ) as admin:
        for user in users:
            await admin.create_user(user, "free")
    try:
        with ExitStack() as stack:
            targets = scheduler_targets(fuzzed, stack, users)
            findings = await asyncio.to_thread(fuzz, targets, fuzzed.database)
    finally:
        await restored(platform)
    report(findings, "SchedulerService")
    assert findings.problems == []
    assert findings.statuses["CreateUser"]["OK"] >= 5
    assert all(child.process.returncode is None for child in platform.children)


# What the fuzzer found, and what it checks in bulk, told once plainly -----------------------------


async def test_an_id_too_long_to_quote_gets_its_own_status_not_resource_exhausted(
    fuzzed: Fuzzed,
) -> None:
    """The reason quoting a 300,000-character id once made trailers no client accepts: the
    caller read RESOURCE_EXHAUSTED (HTTP 429 at the edge) for a user that does not exist."""
    platform, huge = fuzzed.platform, "x" * 300_000
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls(Role.OPERATOR)
    ) as admin:
        with pytest.raises(ClientError) as rotating:
            await admin.rotate_token(huge)
        with pytest.raises(ClientError) as draining:
            await admin.drain(huge)
    async with platform.channel(platform.gateway_address, Role.CLIENT) as channel:
        reading = chat_grpc.ChatServiceStub(channel).GetMessage(
            chat_pb.GetMessageRequest(message_id=huge),
            metadata=bearer(platform.tokens["free"]),
            timeout=CALL_S,
        )
        with pytest.raises(grpc.aio.AioRpcError) as read:
            await reading
    assert (rotating.value.code, draining.value.code) == ("NOT_FOUND", "NOT_FOUND")
    assert read.value.code() == grpc.StatusCode.NOT_FOUND
    assert rotating.value.message.startswith("no user 'xxxxxxxx")
    assert read.value.details().startswith("no message 'xxxxxxxx")
    assert read.value.details().endswith("\u2026") and len(read.value.details()) <= 1024


async def refusal_of(call: grpc.aio.Call) -> grpc.StatusCode:
    """The status a call ended with, its answers (none are expected) read to the end."""
    with contextlib.suppress(grpc.aio.AioRpcError):
        if isinstance(call, grpc.aio.UnaryStreamCall):
            async for _ in call:
                pass
        else:
            await call
    return await call.code()


def tries_on(
    stub: chat_grpc.ChatServiceStub, token: str, conversation_id: str, message_id: str
) -> dict[str, grpc.aio.Call]:
    """Every call that names a conversation or a message, as the holder of `token`."""
    kw = {"metadata": bearer(token), "timeout": CALL_S}
    answer_id = message_id + ".answer"
    return {
        "GetConversation": stub.GetConversation(
            chat_pb.GetConversationRequest(conversation_id=conversation_id), **kw
        ),
        "ListMessages": stub.ListMessages(
            chat_pb.ListMessagesRequest(conversation_id=conversation_id), **kw
        ),
        "GetMessage": stub.GetMessage(chat_pb.GetMessageRequest(message_id=message_id), **kw),
        "GetMessage answer": stub.GetMessage(chat_pb.GetMessageRequest(message_id=answer_id), **kw),
        "AttachMessage": stub.AttachMessage(
            chat_pb.AttachMessageRequest(message_id=message_id), **kw
        ),
        "StopMessage": stub.StopMessage(chat_pb.StopMessageRequest(message_id=message_id), **kw),
        "DeleteConversation": stub.DeleteConversation(
            chat_pb.DeleteConversationRequest(conversation_id=conversation_id), **kw
        ),
        # An answer to that message, in a conversation of the caller's with the same id.
        "SendMessage": stub.SendMessage(
            chat_pb.SendMessageRequest(
                conversation_id=conversation_id,
                message_id="m_reply",
                parent_id=message_id,
                content="And then?",
            ),
            **kw,
        ),
    }


async def test_no_user_reads_resumes_stops_or_deletes_another_users_answer_as_it_streams(
    fuzzed: Fuzzed,
) -> None:
    platform = fuzzed.platform
    conversation_id, message_id = f"c_{uuid.uuid4().hex[:8]}", f"m_{uuid.uuid4().hex[:8]}"
    answer_id = message_id + ".answer"
    before = rows(fuzzed.database)
    events: list[object] = []
    tls = platform.tls(Role.CLIENT)
    async with (
        ChatClient(platform.gateway_address, platform.tokens["plus"], tls=tls) as plus,
        platform.channel(platform.gateway_address, Role.CLIENT) as channel,
    ):
        stub = chat_grpc.ChatServiceStub(channel)
        async for event in plus.send(conversation_id, "Tell me a long story.", message_id):
            events.append(event)
            if len(events) != 2:  # meta, then the first text: the answer is streaming
                continue
            tries = tries_on(stub, platform.tokens["free"], conversation_id, message_id)
            codes = {name: await refusal_of(call) for name, call in tries.items()}
            # Plus's answer was still streaming after all of them: not stored yet.
            own = stub.GetMessage(
                chat_pb.GetMessageRequest(message_id=answer_id),
                metadata=bearer(platform.tokens["plus"]),
                timeout=CALL_S,
            )
            still_streaming = await refusal_of(own)
    assert codes == dict.fromkeys(tries, grpc.StatusCode.NOT_FOUND)
    assert still_streaming == grpc.StatusCode.NOT_FOUND
    done = events[-1]
    assert isinstance(done, Done) and done.finish == "stop"  # Free's stop stopped nothing
    after = rows(fuzzed.database)
    assert after.of_others("dev-plus") == before.of_others("dev-plus")
    stored = message_row(after, "dev-plus", answer_id)
    assert stored is not None and stored[6] == answer_text(events)  # type: ignore[arg-type]


async def test_a_page_token_the_api_never_gave_out_is_invalid_even_if_it_parses(
    fuzzed: Fuzzed,
) -> None:
    """ "nan" and "inf" parse as floats: they answered OK, with no page or the first one."""
    platform = fuzzed.platform
    async with platform.channel(platform.gateway_address, Role.CLIENT) as channel:
        stub = chat_grpc.ChatServiceStub(channel)
        listing = {"metadata": bearer(platform.tokens["free"]), "timeout": CALL_S}
        first = await stub.ListConversations(
            chat_pb.ListConversationsRequest(page_size=1), **listing
        )
        after_first = await stub.ListConversations(
            chat_pb.ListConversationsRequest(page_size=1, page_token=first.next_page_token),
            **listing,
        )
        codes = {
            token: await refusal_of(
                stub.ListConversations(
                    chat_pb.ListConversationsRequest(page_token=token), **listing
                )
            )
            for token in ("nan", "inf", "-inf", "1e999", "soon")
        }
    assert first.next_page_token and float(first.next_page_token) > 0
    assert [c.conversation_id for c in after_first.conversations] != [
        c.conversation_id for c in first.conversations
    ]
    assert codes == dict.fromkeys(codes, grpc.StatusCode.INVALID_ARGUMENT)


# NodeService ------------------------------------------------------------------------------------


def node_hints(field: FieldDescriptor) -> st.SearchStrategy[object] | None:
    """Short answers (any other number is past the node's window, or zero: refused at once),
    request ids that repeat (a start under a running id attaches to it), user turns."""
    if field.name == "max_tokens":
        return protofuzz.weighted((3, st.integers(1, 16)), (1, protofuzz.scalars(field)))
    if field.name == "request_id":
        repeated = st.sampled_from(["r-fuzz-a", "r-fuzz-b"])
        return protofuzz.weighted((2, repeated), (2, VALID_IDS), (1, ODD_IDS), (1, HUGE_IDS))
    if field.name == "role":
        user = st.just(common_pb.ROLE_USER)
        return protofuzz.weighted((3, user), (1, protofuzz.enums(field.enum_type)))
    return None


async def test_the_node_api_answers_every_request_with_a_specific_status(fuzzed: Fuzzed) -> None:
    """The gateway's calls to a node, as the gateway's certificate: what a gateway with a bug
    (or a caller holding its certificate) could send. A node stores nothing."""
    no_metadata = st.just(())
    with ExitStack() as stack:
        targets = [
            Target(
                m,
                channel_for(fuzzed.platform, m, stack),
                node_hints,
                no_metadata,
                owner=lambda call: None,
                examples=examples_of(m),
            )
            for m in NODE.methods
        ]
        findings = await asyncio.to_thread(fuzz, targets, fuzzed.database)
    report(findings, "NodeService")
    assert findings.problems == []
    assert findings.statuses["Generate"]["OK"] >= 5
    assert all(child.process.returncode is None for child in fuzzed.platform.children)
