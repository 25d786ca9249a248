"""The alerts and dashboard in deploy/monitoring/ hold up: promtool accepts the rules and
every alert's unit tests pass (each alert fires in one case and stays quiet in another);
every PromQL expression of the rules and the dashboard parses; and every metric they read is
one the platform exports, as its source code names it (tests/support/metric_names.py), or a
recording rule the rules file defines — so renaming a metric in the code breaks this test,
not the operators' alerts in silence.

promtool comes with Debian's prometheus package (scripts/system-packages.txt), which
`make test` installs through scripts/install-system-packages: without it this test fails,
it is never skipped."""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tenantry.telemetry.worker import WorkerMetrics
from tests.support.metric_names import (
    Exported,
    exported_metrics,
    grafana_to_promql,
    promql_metric_names,
)

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "tenantry.rules.yml"
RULE_TESTS = sorted(MONITORING.glob("*.test.yml"))
DASHBOARD = MONITORING / "tenantry-dashboard.json"

#: Made by Prometheus itself for every scrape target, not by Tenantry.
SCRAPE_METRICS = {"up"}


@functools.cache
def exported() -> Exported:
    """What the code under src/ exports (read once: it parses every module)."""
    return exported_metrics(ROOT / "src")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: it comes with Debian's prometheus package, which "
                    "scripts/install-system-packages installs (as root; `make test` runs it)")
    return path


def run_promtool(*args: str) -> str:
    result = subprocess.run([promtool(), *args], cwd=MONITORING, capture_output=True,
                            text=True, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def dashboard_panels() -> list[dict[str, Any]]:
    def walk(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [q for p in panels for q in [p, *walk(p.get("panels", []))]]
    return walk(json.loads(DASHBOARD.read_text())["panels"])


def dashboard_expressions() -> dict[str, str]:
    """Each target's expression, by the panel title and target it comes from."""
    return {f"{p['title']} [{t['refId']}]": t["expr"]
            for p in dashboard_panels() for t in p.get("targets", [])}


def recorded() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def test_promtool_checks_the_rules() -> None:
    output = run_promtool("check", "rules", RULES.name)
    assert f"SUCCESS: {len(rules())} rules found" in output


def test_every_alert_fires_in_one_unit_test_and_stays_quiet_in_another() -> None:
    assert RULE_TESTS, "no promtool unit tests in deploy/monitoring/"
    run_promtool("test", "rules", *(path.name for path in RULE_TESTS))
    cases: dict[str, set[str]] = {}
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                seen = "fires" if check.get("exp_alerts") else "quiet"
                cases.setdefault(check["alertname"], set()).add(seen)
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert alerts, "the rules file defines no alert"
    missing = {a: {"fires", "quiet"} - cases.get(a, set()) for a in alerts}
    assert not {a: m for a, m in missing.items() if m}, "alerts without a case"
    assert set(cases) <= alerts, f"cases for alerts not in the rules: {set(cases) - alerts}"


def test_every_alert_has_a_severity_and_a_runbook_section_that_exists() -> None:
    for rule in rules():
        if "alert" not in rule:
            continue
        assert rule["labels"]["severity"] in {"page", "ticket", "info"}, rule["alert"]
        path, _, anchor = rule["annotations"]["runbook"].partition("#")
        headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.M)
        slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
        assert anchor in slugs, f"{rule['alert']}: no section #{anchor} in {path}"


def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    """Written as recording rules of a throwaway file: promtool's rule check parses each
    expression (promtool's query commands would need a running server)."""
    expressions = dashboard_expressions()
    assert expressions, "the dashboard has no queries"
    throwaway = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expression_{i}", "expr": grafana_to_promql(expr)}
        for i, expr in enumerate(expressions.values())]}]}
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(throwaway))
    run_promtool("check", "rules", str(path))


def test_the_dashboard_is_importable_with_its_data_source_as_an_input() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 39
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    for panel in dashboard_panels():
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
    ids = [p["id"] for p in dashboard_panels()]
    assert len(ids) == len(set(ids)), "two panels share an id"


def test_every_metric_the_rules_and_dashboard_read_is_exported() -> None:
    found = exported().series_names()
    known = found | recorded() | SCRAPE_METRICS
    read = {f"rule {rule.get('alert') or rule.get('record')}": rule["expr"]
            for rule in rules()}
    read |= {f"dashboard panel {where}": expr
             for where, expr in dashboard_expressions().items()}
    unknown = {where: sorted(promql_metric_names(expr) - known)
               for where, expr in read.items()}
    unknown = {where: names for where, names in unknown.items() if names}
    assert not unknown, f"metrics no code exports (renamed? removed?): {unknown}"
    # Not vacuous: the expressions do name metrics, and the platform's own among them.
    named = set().union(*(promql_metric_names(expr) for expr in read.values()))
    assert {"tenantry_step_platform_seconds_bucket", "tenantry_activity_dead_letters",
            "tenantry_parked_runs_overdue_seconds",
            "tenantry_blob_store_errors_total"} <= named & found


def test_the_source_scan_finds_what_the_worker_registry_renders() -> None:
    """A check of the scan itself against a real rendering: every family the worker
    metrics declare is found, and so are the database gauges only the source shows."""
    rendered = set(re.findall(r"^# TYPE (\S+) ", WorkerMetrics().registry.render(), re.M))
    types = exported().types
    assert rendered and rendered <= set(types)
    assert types["tenantry_step_platform_seconds"] == "histogram"
    assert {"tenantry_runs", "tenantry_runs_waiting", "tenantry_shed_level",
            "tenantry_sse_streams_open", "tenantry_retention_lag_seconds"} <= set(types)


def test_the_step_service_level_reads_a_bucket_the_histogram_has() -> None:
    metrics = WorkerMetrics()
    metrics.step_platform.observe(0.12, "gold")
    text = metrics.registry.render()
    assert 'tenantry_step_platform_seconds_bucket{tenant_class="gold",le="0.15"} 1' in text
    les = set(re.findall(r'tenantry_step_platform_seconds_bucket\{le="([^"]+)"\}',
                         RULES.read_text()))
    assert les == {"0.15"}


def test_a_metric_no_code_exports_is_caught() -> None:
    """The check above can fail: a misspelt metric is reported, a function, a label, a
    keyword or a string is not taken for one."""
    names = promql_metric_names(
        'sum by (tenant_class) (rate(tenantry_step_platform_secs_bucket{le="0.15"}[5m]))'
        ' / on (tenant_class) group_left ignoring (le) tenantry:x:ratio_rate5m'
        ' and bool histogram_quantile(0.99, foo{a="b or c"} offset 5m) > 1e3')
    assert names == {"tenantry_step_platform_secs_bucket", "tenantry:x:ratio_rate5m", "foo"}
    assert "tenantry_step_platform_secs_bucket" not in exported().series_names()
