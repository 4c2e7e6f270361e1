"""Writes this component's objects from the repository's own rule and dashboard files, for
clusters run by the Prometheus Operator and Grafana's dashboard sidecar:

    .venv/bin/python deploy/k8s/components/monitoring/generate.py           # writes them
    .venv/bin/python deploy/k8s/components/monitoring/generate.py --check   # fails if stale

prometheus-rule.yaml: one PrometheusRule holding every group of deploy/prometheus/rules/*.yml;
dashboards.yaml: one ConfigMap per deploy/grafana/dashboards/*.json, labelled for the sidecar.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
DEPLOY = HERE.parents[2]
RULES = DEPLOY / "prometheus" / "rules"
DASHBOARDS = DEPLOY / "grafana" / "dashboards"
# The label Grafana's sidecar (the kube-prometheus-stack chart's default) looks for.
SIDECAR_LABEL = {"grafana_dashboard": "1"}
HEADER = "# Written by generate.py from {source}: edit those, then run it.\n"


def rule_groups() -> list[dict]:
    groups = []
    for path in sorted(RULES.glob("*.yml")):
        groups += yaml.safe_load(path.read_text())["groups"]
    return groups


def prometheus_rule() -> str:
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "chat-platform"}, "spec": {"groups": rule_groups()}}  # fmt: skip
    body = yaml.safe_dump(rule, sort_keys=False, width=1000)
    return HEADER.format(source="deploy/prometheus/rules/*.yml") + body


def dashboards() -> str:
    maps = [{"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": f"dashboard-{path.stem}", "labels": SIDECAR_LABEL},
             "data": {path.name: path.read_text()}}
            for path in sorted(DASHBOARDS.glob("*.json"))]  # fmt: skip
    body = yaml.safe_dump_all(maps, sort_keys=False, width=1000)
    return HEADER.format(source="deploy/grafana/dashboards/*.json") + body


def rendered() -> dict[str, str]:
    return {"prometheus-rule.yaml": prometheus_rule(), "dashboards.yaml": dashboards()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    args = parser.parse_args()
    stale = [name for name, text in rendered().items()
             if not (HERE / name).exists() or (HERE / name).read_text() != text]  # fmt: skip
    if args.check:
        if stale:
            print(f"stale: {', '.join(stale)}; run {Path(__file__).name}", file=sys.stderr)
        return 1 if stale else 0
    for name, text in rendered().items():
        (HERE / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
