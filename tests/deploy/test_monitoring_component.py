"""deploy/k8s/components/monitoring: added to an overlay, it gives the Prometheus Operator a
PrometheusRule with exactly the groups of deploy/prometheus/rules and Grafana's sidecar one
ConfigMap per dashboard, each holding the dashboard file as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import yaml

from tests.deploy.manifests import K8S, ROOT, kubectl

COMPONENT = K8S / "components" / "monitoring"
KUBERNETES = "1.30.0"


def render_with_component(tmp_path: Path) -> list[dict]:
    """The prod overlay with the component added and its namespace, as the overlay's own
    kustomization would give them."""
    relative = lambda path: os.path.relpath(path, tmp_path)  # noqa: E731
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "namespace": "chat",
        "resources": [relative(K8S / "overlays" / "prod")],
        "components": [relative(COMPONENT)],
    }))  # fmt: skip
    env = {**os.environ, "KUBECONFIG": os.devnull}
    done = subprocess.run([kubectl(), "kustomize", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_the_component_holds_the_rules_and_dashboards_as_they_are(tmp_path: Path) -> None:
    objects = render_with_component(tmp_path)
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["metadata"]["namespace"] == "chat"
    groups = []
    for path in sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yml")):
        groups += yaml.safe_load(path.read_text())["groups"]
    assert rule["spec"]["groups"] == groups
    boards = {o["metadata"]["name"]: o for o in objects
              if o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"}  # fmt: skip
    files = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
    assert {name: board["data"] for name, board in boards.items()} == {
        f"dashboard-{path.stem}": {path.name: path.read_text()} for path in files
    }
    for board in boards.values():
        assert board["metadata"]["namespace"] == "chat"
        kubernetes_validate.validate(board, KUBERNETES, strict=True)


def test_the_components_files_are_what_its_generator_writes() -> None:
    check = subprocess.run([sys.executable, str(COMPONENT / "generate.py"), "--check"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert check.returncode == 0, check.stderr
