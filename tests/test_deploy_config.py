"""The example deployment config must load into every service's config as it is written."""

from pathlib import Path

import pytest

from edge.main import EdgeConfig
from gateway.main import GatewayConfig
from infra.config import load_config
from nodeagent.main import NodeAgentConfig
from scheduler.main import SchedulerConfig

EXAMPLE = Path(__file__).resolve().parent.parent / "deploy" / "config.example.yaml"


@pytest.mark.parametrize(
    ("section", "kind"),
    [
        ("scheduler", SchedulerConfig),
        ("nodeagent", NodeAgentConfig),
        ("gateway", GatewayConfig),
        ("edge", EdgeConfig),
    ],
)
def test_each_section_of_the_example_loads(section, kind) -> None:
    config = load_config(kind, section, EXAMPLE, env={})
    assert isinstance(config, kind)


def test_the_example_is_the_production_shape() -> None:
    scheduler = load_config(SchedulerConfig, "scheduler", EXAMPLE, env={})
    assert scheduler.membership == "etcd"
    assert not scheduler.etcd_tls.insecure and scheduler.etcd_tls.cert_file.endswith("tls.crt")
    gateway = load_config(GatewayConfig, "gateway", EXAMPLE, env={})
    assert gateway.buckets == "redis" and gateway.store_url.startswith("postgresql://")
    assert gateway.scheduler_addresses == [
        "scheduler-0.scheduler:50051",
        "scheduler-1.scheduler:50051",
    ]
    assert gateway.runs == "redis"
    assert load_config(EdgeConfig, "edge", EXAMPLE, env={}).gateway_addresses == [
        "dns:///gateway:50052"
    ]
    node = load_config(NodeAgentConfig, "nodeagent", EXAMPLE, env={})
    assert node.scheduler_addresses == [
        "scheduler-0.scheduler:50051",
        "scheduler-1.scheduler:50051",
    ]
    for section, kind in [("scheduler", SchedulerConfig), ("nodeagent", NodeAgentConfig),
                          ("gateway", GatewayConfig), ("edge", EdgeConfig)]:  # fmt: skip
        tls = load_config(kind, section, EXAMPLE, env={}).tls
        assert not tls.insecure and tls.ca_file and tls.cert_file and tls.key_file, section
