"""Mutual TLS on real sockets: a scheduler and a node with certificates from a throwaway CA,
called by holders of every kind of certificate, of none, and of another CA's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from chat.v1 import common_pb2
from chat.v1 import node_service_pb2 as node_pb
from chat.v1 import node_service_pb2_grpc as node_grpc
from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from infra.certs import Authority
from infra.config import ConfigError, load_config
from infra.grpcserver import GrpcServer
from infra.tls import Role, TlsConfig
from infra.tls_channel import open_channel
from nodeagent.request_registry import RequestRegistry
from nodeagent.servicer import NodeServicer
from nodeagent.sim import SimEngine
from scheduler.main import SchedulerConfig, serve

ADMIN = "admin-secret-for-tls-tests"
AUTH = (("authorization", f"Bearer {ADMIN}"),)
NODE_ID = "node-a"
CALL_S = 5.0


@dataclass(frozen=True)
class Pki:
    folder: Path
    foreign: Path

    def holder(self, role: str, name: str = "") -> TlsConfig:
        return TlsConfig.in_folder(self.folder, f"{role}-{name}" if name else role)

    def from_another_ca(self) -> TlsConfig:
        """A gateway certificate in every way but its signer; the server is checked right."""
        other = TlsConfig.in_folder(self.foreign, Role.GATEWAY)
        return TlsConfig(str(self.folder / "ca.crt"), other.cert_file, other.key_file)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder, foreign = tmp_path_factory.mktemp("pki"), tmp_path_factory.mktemp("foreign-pki")
    authority = Authority.create()
    authority.save(folder)
    for role in (Role.SCHEDULER, Role.GATEWAY, Role.OPERATOR, Role.CLIENT):
        authority.save_holder(folder, role)
    authority.save_holder(folder, Role.NODE, NODE_ID)
    stranger = Authority.create("another CA")
    stranger.save(foreign)
    stranger.save_holder(foreign, Role.GATEWAY)
    return Pki(folder, foreign)


@pytest.fixture(scope="module")
async def scheduler(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict]:
    folder = tmp_path_factory.mktemp("tls-scheduler")
    ready = folder / "ready.json"
    config = SchedulerConfig(
        grpc_listen="127.0.0.1:0",
        health_listen="127.0.0.1:0",
        tls=pki.holder(Role.SCHEDULER),
        store_url=f"sqlite:///{folder / 'chat.db'}",
        admin_token=ADMIN,
        pools=["small"],
        ready_file=str(ready),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, stop))
    while not ready.exists():  # the ready file is the signal a separate process would give
        assert not task.done(), task
        await asyncio.sleep(0.02)
    yield json.loads(ready.read_text())
    stop.set()
    await task


class CountingSim(SimEngine):
    """The simulated engine, counting what reaches it."""

    def __init__(self) -> None:
        super().__init__(speed=50.0, answer_lengths=(3, 3))
        self.generated: list[str] = []
        self.tokenized: list[list[str]] = []

    def generate(self, request):  # type: ignore[no-untyped-def]
        self.generated.append(request.request_id)
        return super().generate(request)

    async def tokenize(self, texts: list[str]) -> list[int]:
        self.tokenized.append(texts)
        return await super().tokenize(texts)


@dataclass
class Node:
    address: str
    engine: CountingSim


@pytest.fixture(scope="module")
async def node(pki: Pki) -> AsyncIterator[Node]:
    engine = CountingSim()
    await engine.start()
    registry = RequestRegistry(engine, keep_after_finish_s=5, reattach_grace_s=1)
    accepting = asyncio.Event()
    accepting.set()
    server = GrpcServer("127.0.0.1:0", ["chat.v1.NodeService"], tls=pki.holder(Role.NODE, NODE_ID))
    node_grpc.add_NodeServiceServicer_to_server(
        NodeServicer(engine, registry, accepting), server.server
    )
    await server.start()
    await server.set_serving(True)
    yield Node(server.address, engine)
    await server.stop(1)
    await registry.close()
    await engine.stop()


def generate_start(request_id: str) -> node_pb.GenerateRequest:
    return node_pb.GenerateRequest(
        start=node_pb.GenerateStart(
            request_id=request_id,
            max_tokens=3,
            prompt_tokens=5,
            turns=[common_pb2.Turn(role=common_pb2.ROLE_USER, content="Hello there.")],
        )
    )


def dial(address: str, tls: TlsConfig | Path) -> grpc.aio.Channel:
    """A channel as infra.tls makes them, or, given only a CA file, one that checks the server
    by it and has no certificate to show."""
    if isinstance(tls, Path):
        credentials = grpc.ssl_channel_credentials(tls.read_bytes())
        return grpc.aio.secure_channel(address, credentials)
    return open_channel(address, tls)


async def generate(
    address: str, tls: TlsConfig | Path, request_id: str
) -> list[node_pb.GenerateResponse]:
    async with dial(address, tls) as channel:
        # The request goes as an iterator: a refusal may come before a write could.
        call = node_grpc.NodeServiceStub(channel).Generate(
            iter([generate_start(request_id)]), timeout=CALL_S
        )
        return [response async for response in call]


async def refusal(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code()


async def listed_nodes(address: str, pki: Pki) -> set[str]:
    async with open_channel(address, pki.holder(Role.OPERATOR)) as channel:
        reply = await pb_grpc.SchedulerServiceStub(channel).ListNodes(
            pb.ListNodesRequest(), metadata=AUTH, timeout=CALL_S
        )
    return {n.registration.node_id for n in reply.nodes}


def registration(node_id: str) -> pb.ConnectNodeRequest:
    return pb.ConnectNodeRequest(
        registration=pb.NodeRegistration(
            node_id=node_id, address="127.0.0.1:1", model="m", pool="small",
            context_tokens=4096, kv_capacity_tokens=8192,
        )
    )  # fmt: skip


# Who may connect at all -------------------------------------------------------------------------


@pytest.mark.parametrize("caller", ["plaintext", "no certificate", "another CA"])
async def test_a_caller_without_a_certificate_of_this_ca_fails_the_handshake(
    pki: Pki, node: Node, scheduler: dict, caller: str
) -> None:
    tls = {
        "plaintext": TlsConfig(insecure=True),
        "no certificate": pki.folder / "ca.crt",
        "another CA": pki.from_another_ca(),
    }[caller]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await generate(node.address, tls, f"stranger-{caller}")
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    async with dial(scheduler["grpc"], tls) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        code = await refusal(health.Check(health_pb2.HealthCheckRequest(), timeout=CALL_S))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert f"stranger-{caller}" not in node.engine.generated


# The node: Generate and Tokenize are the gateway's ----------------------------------------------


async def test_a_client_certificate_may_not_generate_or_tokenize(pki: Pki, node: Node) -> None:
    client = pki.holder(Role.CLIENT)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await generate(node.address, client, "from-a-client")
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "client certificates" in (caught.value.details() or "")
    async with open_channel(node.address, client) as channel:
        tokenize = node_grpc.NodeServiceStub(channel).Tokenize(
            node_pb.TokenizeRequest(texts=["hi"]), timeout=CALL_S
        )
        assert await refusal(tokenize) == grpc.StatusCode.PERMISSION_DENIED
    assert "from-a-client" not in node.engine.generated
    assert node.engine.tokenized == []


async def test_the_gateway_certificate_generates(pki: Pki, node: Node) -> None:
    responses = await generate(node.address, pki.holder(Role.GATEWAY), "from-the-gateway")
    assert responses[-1].WhichOneof("kind") == "finish"
    assert responses[-1].finish.usage.output_tokens == 3
    assert node.engine.generated[-1] == "from-the-gateway"


async def test_nothing_from_the_refused_callers_reached_the_engine(pki: Pki, node: Node) -> None:
    """Whatever ran before: the engine saw the gateway's request alone."""
    for caller in (pki.holder(Role.CLIENT), pki.holder(Role.OPERATOR), pki.from_another_ca()):
        with pytest.raises(grpc.aio.AioRpcError):
            await generate(node.address, caller, "refused")
    assert "refused" not in node.engine.generated
    assert all(r == "from-the-gateway" for r in node.engine.generated)


