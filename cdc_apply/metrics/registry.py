"""The process's metrics (one Prometheus registry) and the calls that feed them, one per event.

The lander calls :func:`record_landed_batch`, :func:`record_connection_lost`, :func:`record_connected` and
:func:`record_snapshot_table`; the apply job :func:`record_apply_batch` and :func:`record_apply_failure`.
Each takes plain values or the report the caller prints anyway, so the hooks in the long modules stay one
line. The slot's figures are asked of the source at each scrape (:class:`SlotCollector`), so they are
fresh even while the lander is idle. Names and units follow Prometheus' conventions (docs/OPERATIONS.md).
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cdc_apply.metrics.source_side import WAL_STATUSES, SlotFigures, read_slot

REGISTRY = CollectorRegistry()
SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# A silver table gets a label of its own up to this many tables per process; any more share "_other". The
# tables come from the publication's Relation messages (or the configuration), so this bounds only a source
# that creates and drops tables without end.
MAX_TABLE_LABELS = 500
OTHER_TABLE = "_other"
# Commit, Stream Commit, Commit Prepared: a source transaction decided as committed, once.
_COMMIT_KINDS = (b"C", b"c", b"K")


def _counter(name: str, doc: str, labels: tuple[str, ...]) -> Counter:
    return Counter(name, doc, labels, registry=REGISTRY)


# -- the lander --------------------------------------------------------------------------------------
LANDED_MESSAGES = _counter("cdc_lander_messages_total", "pgoutput messages landed in bronze", ("source",))
LANDED_BYTES = _counter("cdc_lander_bytes_total", "payload bytes landed in bronze", ("source",))
LANDED_TRANSACTIONS = _counter("cdc_lander_transactions_total",
                               "committed source transactions landed (Commit, Stream Commit, Commit Prepared)",
                               ("source",))
BRONZE_COMMITS = _counter("cdc_lander_bronze_commits_total", "bronze Delta commits of landed batches", ("source",))
BRONZE_COMMIT_SECONDS = Histogram("cdc_lander_bronze_commit_seconds", "seconds from a batch's cut to its bronze "
                                  "commit", ("source",), buckets=SECONDS_BUCKETS, registry=REGISTRY)
RECONNECTS = _counter("cdc_lander_reconnects_total", "reconnection attempts after a lost source connection",
                      ("source",))
CONFIRMED_LSN = Gauge("cdc_lander_confirmed_flush_lsn_bytes", "the LSN the lander last confirmed to the slot "
                      "(bytes from 0/0)", ("source",), registry=REGISTRY)
SNAPSHOT_TABLES = _counter("cdc_lander_snapshot_tables_total", "tables whose snapshot copy landed whole",
                           ("source",))
SNAPSHOT_ROWS = _counter("cdc_lander_snapshot_rows_total", "rows of those snapshot copies", ("source",))

# -- the apply job -------------------------------------------------------------------------------------
APPLY_BATCHES = _counter("cdc_apply_batches_total", "batches applied", ("pipeline",))
APPLY_MESSAGES = _counter("cdc_apply_messages_total", "bronze messages the applied batches read", ("pipeline",))
APPLY_TRANSACTIONS = _counter("cdc_apply_transactions_total", "source transactions applied", ("pipeline",))
APPLY_ROWS = _counter("cdc_apply_rows_total", "silver rows written, by table and operation (inserted, updated, "
                      "deleted)", ("pipeline", "source", "table", "operation"))
APPLY_CHANGES = _counter("cdc_apply_changes_total", "committed source changes (insert, update, delete) applied, by "
                         "table", ("pipeline", "source", "table"))
APPLY_TABLE_BATCHES = _counter("cdc_apply_table_batches_total", "batches that changed the table",
                               ("pipeline", "source", "table"))
APPLY_QUARANTINED = _counter("cdc_apply_quarantined_messages_total", "messages quarantined", ("pipeline",))
APPLY_FAILURES = _counter("cdc_apply_failures_total", "batches that failed", ("pipeline",))
BATCH_SECONDS = Histogram("cdc_apply_batch_seconds", "seconds of an applied batch", ("pipeline",),
                          buckets=SECONDS_BUCKETS, registry=REGISTRY)
PHASE_SECONDS = Histogram("cdc_apply_batch_phase_seconds", "seconds of an applied batch's phase (plan, decode, "
                          "tables, logs, progress)", ("pipeline", "phase"), buckets=SECONDS_BUCKETS,
                          registry=REGISTRY)
LAG_SECONDS = Gauge("cdc_apply_lag_seconds", "age of the oldest landed change not yet in silver, after the last "
                    "batch (0: caught up)", ("pipeline", "source"), registry=REGISTRY)
LAG_MESSAGES = Gauge("cdc_apply_lag_messages", "bronze messages past the applied seq, after the last batch",
                     ("pipeline", "source"), registry=REGISTRY)
COMMIT_AGE = Gauge("cdc_apply_applied_commit_age_seconds", "seconds since the newest applied source commit, "
                   "at the last batch", ("pipeline",), registry=REGISTRY)

_tables: dict[str, set[str]] = {}
_lock = threading.Lock()


class _LandedReport(Protocol):
    @property
    def messages(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def flush_lsn(self) -> int: ...
    @property
    def seconds(self) -> float: ...


def record_landed_batch(source: str, report: _LandedReport, kinds: bytes) -> None:
    """A batch committed to bronze and confirmed up to ``report.flush_lsn``; ``kinds``: its messages' type bytes,
    one per message (counted in C, not row by row)."""
    LANDED_MESSAGES.labels(source).inc(report.messages)
    LANDED_BYTES.labels(source).inc(report.nbytes)
    LANDED_TRANSACTIONS.labels(source).inc(sum(map(kinds.count, _COMMIT_KINDS)))
    BRONZE_COMMITS.labels(source).inc()
    BRONZE_COMMIT_SECONDS.labels(source).observe(report.seconds)
    if report.flush_lsn:
        CONFIRMED_LSN.labels(source).set(report.flush_lsn)


def record_connection_lost(source: str, why: str) -> None:
    """The lander lost the source and waits to reconnect: counted, and ``/healthz`` says 503 with ``why``."""
    RECONNECTS.labels(source).inc()
    HEALTH.set_unhealthy(f"lander {source}", f"connection to the source lost: {why}")


def record_connected(source: str) -> None:
    """The lander streams from the source again: ``/healthz`` back to 200."""
    HEALTH.set_healthy(f"lander {source}")


def record_snapshot_table(source: str, rows: int) -> None:
    """A table's snapshot copy landed whole, with ``rows`` rows."""
    SNAPSHOT_TABLES.labels(source).inc()
    SNAPSHOT_ROWS.labels(source).inc(rows)


