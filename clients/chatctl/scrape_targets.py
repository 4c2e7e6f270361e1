"""Where Prometheus finds a local platform's metrics: a file_sd target file in the state dir.

`chatctl up` writes it beside platform.json; deploy/prometheus/prometheus-local.yml reads it,
so a Prometheus started on that config scrapes every service of the platform running now,
with the same job names as in a cluster (scheduler, nodeagent, gateway, edge, etcd).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SCRAPE_TARGETS_FILE = "scrape-targets.json"


def metrics_address(module: str, ready: Mapping[str, Any]) -> str:
    """host:port of a service's /metrics, from what its ready file says."""
    if module == "edge.main" and "metrics" not in ready:
        # The edge serves /metrics on its HTTP port unless given a metrics_listen of its own.
        return urlsplit(str(ready["http"])).netloc
    if module == "edge.main":
        return f"{urlsplit(str(ready['http'])).hostname}:{ready['metrics']}"
    host = str(ready["grpc"]).rsplit(":", 1)[0]
    return f"{host}:{ready['metrics']}"


def scrape_targets(
    services: Iterable[tuple[str, Mapping[str, Any]]], etcd_endpoint: str = ""
) -> list[dict[str, Any]]:
    """One target group per job; services are (module, ready file) pairs."""
    jobs: dict[str, list[str]] = {}
    for module, ready in services:
        jobs.setdefault(module.removesuffix(".main"), []).append(metrics_address(module, ready))
    if etcd_endpoint:
        # etcd serves its own /metrics on the client port.
        jobs["etcd"] = [etcd_endpoint]
    return [
        {"targets": sorted(targets), "labels": {"job": job}}
        for job, targets in sorted(jobs.items())
    ]


def write_scrape_targets(state_dir: Path, groups: list[dict[str, Any]]) -> None:
    # Renamed into place: Prometheus re-reads the file when it changes and must never see half.
    partial = state_dir / (SCRAPE_TARGETS_FILE + ".partial")
    partial.write_text(json.dumps(groups, indent=2) + "\n")
    partial.replace(state_dir / SCRAPE_TARGETS_FILE)
