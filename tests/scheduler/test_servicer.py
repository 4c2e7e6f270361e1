"""The scheduler over real gRPC: node streams, picking, draining, silence, admin calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import descriptor_pb2

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from infra.config import ConfigError
from infra.tls import TlsConfig
from scheduler.main import SchedulerConfig, serve

ADMIN = "admin-secret-for-tests"
AUTH = (("authorization", f"Bearer {ADMIN}"),)


@pytest.fixture(scope="module")
async def channel(tmp_path_factory) -> AsyncIterator[grpc.aio.Channel]:
    folder = tmp_path_factory.mktemp("scheduler")
    ready = folder / "ready.json"
    config = SchedulerConfig(
        grpc_listen="127.0.0.1:0",
        # The servicer's own rules; who may call what over TLS is tests/infra/test_tls.py's.
        tls=TlsConfig(insecure=True),
        store_url=f"sqlite:///{folder / 'chat.db'}",
        admin_token=ADMIN,
        report_timeout_s=1.0,
        ready_file=str(ready),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, stop))
    for _ in range(500):  # the ready file is the only signal a separate process could give
        if ready.exists():
            break
        await asyncio.sleep(0.02)
    address = json.loads(ready.read_text())["grpc"]
    async with grpc.aio.insecure_channel(address) as opened:
        yield opened
    stop.set()
    await task


@pytest.fixture
def scheduler(channel: grpc.aio.Channel) -> pb_grpc.SchedulerServiceStub:
    return pb_grpc.SchedulerServiceStub(channel)


@pytest.fixture
def users(channel: grpc.aio.Channel) -> pb_grpc.UserServiceStub:
    return pb_grpc.UserServiceStub(channel)


class FakeNode:
    """A node's side of ConnectNode: registration, then load reports while it is 'alive'."""

    def __init__(
        self,
        stub,
        node_id: str,
        pool: str = "large",
        max_running_requests: int = 0,
        load: pb.LoadReport | None = None,
    ) -> None:
        self.node_id = node_id
        self.load = load or pb.LoadReport(free_kv_tokens=90_000, state=pb.NODE_STATE_READY)
        self.reporting = True
        self.commands: list[int] = []
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._outbox.put_nowait(
            pb.ConnectNodeRequest(
                registration=pb.NodeRegistration(
                    node_id=node_id,
                    address=f"{node_id}.local:1",
                    model="m",
                    pool=pool,
                    context_tokens=4096,
                    kv_capacity_tokens=100_000,
                    max_running_requests=max_running_requests,
                )
            )
        )
        self.call = stub.ConnectNode(self._requests())
        self._tasks = [asyncio.create_task(self._report()), asyncio.create_task(self._listen())]

    async def _requests(self):
        while True:
            yield await self._outbox.get()

    async def _report(self) -> None:
        while True:
            if self.reporting:
                await self._outbox.put(pb.ConnectNodeRequest(load=self.load))
            await asyncio.sleep(0.1)

    async def _listen(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            async for response in self.call:
                self.commands.append(response.command)

    async def close(self) -> None:
        self.call.cancel()
        for task in self._tasks:
            task.cancel()


async def states(stub) -> dict[str, int]:
    nodes = (await stub.ListNodes(pb.ListNodesRequest(), metadata=AUTH)).nodes
    return {n.registration.node_id: n.load.state for n in nodes}


async def last_reports(stub) -> dict[str, int]:
    """Each node's last report time as the scheduler keeps it (nanoseconds)."""
    nodes = (await stub.ListNodes(pb.ListNodesRequest(), metadata=AUTH)).nodes
    return {n.registration.node_id: n.last_report_at.ToNanoseconds() for n in nodes}


async def eventually(check, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_picks_stick_to_a_conversation_and_avoid_drained_and_silent_nodes(scheduler) -> None:
    nodes = [FakeNode(scheduler, f"n{i}") for i in range(3)]
    try:

        async def all_ready() -> bool:
            found = await states(scheduler)
            return all(found.get(n.node_id) == pb.NODE_STATE_READY for n in nodes)

        await eventually(all_ready)
        ask = pb.PickReplicaRequest(
            conversation_id="conv-1",
            pool="large",
            prompt_tokens=100,
            reusable_prefix_tokens=80,
            tier=common_pb2.TIER_FREE,
        )
        first = await scheduler.PickReplica(ask)
        assert first.reason == pb.PICK_REASON_AFFINITY
        assert first.address == f"{first.node_id}.local:1"
        assert (await scheduler.PickReplica(ask)).node_id == first.node_id

        await scheduler.DrainNode(pb.DrainNodeRequest(node_id=first.node_id), metadata=AUTH)
        favourite = next(n for n in nodes if n.node_id == first.node_id)

        async def told_to_drain() -> bool:
            return pb.NODE_COMMAND_DRAIN in favourite.commands

        await eventually(told_to_drain)
        assert (await states(scheduler))[first.node_id] == pb.NODE_STATE_DRAINING
        assert (await scheduler.PickReplica(ask)).node_id != first.node_id
        await scheduler.UndrainNode(pb.UndrainNodeRequest(node_id=first.node_id), metadata=AUTH)
        assert (await scheduler.PickReplica(ask)).node_id == first.node_id

        favourite.reporting = False  # silent, stream still open

        async def dead() -> bool:
            return (await states(scheduler))[first.node_id] == pb.NODE_STATE_DEAD

        await eventually(dead)
        assert (await scheduler.PickReplica(ask)).node_id != first.node_id
        favourite.reporting = True

        async def back() -> bool:
            return (await states(scheduler))[first.node_id] == pb.NODE_STATE_READY

        await eventually(back)
        await favourite.close()

        async def gone() -> bool:
            return first.node_id not in await states(scheduler)

        await eventually(gone)
    finally:
        for node in nodes:
            await node.close()


async def test_a_first_turn_is_placed_cold_and_a_nodes_measured_speeds_are_kept(scheduler) -> None:
    measured = pb.LoadReport(
        free_kv_tokens=90_000,
        state=pb.NODE_STATE_READY,
        prefill_tokens_per_second=120.5,
        decode_step_seconds=0.031,
        answer_seconds=2.5,
    )
    node = FakeNode(scheduler, "n0", load=measured)
    try:

        async def reported() -> bool:
            nodes = (await scheduler.ListNodes(pb.ListNodesRequest(), metadata=AUTH)).nodes
            return bool(nodes) and nodes[0].load.state == pb.NODE_STATE_READY

        await eventually(reported)
        listed = (await scheduler.ListNodes(pb.ListNodesRequest(), metadata=AUTH)).nodes[0].load
        assert (
            listed.prefill_tokens_per_second,
            listed.decode_step_seconds,
            listed.answer_seconds,
        ) == (120.5, 0.031, 2.5)
        ask = pb.PickReplicaRequest(conversation_id="new", pool="large", prompt_tokens=241)
        first = await scheduler.PickReplica(ask)
        # Cold, and its 241 tokens are read at the node's own 120.5 tokens a second.
        assert (first.node_id, first.reason, first.expected_wait_seconds) == (
            "n0",
            pb.PICK_REASON_COLD,
            2.0,
        )
    finally:
        await node.close()


async def test_an_answer_moved_off_failed_replicas_goes_to_the_shortest_queue(scheduler) -> None:
    queues = {"m0": 0, "m1": 5_000, "m2": 9_000}
    nodes = [
        FakeNode(scheduler, node_id, pool="small",
                 load=pb.LoadReport(free_kv_tokens=90_000, queued_prefill_tokens=queued,
                                    state=pb.NODE_STATE_READY))
        for node_id, queued in queues.items()
    ]  # fmt: skip
    try:

        async def all_ready() -> bool:
            found = await states(scheduler)
            return all(found.get(n) == pb.NODE_STATE_READY for n in queues)

        await eventually(all_ready)
        ask = pb.PickReplicaRequest(conversation_id="conv-moved", pool="small", prompt_tokens=3_000)
        ask.exclude_node_ids.append("m0")
        moved = await scheduler.PickReplica(ask)
        # Its cache died with the failed replica: it goes where a prompt starts soonest.
        assert (moved.node_id, moved.reason) == ("m1", pb.PICK_REASON_MOVED)
        ask.exclude_node_ids.append("m1")
        assert (await scheduler.PickReplica(ask)).node_id == "m2"
        ask.exclude_node_ids.append("m2")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await scheduler.PickReplica(ask)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        for node in nodes:
            await node.close()


async def test_empty_and_unknown_pools_and_bad_pick_requests(scheduler) -> None:
    for ask, code, reason in [
        (
            pb.PickReplicaRequest(conversation_id="c", pool="small"),
            grpc.StatusCode.UNAVAILABLE,
            "no replica of pool 'small'",
        ),
        (
            pb.PickReplicaRequest(conversation_id="c", pool="huge"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "unknown pool 'huge'",
        ),
        (pb.PickReplicaRequest(pool="large"), grpc.StatusCode.INVALID_ARGUMENT, "conversation_id"),
        (
            pb.PickReplicaRequest(conversation_id="x" * 200, pool="large"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "conversation_id",
        ),
        (pb.PickReplicaRequest(conversation_id="c"), grpc.StatusCode.INVALID_ARGUMENT, "pool"),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await scheduler.PickReplica(ask, timeout=5)
        assert caught.value.code() == code
        assert reason in caught.value.details()


async def test_a_node_in_an_unknown_pool_is_refused(scheduler) -> None:
    async def registration():
        yield pb.ConnectNodeRequest(
            registration=pb.NodeRegistration(node_id="x", address="x:1", pool="gpu-9000", model="m")
        )

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in scheduler.ConnectNode(registration()):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_node_stream_must_start_with_its_registration(scheduler) -> None:
    async def only_load():
        yield pb.ConnectNodeRequest(load=pb.LoadReport())

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in scheduler.ConnectNode(only_load()):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_admin_user_calls(users, scheduler) -> None:
    made = await users.CreateUser(
        pb.UserServiceCreateUserRequest(user_id="ops-test", tier=common_pb2.TIER_FREE),
        metadata=AUTH,
    )
    assert made.token.startswith("u_") and len(made.token) > 40
    listed = (await users.ListUsers(pb.UserServiceListUsersRequest(), metadata=AUTH)).users
    assert [u.user_id for u in listed] == ["ops-test"] and listed[0].has_token
    upgraded = await users.SetUserTier(
        pb.UserServiceSetUserTierRequest(user_id="ops-test", tier=common_pb2.TIER_PLUS),
        metadata=AUTH,
    )
    assert upgraded.user.tier == common_pb2.TIER_PLUS
    rotated = await users.RotateUserToken(
        pb.UserServiceRotateUserTokenRequest(user_id="ops-test"), metadata=AUTH
    )
    assert rotated.token != made.token
    await users.RevokeUserTokens(
        pb.UserServiceRevokeUserTokensRequest(user_id="ops-test"), metadata=AUTH
    )
    listed = (await users.ListUsers(pb.UserServiceListUsersRequest(), metadata=AUTH)).users
    assert not listed[0].has_token
    for call, request, code in [
        (
            users.CreateUser,
            pb.UserServiceCreateUserRequest(user_id="ops-test", tier=1),
            grpc.StatusCode.ALREADY_EXISTS,
        ),
        (
            users.CreateUser,
            pb.UserServiceCreateUserRequest(user_id="x"),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            users.SetUserTier,
            pb.UserServiceSetUserTierRequest(user_id="nobody", tier=1),
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            users.RotateUserToken,
            pb.UserServiceRotateUserTokenRequest(user_id="nobody"),
            grpc.StatusCode.NOT_FOUND,
        ),
        (users.ListUsers, pb.UserServiceListUsersRequest(), grpc.StatusCode.PERMISSION_DENIED),
        (scheduler.DrainNode, pb.DrainNodeRequest(node_id="nobody"), grpc.StatusCode.NOT_FOUND),
        (scheduler.PinLadder, pb.PinLadderRequest(rung=9), grpc.StatusCode.INVALID_ARGUMENT),
    ]:
        metadata = (("authorization", "Bearer not-the-admin"),) if call is users.ListUsers else AUTH
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(request, metadata=metadata)
        assert caught.value.code() == code, request
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await users.ListUsers(pb.UserServiceListUsersRequest())
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_clients_from_before_user_service_still_manage_users(scheduler, users) -> None:
    made = await scheduler.CreateUser(
        pb.CreateUserRequest(user_id="old-client", tier=common_pb2.TIER_FREE, pinned=True),
        metadata=AUTH,
    )
    assert made.user.user_id == "old-client" and made.token.startswith("u_")
    listed = (await scheduler.ListUsers(pb.ListUsersRequest(), metadata=AUTH)).users
    assert "old-client" in [u.user_id for u in listed]
    upgraded = await scheduler.SetUserTier(
        pb.SetUserTierRequest(user_id="old-client", tier=common_pb2.TIER_PLUS), metadata=AUTH
    )
    assert upgraded.user.tier == common_pb2.TIER_PLUS
    rotated = await scheduler.RotateUserToken(
        pb.RotateUserTokenRequest(user_id="old-client"), metadata=AUTH
    )
    assert rotated.token.startswith("u_") and rotated.token != made.token
    await scheduler.RevokeUserTokens(
        pb.RevokeUserTokensRequest(user_id="old-client"), metadata=AUTH
    )
    seen = (await users.ListUsers(pb.UserServiceListUsersRequest(), metadata=AUTH)).users
    assert [u.has_token for u in seen if u.user_id == "old-client"] == [False]
    for call, request, code in [
        (scheduler.CreateUser, pb.CreateUserRequest(user_id="x"), grpc.StatusCode.INVALID_ARGUMENT),
        (
            scheduler.SetUserTier,
            pb.SetUserTierRequest(user_id="nobody", tier=1),
            grpc.StatusCode.NOT_FOUND,
        ),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(request, metadata=AUTH)
        assert caught.value.code() == code, request
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await scheduler.ListUsers(pb.ListUsersRequest())
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_the_old_user_calls_messages_are_the_new_ones_field_for_field() -> None:
    """What lets the scheduler answer an old call by reading its bytes as the new message."""
    old = pb.DESCRIPTOR.services_by_name["SchedulerService"].methods_by_name
    new = pb.DESCRIPTOR.services_by_name["UserService"].methods_by_name
    # Calls added after UserService are its own: no old client knows them.
    assert set(new) - set(old) == {"DeleteUser", "ExportUserMemories", "DeleteUserMemories"}
    for name, method in new.items():
        if name not in old:
            continue
        for kind in ("input_type", "output_type"):
            fields = []
            for message in (getattr(method, kind), getattr(old[name], kind)):
                shape = descriptor_pb2.DescriptorProto()
                message.CopyToProto(shape)
                fields.append(list(shape.field))
            assert fields[0] == fields[1], (name, kind)


async def test_an_operator_can_pin_the_ladder_and_picks_carry_the_rung(scheduler) -> None:
    node = FakeNode(scheduler, "pin-node", pool="small")
    try:

        async def ready() -> bool:
            return (await states(scheduler)).get("pin-node") == pb.NODE_STATE_READY

        await eventually(ready)
        pinned = await scheduler.PinLadder(pb.PinLadderRequest(rung=2), metadata=AUTH)
        assert (pinned.rung, pinned.pinned) == (2, True)
        ask = pb.PickReplicaRequest(conversation_id="c", pool="small")
        assert (await scheduler.PickReplica(ask)).ladder_rung == 2
        ladder = await scheduler.GetLadder(pb.GetLadderRequest(), metadata=AUTH)
        assert ladder.rung == 2 and ladder.pinned and ladder.leading
        assert ladder.history[-1].reason == "pinned at 2 by an operator"
        unpinned = await scheduler.PinLadder(pb.PinLadderRequest(), metadata=AUTH)
        assert (unpinned.rung, unpinned.pinned) == (0, False)
        assert (await scheduler.PickReplica(ask)).ladder_rung == 0
    finally:
        await node.close()


async def test_the_expected_wait_counts_a_full_batch_and_the_picks_since_the_report(
    scheduler,
) -> None:
    # 8 places, all taken, 3 waiting: a new request waits for 4 places to open. Answers hold
    # theirs about 13 s (answer_hold_s), so places open every 13 / 8 s; Plus takes 40 % of them.
    full = pb.LoadReport(
        free_kv_tokens=50_000,
        kv_usage=0.5,
        running_requests=8,
        waiting_requests=3,
        state=pb.NODE_STATE_READY,
    )
    roomy = pb.LoadReport(
        free_kv_tokens=50_000,
        kv_usage=0.5,
        running_requests=2,
        waiting_requests=1,
        queued_prefill_tokens=1_000,
        state=pb.NODE_STATE_READY,
    )
    nodes = [
        FakeNode(scheduler, "full-node", pool="small", max_running_requests=8, load=full),
        FakeNode(scheduler, "roomy-node", pool="small", max_running_requests=8, load=roomy),
    ]
    try:

        async def ready() -> bool:
            seen = await states(scheduler)
            return all(seen.get(n.node_id) == pb.NODE_STATE_READY for n in nodes)

        await eventually(ready)

        async def wait_on(node_id: str, tier: int) -> float:
            for i in range(200):  # a conversation whose favourite is that node
                # A long cached prefix: never worth leaving the favourite for the other's queue.
                ask = pb.PickReplicaRequest(
                    conversation_id=f"w{i}", pool="small", tier=tier, reusable_prefix_tokens=9_999
                )
                picked = await scheduler.PickReplica(ask)
                if picked.node_id == node_id:
                    return picked.expected_wait_seconds
            raise AssertionError(f"no conversation of 200 favours {node_id}")

        # Room in the batch: only its prompt queue counts (1,000 tokens at 2,000 a second).
        assert await wait_on("roomy-node", common_pb2.TIER_FREE) == pytest.approx(0.5)
        # A report from each node after those picks: it replaces what they were charged.
        picked_at = await last_reports(scheduler)

        async def reported_since() -> bool:
            now = await last_reports(scheduler)
            return all(now[name] > picked_at[name] for name in picked_at)

        await eventually(reported_since)
        for node in nodes:
            node.reporting = False  # alive for report_timeout_s more: picks pile up unreported
        plus = await wait_on("full-node", common_pb2.TIER_PLUS)
        free = await wait_on("full-node", common_pb2.TIER_FREE)
        again = await wait_on("full-node", common_pb2.TIER_FREE)
        # 4 openings are 6.5 s on average; 9 times in 10 they come within about 10.7 s.
        assert 6.5 < plus < 13
        assert free > plus / 0.6  # Free sees 60 % of the openings, and one more pick is ahead
        assert again > free  # each pick since the report is one more request ahead
    finally:
        for node in nodes:
            await node.close()


async def test_a_held_rollout_call_is_answered_when_the_rollout_changes(scheduler) -> None:
    loop = asyncio.get_running_loop()
    revision = (await scheduler.GetRollout(pb.GetRolloutRequest())).revision
    # Nothing changes: held for its wait, then answered with the revision alone (with a wait,
    # a known revision of 0 is a revision, not "send me everything").
    started = loop.time()
    unchanged = await scheduler.GetRollout(
        pb.GetRolloutRequest(known_revision=revision, wait_ms=300)
    )
    assert loop.time() - started >= 0.3
    assert unchanged.revision == revision and not unchanged.HasField("rollout")
    held = asyncio.ensure_future(
        scheduler.GetRollout(pb.GetRolloutRequest(known_revision=revision, wait_ms=20_000))
    )
    version = pb.ModelVersion(name="held-call-v2", system_prompt="Be terse.", temperature=0.3)
    await scheduler.CreateVersion(pb.CreateVersionRequest(version=version), metadata=AUTH)
    # Answered by the change, long before its 20 s wait.
    changed = await asyncio.wait_for(held, timeout=5)
    assert changed.revision != revision
    assert version in changed.rollout.versions


async def test_a_held_rollout_call_answers_before_its_own_deadline(scheduler) -> None:
    # A caller that asks to wait longer than its deadline gets "unchanged", not
    # DEADLINE_EXCEEDED: the hold ends a margin before the deadline.
    loop = asyncio.get_running_loop()
    revision = (await scheduler.GetRollout(pb.GetRolloutRequest())).revision
    started = loop.time()
    unchanged = await scheduler.GetRollout(
        pb.GetRolloutRequest(known_revision=revision, wait_ms=30_000), timeout=1.5
    )
    assert loop.time() - started < 1.5
    assert unchanged.revision == revision and not unchanged.HasField("rollout")


@pytest.mark.parametrize("prefix", ["/chat/regions/a", "chat/regions/a/", ""])
async def test_an_etcd_prefix_that_would_take_in_its_neighbours_keys_is_refused(prefix) -> None:
    # '/chat/regions/a' is a prefix of '/chat/regions/ab/...': another region's nodes.
    config = SchedulerConfig(membership="etcd", etcd_prefix=prefix)
    with pytest.raises(ConfigError, match="etcd_prefix must start and end with '/'"):
        await serve(config, asyncio.Event())


async def test_the_pick_stream_answers_each_pick_by_its_id_as_a_pick_call_would(
    scheduler,
) -> None:
    nodes = [FakeNode(scheduler, f"s{i}", pool="small") for i in range(2)]
    call = scheduler.PickReplicas()
    try:

        async def all_ready() -> bool:
            found = await states(scheduler)
            return all(found.get(n.node_id) == pb.NODE_STATE_READY for n in nodes)

        await eventually(all_ready)
        asks = {
            pick_id: pb.PickReplicaRequest(conversation_id=f"conv-stream-{pick_id}", pool="small",
                                           prompt_tokens=100, tier=common_pb2.TIER_PLUS)
            for pick_id in (7, 3, 100, 42)
        }  # fmt: skip
        refused = {
            5: pb.PickReplicaRequest(conversation_id="c", pool="huge"),
            6: pb.PickReplicaRequest(conversation_id="", pool="small"),
            9: pb.PickReplicaRequest(conversation_id="c", pool="small",
                                     exclude_node_ids=["s0", "s1"]),
        }  # fmt: skip
        for pick_id, ask in [*asks.items(), *refused.items()]:
            await call.write(pb.PickReplicasRequest(pick_id=pick_id, pick=ask))
        answers = [await call.read() for _ in range(len(asks) + len(refused))]
        # Answered in the order asked, each carrying its own id back.
        assert [a.pick_id for a in answers] == [*asks, *refused]
        by_id = {a.pick_id: a for a in answers}
        for pick_id, ask in asks.items():
            streamed = by_id[pick_id]
            assert streamed.refusal == pb.PICK_REFUSAL_UNSPECIFIED and not streamed.detail
            # The conversation's cache is where the stream's pick sent it: a call finds it there.
            called = await scheduler.PickReplica(ask)
            assert streamed.pick.reason == pb.PICK_REASON_COLD
            assert (streamed.pick.node_id, streamed.pick.address, streamed.pick.model) == (
                called.node_id, called.address, called.model
            )  # fmt: skip
            assert streamed.pick.context_tokens == called.context_tokens == 4096
        told = [(by_id[i].refusal, by_id[i].detail, by_id[i].HasField("pick")) for i in refused]
        assert told == [
            (pb.PICK_REFUSAL_INVALID_ARGUMENT,
             "unknown pool 'huge'; this fleet's pools are large, small", False),
            (pb.PICK_REFUSAL_INVALID_ARGUMENT, "conversation_id must be 1..128 characters", False),
            (pb.PICK_REFUSAL_NO_REPLICA,
             "no replica of pool 'small' is ready; retry shortly", False),
        ]  # fmt: skip
        await call.done_writing()
        assert await call.read() is grpc.aio.EOF
        assert (await call.code()) == grpc.StatusCode.OK
    finally:
        call.cancel()
        for node in nodes:
            await node.close()
