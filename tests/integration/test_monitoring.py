"""The dashboard and alert rules that ship in monitoring/: promtool accepts the rules and their
unit tests pass, the Grafana dashboard has the fields an import needs, and every metric either
file queries is one a real worker serves.

No JSON schema for Grafana dashboards is at hand (Grafana publishes none for schemaVersion 39
that a test could pin), so the dashboard's structure is checked field by field.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import cronbase
from tests.conftest import wait_for
from tests.integration.metrics_worker import serving_metrics

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
RULES = MONITORING / "prometheus-rules.yml"
RULE_TESTS = MONITORING / "prometheus-rules.test.yml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
METRIC = re.compile(r"\bcronbase_[a-z_]+")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).exists():
        pytest.fail("promtool is missing: scripts/prerequisites.sh installs Debian's prometheus")
    return subprocess.run(
        [PROMTOOL, *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


def test_monitoring_rules_pass_promtool_check() -> None:
    result = promtool("check", "rules", str(RULES.relative_to(REPO)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_monitoring_rules_unit_tests_pass() -> None:
    result = promtool("test", "rules", str(RULE_TESTS.relative_to(REPO)))
    assert result.returncode == 0, result.stdout + result.stderr


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text("utf-8"))["groups"] for r in g["rules"]]


def test_monitoring_every_alert_is_explained_and_unit_tested() -> None:
    alerts = [r for r in rules() if "alert" in r]
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text("utf-8"))["tests"]
        for case in test.get("alert_rule_test", [])
    }
    guide = (REPO / "docs/guides/monitoring.md").read_text("utf-8")
    for alert in alerts:
        name = alert["alert"]
        assert {"summary", "description", "runbook"} <= alert["annotations"].keys(), name
        page, _, anchor = alert["annotations"]["runbook"].partition("#")
        assert (REPO / page).is_file(), f"{name}: runbook {page} is not a page"
        assert anchor.replace("-", " ") in guide.lower(), f"{name}: no section #{anchor}"
        assert f"`{name}`" in guide, f"{name} is not in the guide's table"
        assert name in tested, f"{name} has no promtool unit test"


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text("utf-8")))


def panel_exprs(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p["targets"]]


def test_monitoring_dashboard_has_what_an_import_needs() -> None:
    board = dashboard()
    assert board["schemaVersion"] == 39
    assert board["title"]
    assert re.fullmatch(r"[a-z0-9-]{1,40}", board["uid"])
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert variables["queue"]["type"] == "query"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {ids}"
    for panel in board["panels"]:
        assert panel["title"], panel["id"]
        assert panel["type"] in ("timeseries", "stat"), panel["title"]
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys(), panel["title"]
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert METRIC.search(target["expr"]), f"{panel['title']}: {target['expr']!r}"


def queried_metrics() -> set[str]:
    exprs = panel_exprs(dashboard()) + [r["expr"] for r in rules()]
    names = {m for e in exprs for m in METRIC.findall(e)}
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def test_monitoring_queries_only_metrics_a_worker_serves(app: cronbase.App) -> None:
    @app.task(queue="emails")
    def ok() -> None:
        pass

    @app.task(queue="emails", max_attempts=1)
    def broken() -> None:
        raise RuntimeError("no")

    # A schedule, so the per-schedule family has a sample (the worker declares it at start).
    @app.periodic(cron="0 3 * * *", key="nightly")
    @app.task(queue="emails")
    def nightly() -> None:
        pass

    ok.defer()
    broken.defer()
    with serving_metrics(app) as scrape:

        def scraped() -> str | None:
            text = scrape()
            done = (
                'status="dead",task="broken"',
                'status="succeeded",task="ok"',
                'cronbase_schedule_late_seconds{schedule="nightly"}',
            )
            return text if text and all(d in text for d in done) else None

        text = wait_for(scraped, timeout=60, interval=0.1, what="both jobs in the metrics")
    served = {
        re.sub(r"_(bucket|sum|count|total|created)$", "", line.split("{")[0].split(" ")[0])
        for line in text.splitlines()
        if line.startswith("cronbase_")
    }
    wanted = {re.sub(r"_total$", "", n) for n in queried_metrics()}
    assert wanted, "the dashboard and rules query no cronbase metric"
    assert wanted <= served, f"queried but not served: {sorted(wanted - served)}"
