"""What ``cdc-apply status`` shows: per source, where the apply stands against bronze *now*.

Applied seq and commit LSN come from the latest progress row; the lag is measured against bronze at
the time of asking, not copied from the last batch's progress row, which says nothing about rows
landed since (nor about an apply job that stopped): ``lag_seq`` counts bronze's messages past the
applied seq, ``lag_seconds`` is the age of the oldest change among them not yet in silver (0 when
caught up; :func:`~cdc_apply.lake.sources.bronze_tail.unapplied_ages`) and is what ``max_lag_seconds`` checks.
The time since the last applied commit is shown beside it as ``applied_commit_age_seconds``: after a
quiet hour it is an hour while nothing is behind. Quarantined messages and the last failed batch come
from their bookkeeping tables. Each source gets a ``health`` that the command turns into its exit
code, so a scheduler can alert on it (the rules: :mod:`~cdc_apply.lake.books.status_rules`).

:func:`read_status` reads without a JVM (:mod:`~cdc_apply.lake.books.status_files`, delta-rs) when the
tables it reads — progress, failures, quarantine and bronze — are paths delta-rs opens (local, or on object
storage the environment configures it for: :func:`~cdc_apply.delta.files.rs_uri`), and with Spark otherwise.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from cdc_apply.config import Config
from cdc_apply.delta.files import rs_uri
from cdc_apply.errors import ConfigError
from cdc_apply.lake.books import status_rules as rules
from cdc_apply.lake.books.status_rules import EXIT_CODES, KEYS, SEVERITY, StatusEntry, StatusRefs, worst_exit_code
from cdc_apply.lake.sources.bronze_tail import newest_seqs, unapplied_ages
from cdc_apply.lake.sources.formats import SourceFormats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables
    from cdc_apply.delta.refs import TableRef

__all__ = ["EXIT_CODES", "KEYS", "SEVERITY", "StatusEntry", "needs_spark", "read_status", "read_status_spark",
           "worst_exit_code"]


def needs_spark(config: Config, refs: StatusRefs | None = None) -> bool:
    """True when a table status reads is a catalog table or a path delta-rs does not open here (object
    storage whose credentials only Spark's configuration holds): status then reads with Spark; otherwise
    with delta-rs, no JVM. ``refs``: those tables, when the caller has named them already."""
    return any(rs_uri(ref) is None for ref in (refs or StatusRefs.of(config)).all())


def read_status(spark: SparkSession | None, config: Config, quarantine_window: timedelta = timedelta(hours=24),
                max_lag_seconds: float | None = None) -> list[StatusEntry]:
    """One dict per source (``KEYS``): applied seq and commit LSN, pending transactions, lag against bronze
    now, quarantined messages (all, and within ``quarantine_window``), the last failure, and ``health``:
    ``failing`` (the newest apply attempt failed on this source's message), ``quarantining`` (messages
    quarantined within the window), ``lagging`` (``max_lag_seconds`` given and ``lag_seconds`` above it)
    or ``ok``. Sources with a progress row, plus one the failing attempt names that has none yet (its
    first batch failed); a failing attempt whose error names no source is an entry of its own with
    ``source`` None, rather than a failure of sources it did not name.

    Without a JVM when delta-rs opens the tables (local paths, object storage configured by the environment;
    ``spark`` is then not used and may be None); with ``spark`` otherwise (:func:`needs_spark`)."""
    refs = StatusRefs.of(config)   # named once: the choice of read and the read itself use the same refs
    if not needs_spark(config, refs):
        from cdc_apply.lake.books.status_files import read_status_files

        return read_status_files(config, quarantine_window, max_lag_seconds, refs)
    if spark is None:
        ref, key = ((refs.progress, "state.path" if config.state.path is not None else "state.schema")
                    if rs_uri(refs.progress) is None else
                    (refs.bronze, "bronze.path" if config.bronze.path is not None else "bronze.table"))
        raise ConfigError(f"status reads {ref} with Spark (a catalog table or a path on object storage), "
                          "and no Spark session was given", key=key)
    return read_status_spark(spark, config, quarantine_window, max_lag_seconds, refs)


def read_status_spark(spark: SparkSession, config: Config, quarantine_window: timedelta = timedelta(hours=24),
                      max_lag_seconds: float | None = None, refs: StatusRefs | None = None) -> list[StatusEntry]:
    """:func:`read_status` read with Spark, whatever the tables are (``refs``: as :func:`read_status` named
    them; named here otherwise)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    from cdc_apply.delta.engine import spark_tables

    tables = spark_tables(spark)   # status on Spark: the entry point picks the engine

    refs = refs or StatusRefs.of(config)
    if not tables.exists(refs.progress):
        return []
    now = datetime.now(timezone.utc)
    latest = {row.source: row.asDict() for row in (
        tables.read(refs.progress).select(*rules.PROGRESS_COLUMNS)
        .withColumn("_r", F.row_number().over(Window.partitionBy("source").orderBy(F.desc("apply_version"))))
        .where("_r = 1").drop("_r").collect())}
    failure = rules.current_failure(_newest_failure(tables, refs.failures), latest)
    sources = rules.shown_sources(latest, failure)
    states = rules.source_states(latest, sources)
    formats = SourceFormats(config)
    # How far into bronze's own seqs each source is applied (GaussDB sources count transcoded messages in
    # a seq space of their own; their bronze position is kept in the format state).
    applied = {s: formats.of(s).bronze_seq(states[s]) for s in sources}
    bronze_max = newest_seqs(tables, refs.bronze, applied)
    ages = unapplied_ages(tables.spark, refs.bronze, applied, bronze_max, now,
                          landed_only={s for s in sources if formats.of(s).name != "pgoutput"})
    quarantined = _quarantined(tables, refs.quarantine, now - quarantine_window)
    return rules.entries(latest, failure, sources, states, applied, bronze_max, ages, quarantined, now,
                         max_lag_seconds)


def _quarantined(tables: SparkTables, ref: TableRef, since: datetime) -> dict[str, tuple[int, int]]:
    from pyspark.sql import functions as F

    if not tables.exists(ref):
        return {}
    rows = tables.read(ref).groupBy("source").agg(
        F.count(F.lit(1)).alias("total"),
        F.count(F.when(F.col("quarantined_at") >= F.lit(since), True)).alias("recent")).collect()
    return {r.source: (int(r.total), int(r.recent)) for r in rows}


def _newest_failure(tables: SparkTables, ref: TableRef) -> dict | None:
    """The newest failed attempt: the rows of the latest ``failed_at``, chosen among by the shared rule."""
    from pyspark.sql import functions as F

    if not tables.exists(ref):
        return None
    df = tables.read(ref).select(*rules.FAILURE_COLUMNS)
    last = df.agg(F.max("failed_at")).collect()[0][0]
    rows = (df if last is None else df.where(F.col("failed_at") == F.lit(last))).collect()
    return rules.newest_failure(r.asDict() for r in rows)
