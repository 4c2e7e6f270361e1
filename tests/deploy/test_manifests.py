"""The Kubernetes manifests (deploy/k8s): each overlay renders with kustomize, every object
validates against the Kubernetes 1.30 schemas, the platform's shape holds (who reaches whom,
what scales on what, what drains how long), and checkov finds nothing not named and justified
in deploy/k8s/checkov-skips.yaml."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.manifests import (
    K8S,
    OVERLAYS,
    ROOT,
    Obj,
    container,
    named,
    pod_containers,
    render,
    rendered_text,
    workloads,
)

KUBERNETES = "1.30.0"
CLUSTER_SCOPED = {"Namespace", "PriorityClass"}
# Custom resources kubernetes-validate has no schema for: cert-manager's, and only those.
CUSTOM_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}
# The platform's own workloads (the dev stores are checked by checkov and the policies test).
PLATFORM = {
    ("StatefulSet", "scheduler"),
    ("Deployment", "gateway"),
    ("Deployment", "edge"),
    ("StatefulSet", "pool-large"),
    ("StatefulSet", "pool-small"),
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_against_kubernetes_1_30(overlay: str) -> None:
    unchecked = set()
    for obj in render(overlay):
        try:
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unchecked.add((obj["apiVersion"], obj["kind"]))
    assert unchecked == CUSTOM_KINDS


def test_the_validator_refuses_what_the_api_server_would() -> None:
    gateway = named(render("prod"), "Deployment", "gateway")
    kubernetes_validate.validate(gateway, KUBERNETES, strict=True)
    misspelt = copy.deepcopy(gateway)
    misspelt["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="resource"):
        kubernetes_validate.validate(misspelt, KUBERNETES, strict=True)
    wrong_type = copy.deepcopy(gateway)
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError, match="two"):
        kubernetes_validate.validate(wrong_type, KUBERNETES, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_everything_lands_in_the_overlays_namespace(overlay: str) -> None:
    namespace = {"dev": "chat-dev", "prod": "chat"}[overlay]
    objects = render(overlay)
    assert named(objects, "Namespace", namespace)["metadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "restricted"
    }
    elsewhere = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in objects
        if o["kind"] not in CLUSTER_SCOPED and o["metadata"].get("namespace") != namespace
    ]
    assert elsewhere == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_gpu_pod_runs_vllm_as_a_sidecar_of_the_nodeagent(overlay: str) -> None:
    objects = render(overlay)
    for pool in ("large", "small"):
        stateful = named(objects, "StatefulSet", f"pool-{pool}")
        vllm, agent = container(stateful, "vllm"), container(stateful, "nodeagent")
        # A native sidecar: started before the nodeagent, stopped after it has drained.
        assert vllm["restartPolicy"] == "Always"
        assert stateful["spec"]["template"]["spec"]["initContainers"] == [vllm]
        env = {e["name"]: e.get("value") for e in agent["env"]}
        args = dict(a.removeprefix("--").partition("=")[::2] for a in vllm["args"])
        gpus = vllm["resources"]["limits"]["nvidia.com/gpu"]
        assert vllm["resources"]["requests"]["nvidia.com/gpu"] == gpus
        assert env["CHAT_NODEAGENT_GPUS"] == gpus == args["tensor-parallel-size"]
        assert env["CHAT_NODEAGENT_MODEL"] == args["served-model-name"]
        assert env["CHAT_NODEAGENT_SLOT_CONTEXT_TOKENS"] == args["max-model-len"]
        assert env["CHAT_NODEAGENT_POOL"] == pool
        assert env["CHAT_NODEAGENT_ADVERTISE_ADDRESS"] == f"$(POD_NAME).pool-{pool}:50061"
        assert vllm["ports"] == [{"name": "engine", "containerPort": 8000}]
        assert "nvidia.com/gpu" not in agent["resources"]["limits"]
        service = named(objects, "Service", f"pool-{pool}")
        assert service["spec"]["clusterIP"] == "None"
        tls = next(v for v in stateful["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
        attributes = tls["csi"]["volumeAttributes"]
        assert attributes["csi.cert-manager.io/common-name"] == "${POD_NAME}"
        assert attributes["csi.cert-manager.io/uri-sans"] == "urn:chat:role:node"
        assert attributes["csi.cert-manager.io/dns-names"].split(",")[0] == (
            f"${{POD_NAME}}.pool-{pool}"
        )


def _config() -> dict[str, Any]:
    return yaml.safe_load((K8S / "base" / "config.yaml").read_text())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_outlives_its_services_shutdown_grace(overlay: str) -> None:
    config = _config()
    objects = render(overlay)
    # The service's own drain, its gRPC server's 2 s stop, and a margin for the engine after.
    for kind, name, section in [
        ("Deployment", "gateway", "gateway"),
        ("Deployment", "edge", "edge"),
        ("StatefulSet", "pool-large", "nodeagent"),
        ("StatefulSet", "pool-small", "nodeagent"),
    ]:
        grace = named(objects, kind, name)["spec"]["template"]["spec"]
        assert grace["terminationGracePeriodSeconds"] >= config[section]["shutdown_grace_s"] + 10


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_requests_limits_and_a_locked_down_context(overlay: str) -> None:
    for workload in workloads(render(overlay)):
        pod = workload["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod_containers(workload):
            where = f"{workload['metadata']['name']}/{c['name']}"
            assert set(c["resources"]) == {"requests", "limits"}, where
            assert {"cpu", "memory"} <= set(c["resources"]["limits"]), where
            assert c["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }, where
            assert "readinessProbe" in c and "livenessProbe" in c, where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_workload_has_one_disruption_budget(overlay: str) -> None:
    objects = render(overlay)
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    covered = {}
    for workload in workloads(objects):
        selector = workload["spec"]["selector"]["matchLabels"]
        matching = [b["metadata"]["name"] for b in budgets
                    if b["spec"]["selector"]["matchLabels"] == selector]  # fmt: skip
        covered[(workload["kind"], workload["metadata"]["name"])] = matching
    platform = {key: value for key, value in covered.items() if key in PLATFORM}
    assert platform == {key: [key[1]] for key in PLATFORM}


def _adapter_metrics() -> dict[str, set[str]]:
    values = yaml.safe_load((K8S / "prometheus-adapter" / "values.yaml").read_text())
    return {
        kind: {rule["name"]["as"] for rule in values["rules"][kind]}
        for kind in ("custom", "external")
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_autoscaler_per_target_each_on_metrics_the_adapter_serves(overlay: str) -> None:
    objects = render(overlay)
    adapter = _adapter_metrics()
    targets = []
    for hpa in (o for o in objects if o["kind"] == "HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        named(objects, ref["kind"], ref["name"])
        targets.append((ref["kind"], ref["name"]))
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Pods":
                assert metric["pods"]["metric"]["name"] in adapter["custom"]
            elif metric["type"] == "External":
                assert metric["external"]["metric"]["name"] in adapter["external"]
            else:
                assert metric["type"] == "Resource"
    assert sorted(targets) == sorted(
        k for k in PLATFORM if k[0] != "StatefulSet" or k[1] != "scheduler"
    )
    pools = {
        hpa["metadata"]["name"]: [
            (m["external"]["metric"]["name"], m["external"]["metric"]["selector"]["matchLabels"])
            for m in hpa["spec"]["metrics"]
        ]
        for hpa in objects
        if hpa["kind"] == "HorizontalPodAutoscaler" and hpa["metadata"]["name"].startswith("pool")
    }
    assert pools == {
        f"pool-{pool}": [
            ("chat_pool_queued_prefill_tokens", {"pool": pool}),
            ("chat_pool_waiting_requests", {"pool": pool}),
        ]
        for pool in ("large", "small")
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_autoscaled_workload_sets_its_replicas(overlay: str) -> None:
    # `kubectl apply -k` (an image rollout) would set the count back, scaling the pool down.
    objects = render(overlay)
    targets = [hpa["spec"]["scaleTargetRef"] for hpa in objects
               if hpa["kind"] == "HorizontalPodAutoscaler"]  # fmt: skip
    setting = [f"{t['kind']}/{t['name']}" for t in targets
               if "replicas" in named(objects, t["kind"], t["name"])["spec"]]  # fmt: skip
    assert len(targets) == 4
    assert setting == []


PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_probe_has_a_timeout_that_fits_its_check(overlay: str) -> None:
    # A check that asks something (HTTP, gRPC, a command) gets at least 3 s, never the
    # kubelet's default 1 s; a TCP connect 2 s; each ends before the next one starts.
    unfit = []
    for workload in workloads(render(overlay)):
        for c in pod_containers(workload):
            for kind in (k for k in PROBES if k in c):
                probe = c[kind]
                least = 2 if "tcpSocket" in probe else 3
                timeout = probe.get("timeoutSeconds", 1)
                if not least <= timeout < probe["periodSeconds"]:
                    unfit.append(f"{workload['metadata']['name']}/{c['name']} {kind}: {timeout}")
    assert unfit == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_control_plane_outranks_the_gpu_pools_which_outrank_batch_work(overlay: str) -> None:
    objects = render(overlay)
    values = {o["metadata"]["name"]: o["value"] for o in objects if o["kind"] == "PriorityClass"}
    assert values["chat-control-plane"] > values["chat-gpu-pool"] > values["chat-batch"]
    assert named(objects, "PriorityClass", "chat-batch")["preemptionPolicy"] == "Never"
    classes = {w["metadata"]["name"]: w["spec"]["template"]["spec"].get("priorityClassName")
               for w in workloads(objects)}  # fmt: skip
    control = {"scheduler", "gateway", "edge"} | (
        {"etcd", "redis", "postgres"} if overlay == "dev" else set()
    )
    assert classes == {
        **dict.fromkeys(control, "chat-control-plane"),
        "pool-large": "chat-gpu-pool",
        "pool-small": "chat-gpu-pool",
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_replicated_workload_spreads_across_zones(overlay: str) -> None:
    objects = render(overlay)
    spread = {}
    for kind, name in sorted(PLATFORM):
        workload = named(objects, kind, name)
        labels = workload["spec"]["template"]["metadata"]["labels"]
        spread[name] = [
            (s["maxSkew"], s["whenUnsatisfiable"])
            for s in workload["spec"]["template"]["spec"]["topologySpreadConstraints"]
            if s["topologyKey"] == "topology.kubernetes.io/zone"
            and s["labelSelector"]["matchLabels"] == workload["spec"]["selector"]["matchLabels"]
            and all(labels.get(k) == v for k, v in s["labelSelector"]["matchLabels"].items())
        ]
    assert spread == {name: [(1, "ScheduleAnyway")] for _, name in PLATFORM}


def _service_sections() -> dict[str, type]:
    from edge.main import EdgeConfig
    from gateway.main import GatewayConfig
    from nodeagent.main import NodeAgentConfig
    from scheduler.main import SchedulerConfig

    return {"scheduler": SchedulerConfig, "nodeagent": NodeAgentConfig,
            "gateway": GatewayConfig, "edge": EdgeConfig}  # fmt: skip


def _env_names(kind: type, prefix: str) -> set[str]:
    import dataclasses

    names = set()
    for f in dataclasses.fields(kind):
        if dataclasses.is_dataclass(f.type) or f.name == "tls":
            continue
        names.add(prefix + f.name.upper())
    return names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_services_config_loads_with_the_pods_environment(overlay: str, tmp_path: Path) -> None:
    from infra.config import load_config

    config_file = tmp_path / "config.yaml"
    config_map = named(render(overlay), "ConfigMap", _config_map_name(overlay))
    config_file.write_text(config_map["data"]["config.yaml"])
    sections = _service_sections()
    loaded = {}
    for workload in workloads(render(overlay)):
        for c in pod_containers(workload):
            command = c.get("command", [])
            if command[:2] != ["python", "-m"]:
                continue
            section = command[2].removesuffix(".main")
            assert command[3:] == ["--config", "/etc/chat/config/config.yaml"]
            env = {e["name"]: e.get("value", "from-a-secret") for e in c.get("env", [])}
            env = {k: v.replace("$(POD_NAME)", "pool-x-0") for k, v in env.items()}
            chat_vars = {k for k in env if k.startswith("CHAT_")}
            unknown = chat_vars - _env_names(sections[section], f"CHAT_{section.upper()}_")
            assert unknown == set(), f"{workload['metadata']['name']}: {unknown}"
            loaded[workload["metadata"]["name"]] = load_config(
                sections[section], section, config_file, env=env
            )
    assert loaded["scheduler"].membership == "etcd"
    assert loaded["gateway"].buckets == loaded["gateway"].runs == "redis"
    assert loaded["pool-large"].vllm_url == "http://127.0.0.1:8000"
    assert loaded["pool-large"].node_id == "pool-x-0"
    assert loaded["edge"].gateway_addresses == ["dns:///gateway:50052"]
    for name, config in loaded.items():
        assert not config.tls.insecure and config.tls.cert_file == "/etc/chat/tls/tls.crt", name


def _config_map_name(overlay: str) -> str:
    maps = [o["metadata"]["name"] for o in render(overlay) if o["kind"] == "ConfigMap"]
    (name,) = [n for n in maps if n.startswith("chat-config-")]
    return name


def _secret_refs(objects: list[Obj]) -> set[str]:
    found = set(re.findall(r"secretName: (\S+)", yaml.safe_dump(objects)))
    for workload in workloads(objects):
        for c in pod_containers(workload):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    found.add(ref["name"])
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_secret_read_is_made_by_cert_manager_or_the_secrets_script(
    overlay: str, tmp_path: Path
) -> None:
    from infra.certs import Authority

    objects = render(overlay)
    by_cert_manager = {o["spec"]["secretName"] for o in objects if o["kind"] == "Certificate"}
    args = ["--dev"] if overlay == "dev" else []
    # The external etcd's CA, in prod: a real key pair, as kubectl checks it.
    Authority.create("etcd CA").save(tmp_path)
    env = {**os.environ, "CHAT_STORE_URL": "postgresql://u:p@h/db", "CHAT_REDIS_URL": "redis://h",
           "HF_TOKEN": "hf_x", "KUBECONFIG": os.devnull,
           "CHAT_ETCD_CA_CERT": str(tmp_path / "ca.crt"),
           "CHAT_ETCD_CA_KEY": str(tmp_path / "ca.key")}  # fmt: skip
    printed = subprocess.run(
        [str(ROOT / "scripts" / "k8s_secrets.sh"), *args, "--print", "ns"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    ).stdout  # fmt: skip
    by_script = {s["metadata"]["name"] for s in yaml.safe_load_all(printed) if s}
    assert by_cert_manager.isdisjoint(by_script)
    assert _secret_refs(objects) == by_cert_manager | by_script


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_ingress_serves_the_edge_over_tls_and_leaves_streams_open(overlay: str) -> None:
    objects = render(overlay)
    ingress = named(objects, "Ingress", "edge")
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"] == {"name": "edge", "port": {"name": "http"}}
    assert named(objects, "Service", "edge")["spec"]["ports"][0]["name"] == "http"
    (tls,) = ingress["spec"]["tls"]
    assert tls["hosts"] == [rule["host"]]
    (certificate,) = [o for o in objects if o["kind"] == "Certificate"
                      and o["spec"]["secretName"] == tls["secretName"]]  # fmt: skip
    assert certificate["spec"]["dnsNames"] == [rule["host"]]
    assert certificate["spec"]["issuerRef"]["kind"] == "ClusterIssuer"
    nginx = {k.removeprefix("nginx.ingress.kubernetes.io/"): v
             for k, v in ingress["metadata"]["annotations"].items()}  # fmt: skip
    # An answer streams for minutes; the keep-alives come every keepalive_s.
    assert nginx["proxy-buffering"] == "off"
    keepalive = _config()["edge"]["keepalive_s"]
    assert int(nginx["proxy-read-timeout"]) >= 60 * keepalive
    assert int(nginx["proxy-send-timeout"]) >= 60 * keepalive
    assert nginx["proxy-body-size"] == f"{_config()['edge']['max_body_bytes'] // 1024}k"


# Who may open a connection to which port, by NetworkPolicy: the platform's components in the
# namespace, Prometheus's namespace, an operators' namespace and any other namespace.
SOURCES = ("scheduler", "nodeagent", "gateway", "edge", "etcd", "redis", "postgres",
           "monitoring", "operators", "elsewhere")  # fmt: skip
NAMESPACE_LABELS = {
    "monitoring": {"kubernetes.io/metadata.name": "monitoring"},
    "operators": {"kubernetes.io/metadata.name": "ops", "chat.platform/operators": "true"},
    "elsewhere": {"kubernetes.io/metadata.name": "default"},
}
REACH = {
    ("scheduler", 50051): {"nodeagent", "gateway", "operators"},
    ("scheduler", 9101): {"monitoring"},
    ("nodeagent", 50061): {"gateway"},
    ("nodeagent", 9102): {"monitoring"},
    ("nodeagent", 8000): {"monitoring"},
    ("gateway", 50052): {"edge", "gateway", "operators"},
    ("gateway", 9103): {"monitoring"},
    ("edge", 8080): set(SOURCES),
    ("edge", 9104): {"monitoring"},
}
DEV_STORES_REACH = {
    ("etcd", 2379): {"scheduler"},
    ("etcd", 2381): {"monitoring"},
    ("redis", 6379): {"gateway"},
    ("postgres", 5432): {"scheduler", "gateway"},
}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer_admits(peer: dict[str, Any], source: str) -> bool:
    in_namespace = source not in NAMESPACE_LABELS
    if "namespaceSelector" in peer:
        if in_namespace:
            return False
        pods = peer.get("podSelector", {})
        return _selects(peer["namespaceSelector"], NAMESPACE_LABELS[source]) and not pods
    return in_namespace and _selects(peer["podSelector"], {"app.kubernetes.io/name": source})


def _admitted(policies: list[Obj], target: str, port: int, source: str) -> bool:
    labels = {"app.kubernetes.io/name": target}
    selecting = [p for p in policies if _selects(p["spec"]["podSelector"], labels)]
    assert selecting, f"no policy selects {target}"
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            ports = {p["port"] for p in rule.get("ports", [])}
            if ports and port not in ports:
                continue
            peers = rule.get("from")
            if peers is None or any(_peer_admits(peer, source) for peer in peers):
                return True
    return False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_admit_exactly_the_intended_callers(overlay: str) -> None:
    policies = [o for o in render(overlay) if o["kind"] == "NetworkPolicy"]
    assert all(p["spec"]["policyTypes"] == ["Ingress"] for p in policies)
    expected = {**REACH, **(DEV_STORES_REACH if overlay == "dev" else {})}
    found = {
        (target, port): {s for s in SOURCES if _admitted(policies, target, port, s)}
        for target, port in expected
    }
    assert found == expected


CHECKOV = ROOT / ".checkov" / "venv" / "bin" / "checkov"


def _checkov() -> Path:
    if not CHECKOV.exists():
        subprocess.run([str(ROOT / "scripts" / "install_checkov.sh")], check=False, timeout=600)
    if not CHECKOV.exists():
        pytest.skip("checkov could not be installed into .checkov/ (scripts/install_checkov.sh)")
    return CHECKOV


def _skips() -> list[dict[str, Any]]:
    return yaml.safe_load((K8S / "checkov-skips.yaml").read_text())


def test_checkov_finds_nothing_but_the_named_and_justified_skips(tmp_path: Path) -> None:
    files = []
    for overlay in OVERLAYS:
        files += ["-f", str(tmp_path / f"{overlay}.yaml")]
        (tmp_path / f"{overlay}.yaml").write_text(rendered_text(overlay))
    done = subprocess.run(
        [str(_checkov()), *files, "--framework", "kubernetes", "--quiet", "--compact",
         "--skip-download", "--output", "json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    reports = json.loads(done.stdout)
    report = reports[0] if isinstance(reports, list) else reports
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["passed"] > 500
    # "StatefulSet.chat-dev.etcd" -> ("CKV_...", "StatefulSet.etcd"), for every overlay.
    findings = set()
    for failed in report["results"]["failed_checks"]:
        kind, _, name = failed["resource"].split(".", 2)
        findings.add((failed["check_id"], f"{kind}.{name}"))
    skips = _skips()
    for skip in skips:
        assert len(skip["reason"]) > 80, skip["check"]

    def skipped(check: str, resource: str) -> bool:
        return any(s["check"] == check and ("*" in s["resources"] or resource in s["resources"])
                   for s in skips)  # fmt: skip

    assert sorted(f for f in findings if not skipped(*f)) == []
    stale = [s["check"] for s in skips
             if not any(f[0] == s["check"] for f in findings)]  # fmt: skip
    assert stale == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_certificate_names_every_host_its_callers_dial(overlay: str) -> None:
    objects = render(overlay)
    namespace = {"dev": "chat-dev", "prod": "chat"}[overlay]
    config = _config()

    def names(certificate: str) -> set[str]:
        return set(named(objects, "Certificate", certificate)["spec"]["dnsNames"])

    dialled = {a.rsplit(":", 1)[0] for a in config["gateway"]["scheduler_addresses"]}
    assert dialled == {a.rsplit(":", 1)[0] for a in config["nodeagent"]["scheduler_addresses"]}
    in_namespace = {f"{host}.{namespace}" for host in dialled}
    # chatctl through a port-forward, and from an operators' namespace.
    assert dialled | in_namespace | {"localhost"} <= names("chat-tls-scheduler")
    assert {"gateway", f"gateway.{namespace}", "localhost"} <= names("chat-tls-gateway")
    (edge_dials,) = config["edge"]["gateway_addresses"]
    assert edge_dials == "dns:///gateway:50052"
    for certificate in ("chat-tls-scheduler", "chat-tls-gateway", "chat-tls-edge",
                        "chat-tls-operator"):  # fmt: skip
        spec = named(objects, "Certificate", certificate)["spec"]
        role = certificate.removeprefix("chat-tls-")
        assert spec["uris"] == [f"urn:chat:role:{role}"] and spec["commonName"] == role
        assert spec["issuerRef"] == {"name": "chat-ca", "kind": "Issuer"}
