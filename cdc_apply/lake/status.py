"""What ``cdc-apply status`` shows: per source, where the apply stands against bronze *now*.

Applied seq and commit LSN come from the latest progress row; the lag is measured against bronze
at the time of asking (not copied from the last batch, which says nothing about rows landed since);
quarantined messages and the last failed batch come from their bookkeeping tables. Each source
gets a ``health`` that the command turns into its exit code, so a scheduler can alert on it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from cdc_apply.planning.state import SourceState
from cdc_apply.config import Config
from cdc_apply.lake.bookkeeping import Bookkeeping
from cdc_apply.lake.bronze_tail import newest_seqs
from cdc_apply.lake.tables import bronze_ref
from cdc_apply.lake.sources import SourceFormats
from cdc_apply.pgoutput.messages import format_lsn

# Exit codes of ``cdc-apply status``, worst first (the command exits with the worst source's code).
EXIT_CODES = {"failing": 4, "quarantining": 3, "lagging": 5, "ok": 0}
SEVERITY = ("failing", "quarantining", "lagging", "ok")


def worst_exit_code(entries: list[dict[str, Any]]) -> int:
    """The exit code of the least healthy source (0 when there is none)."""
    states = {e["health"] for e in entries}
    return next((EXIT_CODES[h] for h in SEVERITY if h in states), 0)


def read_status(spark, config: Config, quarantine_window: timedelta = timedelta(hours=24),
                max_lag_seconds: float | None = None) -> list[dict[str, Any]]:
    """One dict per source: applied seq and commit LSN, pending transactions, lag against bronze now,
    quarantined messages (all, and within ``quarantine_window``), the last failure, and ``health``:
    ``failing`` (the newest apply attempt for it failed), ``quarantining`` (messages quarantined within
    the window), ``lagging`` (``max_lag_seconds`` given and exceeded) or ``ok``."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    books = Bookkeeping(config)
    if not books.ref("progress").exists(spark):
        return []
    now = datetime.now(timezone.utc)
    latest = (books.ref("progress").read(spark)
              .withColumn("_r", F.row_number().over(Window.partitionBy("source").orderBy(F.desc("apply_version"))))
              .where("_r = 1").orderBy("source").collect())
    states = {row.source: SourceState.from_json(row.state) for row in latest}
    bronze_max = _bronze_max(spark, config, states)
    quarantined = _quarantined(spark, books, now - quarantine_window)
    failures = _failures(spark, books)
    out = []
    for row in latest:
        state = states[row.source]
        pending = state.describe_pending()
        applied_through = _bronze_seq(config, row.source, state)
        lag_seq = max(bronze_max.get(row.source, applied_through) - applied_through, 0)
        committed_at = _utc(row.applied_commit_ts)
        lag_seconds = (now - committed_at).total_seconds() if lag_seq and committed_at else 0.0
        total, recent = quarantined.get(row.source, (0, 0))
        failure = max((f for f in (failures.get(row.source), failures.get(None)) if f is not None),
                      key=lambda f: f.failed_at, default=None)
        failing = failure is not None and failure.apply_version > row.apply_version
        health = ("failing" if failing else "quarantining" if recent else
                  "lagging" if max_lag_seconds is not None and lag_seconds > max_lag_seconds else "ok")
        out.append({
            "source": row.source,
            "health": health,
            "apply_version": row.apply_version,
            "applied_seq": row.applied_seq,
            "applied_commit_lsn": format_lsn(row.applied_commit_lsn) if row.applied_commit_lsn is not None else None,
            "applied_commit_ts": row.applied_commit_ts,
            "pending_open": pending["open"],
            "pending_streamed": pending["streamed"],
            "pending_prepared": pending["prepared"],
            "prepared_gids": [p.gid for p in state.prepared],
            "oldest_needed_seq": row.oldest_needed_seq,
            "bronze_max_seq": bronze_max.get(row.source),
            "lag_seq": lag_seq,
            "lag_seconds": lag_seconds,
            "quarantined": total,
            "quarantined_recently": recent,
            "last_error": failure.error if failing else None,
            "updated_at": row.updated_at,
        })
    return out


def _utc(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts


def _bronze_seq(config: Config, source: str, state: SourceState) -> int:
    """How far into bronze's own seqs the source is applied (GaussDB sources count transcoded messages
    in a seq space of their own; their bronze position is kept in the format state)."""
    return SourceFormats(config).of(source).bronze_seq(state)


def _bronze_max(spark, config: Config, states: dict[str, SourceState]) -> dict[str, int]:
    """Bronze's newest seq per source, reading only files at or past each applied point."""
    floors = {source: _bronze_seq(config, source, state) for source, state in states.items()}
    return newest_seqs(spark, bronze_ref(config), floors)


def _quarantined(spark, books: Bookkeeping, since: datetime) -> dict[str, tuple[int, int]]:
    from pyspark.sql import functions as F

    ref = books.ref("quarantine")
    if not ref.exists(spark):
        return {}
    rows = ref.read(spark).groupBy("source").agg(
        F.count(F.lit(1)).alias("total"),
        F.count(F.when(F.col("quarantined_at") >= F.lit(since), True)).alias("recent")).collect()
    return {r.source: (int(r.total), int(r.recent)) for r in rows}


def _failures(spark, books: Bookkeeping) -> dict[str | None, Any]:
    """The newest failure per source (``None``: a failure not tied to one source, i.e. every source)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    ref = books.ref("failures")
    if not ref.exists(spark):
        return {}
    rows = (ref.read(spark)
            .withColumn("_r", F.row_number().over(Window.partitionBy("source").orderBy(F.desc("failed_at"))))
            .where("_r = 1").collect())
    return {r.source: r for r in rows}
