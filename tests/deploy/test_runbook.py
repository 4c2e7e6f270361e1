"""docs/runbook.md covers every alert: each alert's runbook link lands on a section of it, and
each section says what the operator sees and does."""

from __future__ import annotations

import re

import yaml

from tests.deploy.conftest import PROMETHEUS
from tests.deploy.manifests import ROOT

RUNBOOK = ROOT / "docs" / "runbook.md"


def sections() -> dict[str, str]:
    """GitHub-style anchor of each ### heading -> its text."""
    parts = re.split(r"^### (.+)$", RUNBOOK.read_text(), flags=re.M)
    return {
        re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-"): body
        for title, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def test_every_alert_links_to_a_section_that_says_what_to_see_and_do() -> None:
    rules = yaml.safe_load((PROMETHEUS / "rules" / "alerts.yml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    found = sections()
    for alert in alerts:
        link = alert["annotations"]["runbook"]
        path, _, anchor = link.partition("#")
        assert path == "docs/runbook.md", alert["alert"]
        assert anchor in found, alert["alert"]
        body = found[anchor]
        assert "**Means.**" in body and "**Sees.**" in body and "**Do.**" in body, anchor
        # The alert's own name is in its section (two alerts share the burn-rate one).
        assert alert["alert"].lower().startswith(anchor) or alert["alert"] in body, anchor
    assert len(alerts) == 12


def test_the_failure_table_has_a_row_for_each_failure_the_platform_rides_through() -> None:
    text = RUNBOOK.read_text()
    table = text.split("## Failures the platform rides through", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| failure")]  # fmt: skip
    assert rows == [
        "a node dies mid-answer",
        "an edge or a gateway dies",
        "etcd briefly unavailable",
        "Redis unavailable",
        "overload at twice the capacity",
        "bad input",
    ]
