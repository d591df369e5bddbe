"""What to watch, as shipped in conf/: the Grafana dashboard loads as it is and the alert rules and the
dashboard name only metrics cdc_apply exports (the endpoint's, the slot's, status --prometheus')."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from cdc_apply.metrics.registry import REGISTRY, slot_families
from cdc_apply.metrics.source_side import SlotFigures
from cdc_apply.metrics.textfile import render_status

CONF = Path(__file__).resolve().parents[2] / "conf"
DOCS = Path(__file__).resolve().parents[2] / "docs"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exported() -> set[str]:
    """Every sample name cdc_apply can export."""
    names = set()
    for family in REGISTRY.collect():
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    for family in slot_families("s", SlotFigures("slot", 1, True, "reserved", 1, 1, 1)):
        names.add(family.name)
    entry = {"source": "s", "health": "ok", "lag_seconds": 0.0, "lag_seq": 0, "applied_seq": 1, "apply_version": 1,
             "applied_commit_age_seconds": 1.0, "quarantined_recently": 0, "pending_open": 0,
             "pending_streamed": 0, "pending_prepared": 0}
    for family in text_string_to_metric_families(render_status("p", [entry], "s", None)):
        names |= {s.name for s in family.samples}
    return names


def _named(expr: str) -> set[str]:
    return set(re.findall(r"\bcdc_[a-z_]+\b", expr))


def test_the_dashboard_loads_as_it_is_and_names_only_exported_metrics():
    dashboard = json.loads((CONF / "grafana-dashboard.json").read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 36
    # No __inputs to fill: the datasource is a variable the dashboard defines itself.
    assert "__inputs" not in dashboard
    assert [v["name"] for v in dashboard["templating"]["list"]][0] == "datasource"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    named = set().union(*map(_named, exprs))
    assert named and named <= exported(), sorted(named - exported())


def test_every_alert_rule_names_only_exported_metrics():
    rules = (CONF / "prometheus-alerts.yml").read_text()
    exprs = re.findall(r"^\s+expr: (.+)$", rules, re.M)
    alerts = re.findall(r"^\s+- alert: (\w+)$", rules, re.M)
    assert len(exprs) == len(alerts) >= 5
    named = set().union(*map(_named, exprs))
    assert named <= exported(), sorted(named - exported())
    # The four concerns each have a rule: retained WAL, lag, failures, a lander not running.
    for metric in ("cdc_slot_retained_wal_bytes", "cdc_apply_lag_seconds", "cdc_apply_failures_total",
                   "cdc_slot_active"):
        assert metric in named


def test_the_operations_page_lists_every_exported_metric():
    text = (DOCS / "OPERATIONS.md").read_text()
    listed = set(re.findall(r"^\| `(cdc_[a-z_]+)`", text, re.M))
    families = {n.removesuffix("_total").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
                for n in exported()}
    documented = {n.removesuffix("_total") for n in listed}
    assert families == documented, (sorted(families - documented), sorted(documented - families))
