"""What ``cdc-apply status`` shows: per source, where the apply stands against bronze *now*.

Applied seq and commit LSN come from the latest progress row; the lag is measured against bronze at
the time of asking, not copied from the last batch's progress row, which says nothing about rows
landed since (nor about an apply job that stopped): ``lag_seq`` counts bronze's messages past the
applied seq, ``lag_seconds`` is the age of the oldest change among them not yet in silver (0 when
caught up; :func:`~cdc_apply.lake.sources.bronze_tail.unapplied_ages`) and is what ``max_lag_seconds`` checks.
The time since the last applied commit is shown beside it as ``applied_commit_age_seconds``: after a
quiet hour it is an hour while nothing is behind. Quarantined messages and the last failed batch come
from their bookkeeping tables. Each source gets a ``health`` that the command turns into its exit
code, so a scheduler can alert on it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from cdc_apply.planning.state import SourceState
from cdc_apply.config import Config
from cdc_apply.lake.books.bookkeeping import Bookkeeping
from cdc_apply.lake.sources.bronze_tail import as_utc, newest_seqs, unapplied_ages
from cdc_apply.delta.refs import bronze_ref
from cdc_apply.lake.sources.formats import SourceFormats
from cdc_apply.pgoutput.messages import format_lsn

# Exit codes of ``cdc-apply status``, worst first (the command exits with the worst source's code).
EXIT_CODES = {"failing": 4, "quarantining": 3, "lagging": 5, "ok": 0}
SEVERITY = ("failing", "quarantining", "lagging", "ok")

KEYS = ("source", "health", "apply_version", "applied_seq", "applied_commit_lsn", "applied_commit_ts",
        "pending_open", "pending_streamed", "pending_prepared", "prepared_gids", "oldest_needed_seq",
        "bronze_max_seq", "lag_seq", "lag_seconds", "applied_commit_age_seconds", "quarantined",
        "quarantined_recently", "last_error", "updated_at")


def worst_exit_code(entries: list[dict[str, Any]]) -> int:
    """The exit code of the least healthy source (0 when there is none)."""
    states = {e["health"] for e in entries}
    return next((EXIT_CODES[h] for h in SEVERITY if h in states), 0)


def read_status(spark, config: Config, quarantine_window: timedelta = timedelta(hours=24),
                max_lag_seconds: float | None = None) -> list[dict[str, Any]]:
    """One dict per source (``KEYS``): applied seq and commit LSN, pending transactions, lag against bronze
    now, quarantined messages (all, and within ``quarantine_window``), the last failure, and ``health``:
    ``failing`` (the newest apply attempt failed on this source's message), ``quarantining`` (messages
    quarantined within the window), ``lagging`` (``max_lag_seconds`` given and ``lag_seconds`` above it)
    or ``ok``. Sources with a progress row, plus one the failing attempt names that has none yet (its
    first batch failed); a failing attempt whose error names no source is an entry of its own with
    ``source`` None, rather than a failure of sources it did not name."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    books = Bookkeeping(config)
    if not books.ref("progress").exists(spark):
        return []
    now = datetime.now(timezone.utc)
    latest = {row.source: row for row in (
        books.ref("progress").read(spark)
        .withColumn("_r", F.row_number().over(Window.partitionBy("source").orderBy(F.desc("apply_version"))))
        .where("_r = 1").collect())}
    failure = _current_failure(spark, books, max((r.apply_version for r in latest.values()), default=0))
    sources = sorted(latest)
    if failure is not None and failure.source is not None and failure.source not in latest:
        sources = sorted([*sources, failure.source])
    formats = SourceFormats(config)
    states = {s: SourceState.from_json(latest[s].state) if s in latest else SourceState() for s in sources}
    # How far into bronze's own seqs each source is applied (GaussDB sources count transcoded messages in
    # a seq space of their own; their bronze position is kept in the format state).
    applied = {s: formats.of(s).bronze_seq(states[s]) for s in sources}
    bronze = bronze_ref(config)
    bronze_max = newest_seqs(spark, bronze, applied)
    ages = unapplied_ages(spark, bronze, applied, bronze_max, now,
                          landed_only={s for s in sources if formats.of(s).name != "pgoutput"})
    quarantined = _quarantined(spark, books, now - quarantine_window)
    out = []
    for source in sources:
        row, state = latest.get(source), states[source]
        pending = state.describe_pending()
        committed_at = as_utc(row.applied_commit_ts) if row is not None else None
        total, recent = quarantined.get(source, (0, 0))
        failing = failure is not None and failure.source == source
        health = ("failing" if failing else "quarantining" if recent else
                  "lagging" if max_lag_seconds is not None and ages[source] > max_lag_seconds else "ok")
        out.append({
            "source": source,
            "health": health,
            "apply_version": row.apply_version if row is not None else None,
            "applied_seq": row.applied_seq if row is not None else None,
            "applied_commit_lsn": format_lsn(row.applied_commit_lsn)
            if row is not None and row.applied_commit_lsn is not None else None,
            "applied_commit_ts": row.applied_commit_ts if row is not None else None,
            "pending_open": pending["open"],
            "pending_streamed": pending["streamed"],
            "pending_prepared": pending["prepared"],
            "prepared_gids": [p.gid for p in state.prepared],
            "oldest_needed_seq": row.oldest_needed_seq if row is not None else None,
            "bronze_max_seq": bronze_max.get(source),
            "lag_seq": max(bronze_max.get(source, applied[source]) - applied[source], 0),
            "lag_seconds": ages[source],
            "applied_commit_age_seconds": max((now - committed_at).total_seconds(), 0.0)
            if committed_at is not None else None,
            "quarantined": total,
            "quarantined_recently": recent,
            "last_error": failure.error if failing else None,
            "updated_at": row.updated_at if row is not None else None,
        })
    if failure is not None and failure.source is None:
        out.append({**dict.fromkeys(KEYS), "health": "failing", "last_error": failure.error})
    return out


def _quarantined(spark, books: Bookkeeping, since: datetime) -> dict[str, tuple[int, int]]:
    from pyspark.sql import functions as F

    ref = books.ref("quarantine")
    if not ref.exists(spark):
        return {}
    rows = ref.read(spark).groupBy("source").agg(
        F.count(F.lit(1)).alias("total"),
        F.count(F.when(F.col("quarantined_at") >= F.lit(since), True)).alias("recent")).collect()
    return {r.source: (int(r.total), int(r.recent)) for r in rows}


def _current_failure(spark, books: Bookkeeping, applied_version: int):
    """The newest failed attempt, while no batch of its apply version has succeeded since (a re-run that
    succeeds writes progress rows of that version); None otherwise. Only the newest: an earlier attempt's
    error, on a source since left out or before the cause was fixed, no longer says why the job stops."""
    from pyspark.sql import functions as F

    ref = books.ref("failures")
    if not ref.exists(spark):
        return None
    newest = ref.read(spark).orderBy(F.desc("failed_at"), F.desc("apply_version")).first()
    return newest if newest is not None and newest.apply_version > applied_version else None