def table_label(pipeline: str, name: str, configured: Iterable[str] = ()) -> str:
    """``name``, or ``_other`` once this process has labelled :data:`MAX_TABLE_LABELS` tables (a table named
    in the configuration always keeps its own)."""
    with _lock:
        seen = _tables.setdefault(pipeline, set())
        if name in seen or name in configured or len(seen) < MAX_TABLE_LABELS:
            seen.add(name)
            return name
    return OTHER_TABLE


def record_apply_batch(pipeline: str, report: Any, configured: Iterable[str] = ()) -> None:
    """An applied batch (:class:`cdc_apply.lake.report.BatchReport`): its counts, tables, phases and lag."""
    APPLY_BATCHES.labels(pipeline).inc()
    APPLY_MESSAGES.labels(pipeline).inc(report.messages)
    APPLY_TRANSACTIONS.labels(pipeline).inc(report.transactions)
    APPLY_QUARANTINED.labels(pipeline).inc(report.quarantined)
    BATCH_SECONDS.labels(pipeline).observe(report.seconds)
    for phase, seconds in report.phases.items():
        PHASE_SECONDS.labels(pipeline, phase).observe(seconds)
    configured = frozenset(configured)
    for source, _, name, stats in report.written:
        table = table_label(pipeline, name, configured)
        APPLY_TABLE_BATCHES.labels(pipeline, source, table).inc()
        APPLY_CHANGES.labels(pipeline, source, table).inc(stats.changes)
        for operation in ("inserted", "updated", "deleted"):
            APPLY_ROWS.labels(pipeline, source, table, operation).inc(getattr(stats, operation))
    for source, (lag_seq, lag_seconds) in report.lag_by_source.items():
        LAG_MESSAGES.labels(pipeline, source).set(lag_seq)
        LAG_SECONDS.labels(pipeline, source).set(lag_seconds)
    if report.applied_commit_age_seconds is not None:
        COMMIT_AGE.labels(pipeline).set(report.applied_commit_age_seconds)
    HEALTH.set_healthy(f"apply {pipeline}")


