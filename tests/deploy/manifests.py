"""The Kubernetes manifests as the cluster would get them: each overlay rendered by the
machine's kubectl (its built-in kustomize), parsed into plain objects, and helpers to find
what the tests look at."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("dev", "prod")
KUBECTL = "/usr/bin/kubectl"

Obj = dict[str, Any]


def kubectl() -> str:
    # The machine image's kubectl (1.32, kustomize 5.5), not Debian's old kubernetes-client.
    found = KUBECTL if os.access(KUBECTL, os.X_OK) else shutil.which("kubectl")
    if not found:
        pytest.skip("kubectl is not installed: the manifests cannot be rendered here")
    return found


@functools.cache
def rendered_text(overlay: str) -> str:
    done = subprocess.run(
        [kubectl(), "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": os.devnull},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def render(overlay: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(rendered_text(overlay)) if doc]


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def workloads(objects: list[Obj]) -> Iterator[Obj]:
    yield from (o for o in objects if o["kind"] in ("Deployment", "StatefulSet"))


def pod_containers(workload: Obj) -> list[Obj]:
    spec = workload["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def container(workload: Obj, name: str) -> Obj:
    (found,) = [c for c in pod_containers(workload) if c["name"] == name]
    return found
