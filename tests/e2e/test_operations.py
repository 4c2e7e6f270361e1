"""What operators rely on: health, reflection, metrics, admin auth, on the real processes."""

from __future__ import annotations

import re
import uuid

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from clients.chatctl.platform import LocalPlatform
from tests.sse import read_events

pytestmark = pytest.mark.slow

SERVICES = {
    "scheduler": ("chat.v1.SchedulerService", "scheduler_nodes"),
    "gateway": ("chat.v1.ChatService", "gateway_answers_streaming"),
    "nodeagent-0": ("chat.v1.NodeService", "nodeagent_running_requests"),
}


def child(platform: LocalPlatform, name: str) -> dict:
    return next(c.ready for c in platform.children if c.name == name)


@pytest.mark.parametrize("name", sorted(SERVICES))
async def test_grpc_services_report_health_and_offer_reflection(platform, name) -> None:
    service, _ = SERVICES[name]
    async with platform.channel(child(platform, name)["grpc"]) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for asked in ("", service):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=asked))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        names = [s.name async for r in responses for s in r.list_services_response.service]
        assert service in names and "grpc.health.v1.Health" in names


@pytest.mark.parametrize("name", sorted(SERVICES))
async def test_grpc_services_serve_prometheus_metrics(platform, name) -> None:
    _, metric = SERVICES[name]
    port = child(platform, name)["metrics"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
            assert response.status == 200
            assert f"# TYPE {metric} gauge" in await response.text()


async def gauge(http: aiohttp.ClientSession, port: object, name: str) -> float:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
        found = re.search(rf"^{name} ([0-9.e+]+)$", await response.text(), re.MULTILINE)
    assert found, f"no {name}"
    return float(found.group(1))


async def test_the_bounded_stores_show_their_size(platform) -> None:
    """What a soak reads to tell a store that fills up to its bound from a leak: the runs a
    gateway keeps for retries and resumes, the texts whose token count a node keeps."""
    gateway, node = child(platform, "gateway")["metrics"], child(platform, "nodeagent-0")["metrics"]
    word = uuid.uuid4().hex[:8]
    async with aiohttp.ClientSession() as http:
        texts_before = await gauge(http, node, "nodeagent_token_counts_kept")
        async with http.post(
            f"{platform.edge_url}/v1/conversations/c_{word}/messages",
            json={"content": f"Say hi to {word}."},
            headers={"Authorization": f"Bearer {platform.tokens['plus']}"},
        ) as response:
            assert response.status == 200
            assert (await read_events(response))[-1].event == "done"
        # The message's run is kept after its end; its text's count is kept (a new text).
        assert await gauge(http, gateway, "gateway_runs_kept") >= 1
        assert await gauge(http, node, "nodeagent_token_counts_kept") >= texts_before + 1


async def test_edge_health_readiness_metrics_and_unknown_paths(platform) -> None:
    async with aiohttp.ClientSession() as http:
        for path, status in [("/healthz", 200), ("/readyz", 200), ("/nope", 404)]:
            async with http.get(platform.edge_url + path) as response:
                assert response.status == status
                assert response.content_type == "application/json"
        async with http.get(platform.edge_url + "/metrics") as response:
            text = await response.text()
        assert "edge_responses_total" in text and "edge_open_streams" in text


async def test_the_scheduler_shows_the_node_with_its_load(platform) -> None:
    async with platform.channel(platform.scheduler_address) as channel:
        stub = pb_grpc.SchedulerServiceStub(channel)
        admin = (("authorization", f"Bearer {platform.admin_token}"),)
        nodes = (await stub.ListNodes(pb.ListNodesRequest(), metadata=admin)).nodes
    (node,) = nodes
    assert node.registration.node_id == "local-small-0"
    assert node.registration.pool == "small"
    assert node.registration.kv_capacity_tokens == 4096 * 2
    assert node.load.state == pb.NODE_STATE_READY
    assert 0 < node.load.free_kv_tokens <= node.registration.kv_capacity_tokens


async def test_the_admin_api_refuses_user_tokens_and_anonymous_callers(platform) -> None:
    async with platform.channel(platform.scheduler_address) as channel:
        stub = pb_grpc.SchedulerServiceStub(channel)
        user = (("authorization", f"Bearer {platform.tokens['plus']}"),)
        for metadata, code in [
            (user, grpc.StatusCode.PERMISSION_DENIED),
            ((), grpc.StatusCode.UNAUTHENTICATED),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ListUsers(pb.ListUsersRequest(), metadata=metadata)
            assert caught.value.code() == code


async def test_gateway_metrics_describe_the_answers_it_served(platform) -> None:
    """After one answer, its time to first token, token pace, prefill and finish are in the
    gateway's Prometheus series, labelled by tier and model."""
    from prometheus_client.parser import text_string_to_metric_families

    from clients.chat_client import ChatClient, Done, new_conversation_id

    async with ChatClient(
        platform.gateway_address, platform.tokens["free"], tls=platform.tls("client")
    ) as client:
        events = [e async for e in client.send(new_conversation_id(), "Say hello in French.")]
    assert isinstance(events[-1], Done)
    port = child(platform, "gateway")["metrics"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def total(name: str, **labels: str) -> float:
        return sum(
            value
            for (sample, sample_labels), value in samples.items()
            if sample == name and set(labels.items()) <= set(sample_labels)
        )

    assert total("gateway_ttft_seconds_count", tier="free") >= 1
    assert total("gateway_ttft_seconds_sum", tier="free") > 0
    assert total("gateway_answers_total", tier="free") >= 1
    assert total("gateway_prefill_tokens_count", tier="free") >= 1
    assert total("gateway_expected_queue_wait_seconds_count", tier="free") >= 1
    assert "gateway_limiter_refusals_total" in text and "gateway_failovers_total" in text
