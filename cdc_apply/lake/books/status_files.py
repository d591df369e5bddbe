"""``cdc-apply status`` without a JVM: the bookkeeping tables and bronze read by delta-rs where it opens
them (local paths, or object storage: :func:`~cdc_apply.delta.files.rs_uri`), the same rules applied
(:mod:`~cdc_apply.lake.books.status_rules`) as the Spark read. Imports no Spark: a status answers in about
a second instead of a JVM's start.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa

from cdc_apply.config import Config
from cdc_apply.delta.refs import TableRef
from cdc_apply.delta.rs_tables import RsTables
from cdc_apply.lake.books import status_rules as rules
from cdc_apply.lake.books.status_rules import StatusEntry, StatusRefs
from cdc_apply.lake.sources import bronze_files
from cdc_apply.lake.sources.formats import SourceFormats


def read_status_files(config: Config, quarantine_window: timedelta = timedelta(hours=24),
                      max_lag_seconds: float | None = None, refs: StatusRefs | None = None) -> list[StatusEntry]:
    """:func:`cdc_apply.lake.books.status.read_status`'s entries, read without Spark (state and bronze at
    paths delta-rs opens; ``refs``: as read_status named them, named here otherwise)."""
    tables = RsTables()   # the entry point's engine: delta-rs, delta-rs opens the tables (status.needs_spark)
    refs = refs or StatusRefs.of(config)
    progress = tables.read_rows(refs.progress, rules.PROGRESS_COLUMNS)
    if progress is None:
        return []
    now = datetime.now(timezone.utc)
    latest = rules.newest_progress(_rows(progress))
    failures = tables.read_rows(refs.failures, rules.FAILURE_COLUMNS)
    newest = rules.newest_failure(_rows(failures)) if failures is not None else None
    failure = rules.current_failure(newest, latest)
    sources = rules.shown_sources(latest, failure)
    states = rules.source_states(latest, sources)
    formats = SourceFormats(config)
    applied = {s: formats.of(s).bronze_seq(states[s]) for s in sources}
    bronze_max = bronze_files.newest_seqs(refs.bronze, applied)
    ages = bronze_files.unapplied_ages(refs.bronze, applied, bronze_max, now,
                                       landed_only={s for s in sources if formats.of(s).name != "pgoutput"})
    quarantined = _quarantined(tables, refs.quarantine, now - quarantine_window)
    return rules.entries(latest, failure, sources, states, applied, bronze_max, ages, quarantined, now,
                         max_lag_seconds)


def _quarantined(tables: RsTables, ref: TableRef, since: datetime) -> dict[str, tuple[int, int]]:
    rows = tables.read_rows(ref, ["source", "quarantined_at"])
    if rows is None:
        return {}
    counts: dict[str, tuple[int, int]] = {}
    for source, at in zip(rows.column("source").to_pylist(), rows.column("quarantined_at").to_pylist()):
        total, recent = counts.get(source, (0, 0))
        counts[source] = (total + 1, recent + (at is not None and at >= since))
    return counts


def _rows(got: pa.Table) -> list[dict]:
    """Rows as dicts; timestamps as Spark collects them (naive, this process's local time)."""
    out = {}
    for name in got.column_names:
        column = got.column(name)
        if pa.types.is_timestamp(column.type):
            micros = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
            out[name] = [None if v is None else _spark_local(v) for v in micros]
        else:
            out[name] = column.to_pylist()
    return [dict(zip(out, values)) for values in zip(*out.values())]


def _spark_local(micros: int) -> datetime:
    # pyspark's TimestampType.fromInternal
    return datetime.fromtimestamp(micros // 1000000).replace(microsecond=micros % 1000000)
