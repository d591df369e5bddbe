"""A batch's progress rows: per source its applied point and carried state, the lag, and the Delta versions
of the tables its batches wrote (the bookkeeping's ``progress`` table, written last in a batch)."""

from __future__ import annotations

import json

from cdc_apply.lake.batch_context import Landed
from cdc_apply.lake.books.batch_logs import now as _now
from cdc_apply.lake.books.bookkeeping import Bookkeeping
from cdc_apply.lake.report import BatchReport
from cdc_apply.lake.sources.formats import SourceFormats
from cdc_apply.pgoutput import messages as m
from cdc_apply.planning.plan import BatchPlan


def progress_rows(plan: BatchPlan, states, landed: Landed, report: BatchReport, formats: SourceFormats,
                  books: Bookkeeping) -> list[tuple]:
    """The ``progress`` rows of the batch ``plan`` planned, by source (``states``: each source's state after
    it); also sums the carried transactions, the lag and the applied commit's age into ``report``."""
    version, batch_id = report.apply_version, report.batch_id
    # Lag: bronze rows past the applied point (or past what was transcoded), and the age of the oldest
    # change among them, in bronze as the tail saw it when the batch began.
    bronze_max, ages, asked = landed.lag.result()
    now = _now()
    # A change still waiting has aged by the batch's own time since it was asked for.
    ages = {s: age + (now - asked).total_seconds() if age > 0 else 0.0 for s, age in ages.items()}
    applied = {source: formats.of(source).bronze_seq(states[source]) for source in plan.sources}
    rows = []
    for source, batch in plan.sources.items():
        state = states[source]
        commit_ts = m.pg_timestamp_to_datetime(state.last_commit_ts) if state.last_commit_ts is not None else None
        lag_seq = max(bronze_max.get(source, applied[source]) - applied[source], 0)
        fresh = formats.of(source).freshness(landed.prepared[source])   # e.g. a heartbeat newer than the last commit
        if fresh is not None:
            commit_ts = max(commit_ts, fresh) if commit_ts else fresh
        pending = state.describe_pending()
        carried = pending["open"] + pending["streamed"] + pending["prepared"]
        report.carried += carried
        report.lag_seq = max(report.lag_seq, lag_seq)
        report.lag_by_source[source] = (lag_seq, ages[source])
        report.lag_seconds = max(report.lag_seconds or 0.0, ages[source])
        if commit_ts is not None:
            since = max((now - commit_ts).total_seconds(), 0.0)
            report.applied_commit_age_seconds = max(report.applied_commit_age_seconds or 0.0, since)
        tables = [(rid, name, t.delta_version, t.history_version, t.last_commit_lsn)
                  for s, rid, name, t in report.written if s == source]
        versions = books.table_versions(source)
        for rid, _, silver_version, history_version, _ in tables:
            old = versions.get(str(rid), [None, None])
            versions[str(rid)] = [silver_version if silver_version is not None else old[0],
                                  history_version if history_version is not None else old[1]]
        rows.append((source, version, batch_id, state.applied_seq, state.last_commit_lsn, commit_ts,
                     state.last_end_lsn, state.to_json(), bronze_max.get(source), int(landed.stats[source].n),
                     len(batch.committed), carried, state.oldest_needed_seq(), lag_seq, ages[source], now,
                     tables, json.dumps(versions, separators=(",", ":"))))
    return rows