# The scheduler: node streams from node certificates of that node ---------------------------------


async def test_a_gateway_certificate_cannot_register_as_a_node(pki: Pki, scheduler: dict) -> None:
    async with open_channel(scheduler["grpc"], pki.holder(Role.GATEWAY)) as channel:
        call = pb_grpc.SchedulerServiceStub(channel).ConnectNode(
            iter([registration("gateway")]), timeout=CALL_S
        )
        assert await call.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "gateway" not in await listed_nodes(scheduler["grpc"], pki)


async def test_a_node_certificate_registers_its_own_node_and_no_other(
    pki: Pki, scheduler: dict
) -> None:
    async with open_channel(scheduler["grpc"], pki.holder(Role.NODE, NODE_ID)) as channel:
        stub = pb_grpc.SchedulerServiceStub(channel)
        impostor = stub.ConnectNode(iter([registration("node-b")]), timeout=CALL_S)
        assert await impostor.code() == grpc.StatusCode.PERMISSION_DENIED
        assert f"{NODE_ID!r} cannot register node 'node-b'" in await impostor.details()

        outbox: asyncio.Queue = asyncio.Queue()
        outbox.put_nowait(registration(NODE_ID))

        async def messages() -> AsyncIterator[pb.ConnectNodeRequest]:
            while True:
                yield await outbox.get()

        itself = stub.ConnectNode(messages())
        try:
            deadline = asyncio.get_running_loop().time() + CALL_S
            while NODE_ID not in await listed_nodes(scheduler["grpc"], pki):
                assert asyncio.get_running_loop().time() < deadline, "the node never registered"
                await asyncio.sleep(0.05)
        finally:
            itself.cancel()
    assert "node-b" not in await listed_nodes(scheduler["grpc"], pki)


