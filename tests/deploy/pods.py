"""A container of the rendered manifests as a plain process on this machine: the command and
the environment Kubernetes would give it, and each volume it mounts made as a folder under the
pod's own root, every path into a mount (in the command and in the mounted config) moved onto
that folder. A path the config names but the pod does not mount stays as it is, and fails."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.manifests import Obj, container

# A Secret or a CSI volume's files (tls.crt, tls.key, ca.crt).
Files = Mapping[str, bytes]


@dataclass(frozen=True)
class Sources:
    """What fills the volumes and the variables the cluster would: the ConfigMaps' data, each
    Secret's files, the per-pod certificate cert-manager's CSI driver mints (by pod name)."""

    config_maps: Mapping[str, Files]
    secrets: Mapping[str, Files]
    csi: Callable[[str], Files]


@dataclass(frozen=True)
class Pod:
    name: str
    root: Path
    argv: list[str]
    env: dict[str, str]


def _rebase(text: str, mounts: Mapping[str, Path]) -> str:
    """Every absolute path under a mount moved onto its folder, in one pass (a folder may lie
    under another mount's path, /tmp), the longest mount path first."""
    paths = "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True))
    return re.sub(rf"(?<![\w./-])({paths})/", lambda m: f"{mounts[m.group(1)]}/", text)


def _volume_files(volume: Obj, pod_name: str, sources: Sources) -> Files:
    if "configMap" in volume:
        return sources.config_maps[volume["configMap"]["name"]]
    if "secret" in volume:
        return sources.secrets[volume["secret"]["secretName"]]
    if "csi" in volume:
        return sources.csi(pod_name)
    assert "emptyDir" in volume, volume
    return {}


def _variables(
    c: Obj, pod_name: str, secret_values: Mapping[tuple[str, str], str]
) -> dict[str, str]:
    """The container's env as the kubelet sets it: $(NAME) of an earlier variable expanded."""
    env: dict[str, str] = {}
    for variable in c.get("env", []):
        if "value" in variable:
            value = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], variable["value"])
        elif "fieldRef" in variable["valueFrom"]:
            field = variable["valueFrom"]["fieldRef"]["fieldPath"]
            # The pods run on this machine, each on its own loopback port.
            assert field in ("metadata.name", "status.podIP"), variable
            value = pod_name if field == "metadata.name" else "127.0.0.1"
        else:
            ref = variable["valueFrom"]["secretKeyRef"]
            value = secret_values[(ref["name"], ref["key"])]
        env[variable["name"]] = value
    return env


def materialize(
    workload: Obj,
    name: str,
    pod_name: str,
    root: Path,
    sources: Sources,
    secret_values: Mapping[tuple[str, str], str],
) -> Pod:
    """Container `name` of one pod of `workload`, its volumes written under root."""
    c = container(workload, name)
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: root / m["mountPath"].lstrip("/") for m in c["volumeMounts"]}
    for mount in c["volumeMounts"]:
        folder = mounts[mount["mountPath"]]
        folder.mkdir(parents=True, exist_ok=True)
        for file, data in _volume_files(volumes[mount["name"]], pod_name, sources).items():
            (folder / file).write_bytes(_rebase(data.decode(), mounts).encode())
    argv = [_rebase(arg, mounts) for arg in [*c.get("command", []), *c.get("args", [])]]
    return Pod(pod_name, root, argv, _variables(c, pod_name, secret_values))
