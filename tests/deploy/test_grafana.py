"""deploy/grafana: the committed dashboards are what generate.py writes, and every panel reads
only series the running platform exports or the recording rules make, and shows something."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import ModuleType

import pytest

from tests.deploy.conftest import Observed, recorded_names
from tests.deploy.manifests import ROOT
from tests.deploy.promql import metric_names

GRAFANA = ROOT / "deploy" / "grafana"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up while the class is made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def panel_queries() -> dict[tuple[str, str], list[str]]:
    """(dashboard file, panel title) -> its queries, from the committed JSON."""
    found = {}
    for path in sorted((GRAFANA / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            found[(path.name, panel["title"])] = [t["expr"] for t in panel["targets"]]
    return found


def test_the_committed_dashboards_are_what_the_generator_writes() -> None:
    wanted = generator().rendered()
    committed = {p.name: p.read_text() for p in (GRAFANA / "dashboards").glob("*.json")}
    assert sorted(committed) == [
        "chat-cost.json", "chat-experience.json", "chat-fleet.json", "chat-ladder.json",
    ]  # fmt: skip
    assert committed == wanted
    check = subprocess.run([sys.executable, str(GRAFANA / "generate.py"), "--check"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_every_panel_has_a_query_and_a_unique_title() -> None:
    queries = panel_queries()
    assert len(queries) == 35
    assert all(exprs for exprs in queries.values())


@pytest.mark.slow
async def test_every_panel_reads_exported_series_and_shows_something(observed: Observed) -> None:
    known = await observed.prometheus.names() | set(recorded_names())
    unknown, empty = {}, []
    for where, exprs in panel_queries().items():
        names = {name for expr in exprs for name in metric_names(expr)}
        if names - known:
            unknown[where] = sorted(names - known)
        empty += [(where, e) for e in exprs if not await observed.prometheus.query(e)]
    assert unknown == {}
    assert empty == []
