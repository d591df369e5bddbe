"""``cdc-apply status --prometheus``: the status as Prometheus text, for node_exporter's textfile collector
(a scheduled ``apply --once`` serves no endpoint). The apply's figures carry the names the endpoint uses
(``cdc_apply_lag_seconds``, ...), so one dashboard and one set of alerts read either; the slot's come from
:func:`~cdc_apply.metrics.registry.slot_families`."""

from __future__ import annotations

from typing import Mapping, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cdc_apply.metrics.registry import slot_families
from cdc_apply.metrics.source_side import SlotFigures

HEALTHS = ("ok", "lagging", "quarantining", "failing")
# Status keys exported as gauges: (metric, help, the entry's key).
_GAUGES = (
    ("cdc_apply_lag_seconds", "age of the oldest landed change not yet in silver (0: caught up)", "lag_seconds"),
    ("cdc_apply_lag_messages", "bronze messages past the applied seq", "lag_seq"),
    ("cdc_apply_applied_commit_age_seconds", "seconds since the newest applied source commit",
     "applied_commit_age_seconds"),
    ("cdc_status_applied_seq", "the newest applied bronze seq", "applied_seq"),
    ("cdc_status_apply_version", "the apply version of the source's newest progress row", "apply_version"),
    ("cdc_status_quarantined_recent_messages", "messages quarantined within --quarantine-hours",
     "quarantined_recently"),
    ("cdc_status_pending_transactions", "open, streamed and prepared transactions carried", None),
)


class _StatusCollector(Collector):
    def __init__(self, pipeline: str, entries: Sequence[Mapping], source: str, slot: SlotFigures | None) -> None:
        self.pipeline, self.entries, self.source, self.slot = pipeline, entries, source, slot

    def collect(self):
        labels = ["pipeline", "source"]
        for name, doc, key in _GAUGES:
            family = GaugeMetricFamily(name, doc, labels=labels)
            for entry in self.entries:
                value = (entry.get(key) if key is not None else
                         None if entry.get("pending_open") is None else
                         entry["pending_open"] + entry["pending_streamed"] + entry["pending_prepared"])
                if entry.get("source") is not None and value is not None:
                    family.add_metric([self.pipeline, entry["source"]], float(value))
            yield family
        health = GaugeMetricFamily("cdc_status_health", "1 for the source's health (ok, lagging, quarantining, "
                                   "failing); a failure naming no source has source \"\"", labels=[*labels, "health"])
        for entry in self.entries:
            for word in HEALTHS:
                health.add_metric([self.pipeline, entry.get("source") or "", word], int(entry["health"] == word))
        yield health
        if self.slot is not None:
            yield from slot_families(self.source, self.slot)


def render_status(pipeline: str, entries: Sequence[Mapping], source: str, slot: SlotFigures | None) -> str:
    """Prometheus' text format of ``status``'s ``entries`` and the configured source's ``slot`` figures."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StatusCollector(pipeline, entries, source, slot))
    return generate_latest(registry).decode()