def record_apply_failure(pipeline: str, error: str) -> None:
    """A batch failed: counted, and ``/healthz`` says 503 with the error's first line."""
    APPLY_FAILURES.labels(pipeline).inc()
    HEALTH.set_unhealthy(f"apply {pipeline}", f"the last batch failed: {error}")


class Health:
    """What ``/healthz`` answers: 200 while no part of the process is unhealthy, else 503 and the reasons."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}
        self._lock = threading.Lock()

    def set_unhealthy(self, part: str, reason: str) -> None:
        with self._lock:
            self._reasons[part] = reason.splitlines()[0] if reason else "unhealthy"

    def set_healthy(self, part: str) -> None:
        with self._lock:
            self._reasons.pop(part, None)

    def clear(self) -> None:
        """Every part healthy again: a process that starts a command of its own (a test's) after others ran."""
        with self._lock:
            self._reasons.clear()

    def reasons(self) -> list[str]:
        """``"<part>: <reason>"`` for each unhealthy part (none: healthy)."""
        with self._lock:
            return [f"{part}: {reason}" for part, reason in sorted(self._reasons.items())]


HEALTH = Health()


def slot_families(source: str, figures: SlotFigures) -> list[GaugeMetricFamily]:
    """The slot's figures as metric families (for a scrape and for ``status --prometheus``)."""
    labels = ["source", "slot"]
    values = [source, figures.slot]
    up = GaugeMetricFamily("cdc_source_up", "1 when the source answered the slot query, else 0", labels=labels)
    up.add_metric(values, 0 if figures.reason else 1)
    found = [up]
    gauges = [("cdc_source_wal_lsn_bytes", "the source's current WAL position (bytes from 0/0)", figures.wal_lsn),
              ("cdc_slot_retained_wal_bytes", "WAL the slot holds back on the source (current LSN - restart_lsn)",
               figures.retained_wal_bytes),
              ("cdc_slot_safe_wal_size_bytes", "WAL that may still be written before max_slot_wal_keep_size "
               "invalidates the slot", figures.safe_wal_size),
              ("cdc_slot_confirmed_flush_lsn_bytes", "the slot's confirmed flush LSN (bytes from 0/0)",
               figures.confirmed_flush_lsn),
              ("cdc_slot_active", "1 while a consumer streams from the slot",
               None if figures.active is None else int(figures.active))]
    for name, doc, value in gauges:
        family = GaugeMetricFamily(name, doc, labels=labels)
        if value is not None:
            family.add_metric(values, value)
        found.append(family)
    status = GaugeMetricFamily("cdc_slot_wal_status", "1 for the slot's wal_status (reserved, extended, "
                               "unreserved, lost)", labels=[*labels, "wal_status"])
    if figures.wal_status is not None:
        # The source's own word joins the four: a word a later PostgreSQL adds still gets its series.
        for word in sorted({*WAL_STATUSES, figures.wal_status}):
            status.add_metric([*values, word], int(word == figures.wal_status))
    found.append(status)
    return found


class SlotCollector(Collector):
    """The configured source's slot, asked of the source at each scrape (a few milliseconds; at most the
    connect timeout when the source is unreachable, then ``cdc_source_up`` 0)."""

    def __init__(self, source: str, dsn: str | None, slot: str) -> None:
        self.source, self.dsn, self.slot = source, dsn, slot

    def collect(self) -> Iterable[GaugeMetricFamily]:
        return slot_families(self.source, read_slot(self.dsn, self.slot))

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []     # asked of the source only when scraped, never at registration
