"""etcd over mutual TLS in the manifests: the schedulers show etcd a certificate of etcd's own
CA (cert-manager's chat-etcd-client, read through scheduler.etcd_tls), and the dev overlay's
etcd serves only over TLS and takes only clients with such a certificate."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.deploy.manifests import OVERLAYS, Obj, container, named, render

ETCD_CA = {"name": "chat-etcd-ca", "kind": "Issuer"}


def secret_mounts(workload: Obj, name: str) -> dict[str, str]:
    """The container's mounted Secrets: secret name -> where it is mounted."""
    pod = workload["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    return {secrets[m["name"]]: m["mountPath"]
            for m in container(workload, name)["volumeMounts"] if m["name"] in secrets}  # fmt: skip


def scheduler_config(objects: list[Obj]) -> dict[str, Any]:
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"
                     and o["metadata"]["name"].startswith("chat-config-")]  # fmt: skip
    return yaml.safe_load(config_map["data"]["config.yaml"])["scheduler"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_schedulers_show_etcd_a_certificate_of_etcds_ca(overlay: str) -> None:
    objects = render(overlay)
    at = secret_mounts(named(objects, "StatefulSet", "scheduler"), "scheduler")["chat-etcd-client"]
    assert scheduler_config(objects)["etcd_tls"] == {
        "ca_file": f"{at}/ca.crt", "cert_file": f"{at}/tls.crt", "key_file": f"{at}/tls.key"
    }  # fmt: skip
    client = named(objects, "Certificate", "chat-etcd-client")["spec"]
    assert client["issuerRef"] == ETCD_CA and client["usages"][0] == "client auth"
    assert named(objects, "Issuer", "chat-etcd-ca")["spec"] == {
        "ca": {"secretName": "chat-etcd-ca"}
    }
    # Only the schedulers hold it.
    holders = [o["metadata"]["name"] for o in objects if o["kind"] in ("Deployment", "StatefulSet")
               and "chat-etcd-client" in yaml.safe_dump(o)]  # fmt: skip
    assert holders == ["scheduler"]


def test_the_dev_etcd_serves_only_mutual_tls_to_its_clients_and_peers() -> None:
    objects = render("dev")
    etcd = named(objects, "StatefulSet", "etcd")
    at = secret_mounts(etcd, "etcd")["chat-tls-etcd"]
    command = container(etcd, "etcd")["command"]
    flags = dict(arg.split("=", 1) for arg in command[1:])
    assert {k: v for k, v in flags.items() if k.endswith(("-file", "-auth"))} == {
        "--cert-file": f"{at}/tls.crt", "--key-file": f"{at}/tls.key",
        "--client-cert-auth": "true", "--trusted-ca-file": f"{at}/ca.crt",
        "--peer-cert-file": f"{at}/tls.crt", "--peer-key-file": f"{at}/tls.key",
        "--peer-client-cert-auth": "true", "--peer-trusted-ca-file": f"{at}/ca.crt",
    }  # fmt: skip
    urls = [v for k, v in flags.items() if k.endswith("-urls") and "metrics" not in k]
    assert len(urls) == 4 and all(u.startswith("https://") for u in urls), urls
    assert flags["--initial-cluster"] == "etcd-0=https://127.0.0.1:2380"
    # Probes and Prometheus on the plaintext metrics port, which serves no keys.
    assert flags["--listen-metrics-urls"] == "http://0.0.0.0:2381"
    probes = [container(etcd, "etcd")[p]["httpGet"] for p in ("readinessProbe", "livenessProbe")]
    assert probes == [{"path": "/health", "port": "metrics"}] * 2
    assert etcd["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "2381"
    server = named(objects, "Certificate", "chat-tls-etcd")["spec"]
    assert server["issuerRef"] == ETCD_CA
    dialled = scheduler_config(objects)["etcd_endpoint"].rsplit(":", 1)[0]
    assert dialled in server["dnsNames"] and "127.0.0.1" in server["ipAddresses"]
    ca = named(objects, "Certificate", "chat-etcd-ca")["spec"]
    assert ca["isCA"] is True and ca["secretName"] == "chat-etcd-ca"