async def test_only_the_gateway_picks_and_only_the_operator_administers(
    pki: Pki, scheduler: dict
) -> None:
    pick = pb.PickReplicaRequest(conversation_id="c1", pool="small", prompt_tokens=10)
    for role, code in ((Role.CLIENT, grpc.StatusCode.PERMISSION_DENIED),
                       (Role.GATEWAY, grpc.StatusCode.UNAVAILABLE)):  # fmt: skip
        async with open_channel(scheduler["grpc"], pki.holder(role)) as channel:
            call = pb_grpc.SchedulerServiceStub(channel).PickReplica(pick, timeout=CALL_S)
            # The gateway is let through: the scheduler itself answers that no node is ready.
            assert await refusal(call) == code
    for role, metadata, code in (
        (Role.GATEWAY, AUTH, grpc.StatusCode.PERMISSION_DENIED),
        (Role.OPERATOR, (), grpc.StatusCode.UNAUTHENTICATED),
    ):
        async with open_channel(scheduler["grpc"], pki.holder(role)) as channel:
            old = pb_grpc.SchedulerServiceStub(channel).ListUsers(
                pb.ListUsersRequest(), metadata=metadata, timeout=CALL_S
            )
            assert await refusal(old) == code
            new = pb_grpc.UserServiceStub(channel).ListUsers(
                pb.UserServiceListUsersRequest(), metadata=metadata, timeout=CALL_S
            )
            assert await refusal(new) == code


# Health for probes, and the config ---------------------------------------------------------------


async def test_the_health_port_answers_plaintext_probes_and_nothing_else(scheduler: dict) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{scheduler['health']}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="chat.v1.SchedulerService"), timeout=CALL_S
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        admin = pb_grpc.SchedulerServiceStub(channel).ListNodes(
            pb.ListNodesRequest(), metadata=AUTH, timeout=CALL_S
        )
        assert await refusal(admin) == grpc.StatusCode.UNIMPLEMENTED


def test_a_service_config_must_choose_tls_or_plaintext(pki: Pki) -> None:
    with pytest.raises(ConfigError, match="insecure: true"):
        GrpcServer("127.0.0.1:0", ["chat.v1.NodeService"], tls=TlsConfig())
    with pytest.raises(ConfigError, match="choose one"):
        TlsConfig(ca_file="ca.crt", insecure=True).check()
    env = {
        "CHAT_SCHEDULER_TLS_CA_FILE": "/tls/ca.crt",
        "CHAT_SCHEDULER_TLS_CERT_FILE": "/tls/scheduler.crt",
        "CHAT_SCHEDULER_TLS_KEY_FILE": "/tls/scheduler.key",
    }
    loaded = load_config(SchedulerConfig, "scheduler", env=env)
    assert loaded.tls == TlsConfig("/tls/ca.crt", "/tls/scheduler.crt", "/tls/scheduler.key")
    plain = load_config(SchedulerConfig, "scheduler", env={"CHAT_SCHEDULER_TLS_INSECURE": "yes"})
    assert plain.tls == TlsConfig(insecure=True)
