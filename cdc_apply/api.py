"""The Python API: apply, status and land from a notebook, a job or a test.

::

    import cdc_apply

    spark = cdc_apply.spark_session()                   # or the session you already have
    config = {"bronze": {"path": "/lake/bronze"}, "silver": {"path": "/lake/silver"},
              "state": {"path": "/lake/state"}}         # or "pipeline.toml", or a Config
    reports = cdc_apply.apply(spark, config)            # everything landed so far, then return
    for source in cdc_apply.status(spark, config):
        print(source["source"], source["health"], source["lag_seq"])
    tables = cdc_apply.read_as_of(spark, config, "16/B374D848", ["public.orders", "public.lines"])
    tables["public.orders"].show()                      # both as of the same source commit

For analysts (docs/HISTORY.md): :func:`read_as_of` gives DataFrames of several silver tables as of one
source commit LSN, :func:`as_of_views` the same as SQL temporary views, and
:func:`register_lsn_functions` the SQL functions ``cdc_lsn_text`` / ``cdc_lsn`` between the BIGINT LSNs
the tables hold and PostgreSQL's ``X/Y`` text.

Each function is a thin wrapper over the entry point the ``cdc-apply`` command uses
(``ApplyPipeline``, ``read_status``, ``Lander``), so both behave the same. Progress goes to the
``cdc_apply.*`` loggers (:mod:`cdc_apply.log`); :func:`cdc_apply.configure_logging` shows it.
Nothing here imports Spark until called.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Mapping, TextIO, cast

from cdc_apply.config import Config, as_config
from cdc_apply.log import LineLog

if TYPE_CHECKING:  # for annotations only: importing them at run time would import Spark
    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables
    from cdc_apply.forgetting.run import Forgetting
    from cdc_apply.lake.books.status_rules import StatusEntry
    from cdc_apply.lake.history.as_of import AsOf, AsOfMethod
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.lake.report import BatchReport
    from cdc_apply.lander.lander import LandSummary
    from cdc_apply.verification.run import Verification

ConfigLike = Config | Mapping[str, Any] | str | os.PathLike

apply_log = logging.getLogger("cdc_apply.apply")
land_log = logging.getLogger("cdc_apply.land")
status_log = logging.getLogger("cdc_apply.status")

# Seconds a batch runs before the first live progress line (then one per this many seconds).
PROGRESS_SECONDS = 30.0


def load_config(config: ConfigLike) -> Config:
    """A validated :class:`~cdc_apply.config.Config` from a ``Config``, a dict shaped like the TOML file
    (relative paths against the current folder) or the path of a TOML file (relative paths against its
    folder). Every problem is a :class:`~cdc_apply.errors.ConfigError` naming the key."""
    return as_config(config)


def apply(spark: SparkSession, config: ConfigLike, once: bool = True, *, out: TextIO | None = None,
          progress_seconds: float | None = PROGRESS_SECONDS) -> list["BatchReport"]:
    """Apply bronze to silver; return one :class:`~cdc_apply.lake.report.BatchReport` per batch applied.

    ``once=True`` (the default) applies everything bronze holds now and returns; ``once=False`` keeps
    running on ``apply.trigger_interval`` until the query is stopped (interrupting the call stops it
    too) — then the reports of every batch of the run are returned. A batch with nothing to apply gives
    no report, so ``[]`` means bronze had nothing new.

    A report has ``apply_version``, ``messages``, ``transactions`` (applied), ``carried`` (open, streamed
    or prepared at the batch's end), ``aborted``, ``tables`` (``"ns.name"`` → inserted / updated /
    deleted / truncated / seconds), ``quarantined``, ``lag_seq``, ``lag_seconds``,
    ``applied_commit_age_seconds``, ``seconds``, ``phases`` and ``line()``, the progress line. Each
    batch's line is logged on ``cdc_apply.apply`` (and written to ``out`` when given); while a batch
    runs longer than ``progress_seconds`` a live line says which Spark stages it is in (``None`` or 0:
    no live lines).

    ``spark`` is a session with Delta (:func:`cdc_apply.spark_session`): classic, or Spark Connect, where
    the batches run in a loop here rather than a streaming query and there is no live progress line
    (docs/CONNECT.md). Errors are the ``cdc_apply.errors`` classes the command reports (``ConfigError``,
    ``ApplyError``, ``StateError`` ...).
    """
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.spark.executors import cluster_settings, prepare_executors
    from cdc_apply.spark.s3_commits import check_exclusive_commits
    from cdc_apply.spark.session import session_settings

    config = as_config(config)
    tables = spark_tables(spark)   # the engine, chosen here once and handed down
    check_exclusive_commits(spark, (config.silver.path, config.state.path), "apply")
    if tables.engine == "connect":
        # No SparkContext to probe executors or count task slots through: the server's settings stand,
        # and the watcher (a streaming query's and the JVM's stages) has nothing to follow.
        return _run_apply(tables, config, once, out, None)
    executors = prepare_executors(spark)   # on a cluster: executors import cdc_apply, or a SetupError now
    fitted = cluster_settings(spark)
    if executors.action != "local master":
        partitions = fitted.get("spark.sql.shuffle.partitions") or spark.conf.get("spark.sql.shuffle.partitions")
        apply_log.info("%s; %s shuffle partitions%s", executors.line(), partitions,
                       " (the cluster's task slots)" if "spark.sql.shuffle.partitions" in fitted else "")
    with session_settings(spark, fitted):
        return _run_apply(tables, config, once, out, progress_seconds)


def _run_apply(tables: SparkTables, config: Config, once: bool, out: TextIO | None,
               progress_seconds: float | None) -> list["BatchReport"]:
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.spark.progress import BatchWatcher, query_name

    stream = LineLog(apply_log, copy=out)
    pipeline = ApplyPipeline.open(tables, config, out=stream)
    target = config.silver.path or config.silver.table_template
    stream.write(f"cdc-apply: applying {pipeline.bronze} -> {target} "
                 f"({'once' if once else 'every ' + config.apply.trigger_interval}), "
                 f"apply version {pipeline.version}\n")
    stream.flush()
    name = query_name(config.pipeline)
    watcher = BatchWatcher(tables.spark, name, pipeline, progress_seconds).start() if progress_seconds else None
    signals = _stop_on_signals(pipeline)
    try:
        pipeline.run(once=once)
    except KeyboardInterrupt:
        # Outside the main thread no handler is installed: the query runs in the JVM and would go on
        # after the call was interrupted.
        for query in tables.spark.streams.active:
            if query.name == name:
                query.stop()
        apply_log.info("apply of pipeline %r stopped by an interrupt", config.pipeline)
        raise
    finally:
        for sig, handler in signals.items():
            signal.signal(sig, handler)
        if watcher is not None:
            watcher.stop()
        stream.flush()
    if pipeline.stopping.is_set():
        apply_log.info("apply of pipeline %r stopped by a signal after %d batch(es), at apply version %d; "
                       "a batch not begun runs at the next start", config.pipeline, len(pipeline.reports),
                       pipeline.version)
        return list(pipeline.reports)
    apply_log.info("applied %d batch(es) of pipeline %r, now at apply version %d",
                   len(pipeline.reports), config.pipeline, pipeline.version)
    return list(pipeline.reports)


def _stop_on_signals(pipeline: "ApplyPipeline") -> dict:
    """SIGINT and SIGTERM ask ``pipeline`` to stop once its batch under way is applied (the handlers this
    replaces are returned, to be put back). Only in the main thread, where Python runs signal handlers: an
    interrupt raised there in the middle of a call into the JVM would leave its connection mid-answer."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def on_signal(signum, frame) -> None:
        pipeline.request_stop()

    return {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}


def status(spark: SparkSession | None, config: ConfigLike, *, quarantine_hours: float = 24.0,
           max_lag_seconds: float | None = None, slot: bool = False) -> list["StatusEntry"]:
    """Where the apply stands, one dict per source (``[]`` before the first batch attempt; a failure whose
    error names no source is an entry of its own with ``source`` None).

    Keys: ``source``, ``health`` (``ok``, ``lagging`` — only with ``max_lag_seconds`` —, ``quarantining``:
    messages quarantined within ``quarantine_hours``, ``failing``: the newest apply attempt failed),
    ``apply_version``, ``applied_seq``, ``applied_commit_lsn``, ``applied_commit_ts``, ``pending_open`` /
    ``_streamed`` / ``_prepared``, ``prepared_gids``, ``oldest_needed_seq`` (keep bronze back to here),
    ``bronze_max_seq``, ``lag_seq`` and ``lag_seconds`` (against bronze now: messages past the applied seq,
    and the age of the oldest change not yet in silver, 0 when caught up), ``applied_commit_age_seconds``
    (since the last applied commit), ``quarantined``,
    ``quarantined_recently``, ``last_error``, ``updated_at``. :func:`exit_code` turns the list into the
    command's exit code.

    When delta-rs opens the state tables and bronze (local paths, or object storage whose credentials are in
    the environment: :func:`cdc_apply.delta.files.rs_uri`) they are read without a JVM and ``spark`` may be
    None; catalog tables and object storage configured only in Spark are read with ``spark``.

    ``slot``: each entry also gets the configured source's slot as the source sees it (``slot_active``,
    ``slot_wal_status``, ``slot_retained_wal_bytes``, ``slot_safe_wal_size``, ``source_unavailable``; the
    figures None with the reason there when the source does not answer within a few seconds, or for an
    entry of a source other than ``[source]``), as ``cdc-apply status`` prints them (docs/OPERATIONS.md).
    """
    from cdc_apply.lake.books.status import read_status

    config = as_config(config)
    entries = read_status(spark, config, timedelta(hours=quarantine_hours), max_lag_seconds)
    for entry in entries:
        status_log.info("source %s: %s, applied seq %s, lag %s msgs", entry["source"], entry["health"],
                        entry["applied_seq"], entry["lag_seq"])
    if slot:
        from cdc_apply.metrics.source_side import read_slot, slot_entries

        figures = read_slot(_source_dsn(config), config.source.slot)
        return cast("list[StatusEntry]", slot_entries(entries, config.source.name, figures))
    return entries


def _source_dsn(config: Config) -> str | None:
    """The source's connection string; None when none is configured (the figures then say so)."""
    from cdc_apply.errors import ConfigError
    from cdc_apply.lander.dsn import resolve_dsn

    try:
        return resolve_dsn(config.source)
    except ConfigError:
        return None


def exit_code(entries: list["StatusEntry"]) -> int:
    """The exit code ``cdc-apply status`` gives for :func:`status`'s entries: the least healthy source's
    (0 ok, 5 lagging, 3 quarantining, 4 failing; 0 for no sources)."""
    from cdc_apply.lake.books.status import worst_exit_code

    return worst_exit_code(entries)


def land(config: ConfigLike, *, spark: SparkSession | None = None, once: bool = True,
         stop: threading.Event | None = None,
         out: TextIO | None = None) -> "LandSummary":
    """Land the configured PostgreSQL slot (``[source]``) into bronze; return what was landed.

    ``once=True`` stops when the slot has nothing more to send (``land.idle_exit_seconds``); otherwise
    it runs until ``stop`` is set. Everything that can be wrong with the source (slot, publication,
    ``wal_level``, role, credentials, reachability) is checked before bronze is opened, as a
    :class:`~cdc_apply.errors.LandError` or ``ConfigError`` saying what to run. A bronze path is written
    through delta-rs without Spark (no JVM starts): a local one, or one on object storage whose credentials
    are in the environment (docs/LANDER.md); a catalog table, object storage configured only in Spark, or
    a table with features delta-rs does not write here goes through Spark: ``spark`` is then the session to write
    it with (default :func:`cdc_apply.spark_session`, built only then). Each landed batch is logged on
    ``cdc_apply.land`` (and written to ``out`` when given). The summary has ``batches`` (one report
    each: messages, bytes, seq range, flush LSN, slot lag), ``messages``, ``nbytes``, ``replayed``,
    ``reconnects``, ``seconds``.
    """
    from cdc_apply.delta.refs import bronze_ref
    from cdc_apply.lander.bronze_rs import spark_reason
    from cdc_apply.lander.dsn import resolve_dsn
    from cdc_apply.lander.lander import Lander
    from cdc_apply.lander.options import replication_options
    from cdc_apply.lander.server import SourceServer

    config = as_config(config)
    stream = LineLog(land_log, copy=out)
    replication_options(config.source)
    server = SourceServer(resolve_dsn(config.source), config.source, config.source.connect_timeout)
    try:
        server.connect()
        server.preflight()
    finally:
        server.close()
    if server.created:
        stream.write(f"[land {config.source.name}] created {' and '.join(server.created)}\n")
    if spark is None:
        if spark_reason(bronze_ref(config)) is not None:
            from cdc_apply.spark.session import classic_session as spark_session

            spark = spark_session(f"cdc_apply-land-{config.source.name}")
    else:
        from cdc_apply.spark.session import require_classic

        require_classic(spark)
    if spark is not None and spark_reason(bronze_ref(config)) is not None:   # bronze lands through Spark
        from cdc_apply.spark.s3_commits import check_exclusive_commits

        check_exclusive_commits(spark, (config.bronze.path,), "land")
    try:
        # Lander's ``out`` is typed TextIO, which a LineLog (an io.TextIOBase) is not nominally; it only prints.
        return Lander(config, spark, out=cast(TextIO, stream), stop=stop).run(once=once)
    finally:
        stream.flush()


def read_as_of(spark: SparkSession, config: ConfigLike, lsn: int | str, tables: list[str] | None = None, *,
               source: str | None = None, method: "AsOfMethod" = "auto") -> "AsOf":
    """Silver tables of one source as of one commit LSN (``16/B374D848`` or the BIGINT the tables hold):
    an :class:`~cdc_apply.lake.history.as_of.AsOf` whose ``frames`` (or ``result["ns.name"]``) are DataFrames,
    every one showing the same commit — the newest applied at or below ``lsn``.

    ``tables``: qualified names (default: every table of the source); ``source``: needed when the
    pipeline applies several; ``method``: ``"auto"`` (from history tables when every table asked keeps
    one complete at that LSN — any commit — else Delta time travel to the newest batch end at or below
    it), ``"history"`` or ``"time travel"``. The result says which (``method``), the LSN shown (``lsn``,
    ``lsn_text``) and whether it is the newest applied commit at or below ``lsn`` (``exact``). An
    :class:`~cdc_apply.errors.AsOfError` when it cannot be answered (docs/HISTORY.md).
    """
    from cdc_apply.lake.history.as_of import read_as_of as _read

    return _read(spark, as_config(config), lsn, tables, source, method)


def as_of_views(spark: SparkSession, config: ConfigLike, lsn: int | str, tables: list[str] | None = None, *,
                source: str | None = None, method: "AsOfMethod" = "auto", prefix: str = "") -> "AsOf":
    """:func:`read_as_of`, each table registered as a temporary view ``<prefix><relation name>`` for SQL
    (``<prefix><namespace>__<name>`` when two tables share a name); also registers the LSN functions."""
    from cdc_apply.lake.history.as_of import as_of_views as _views
    from cdc_apply.lake.history.lsn import register_lsn_functions as _functions

    result = _views(spark, as_config(config), lsn, tables, source, method, prefix)
    _functions(spark)
    return result


def register_lsn_functions(spark: SparkSession, schema: str | None = None) -> None:
    """SQL functions ``cdc_lsn_text(BIGINT) -> 'X/Y'`` and ``cdc_lsn('X/Y') -> BIGINT``: temporary, or
    permanent in ``schema`` (a catalog that keeps SQL functions: Unity Catalog, a Hive metastore)."""
    from cdc_apply.lake.history.lsn import register_lsn_functions as _functions

    _functions(spark, schema)


def verify(spark: SparkSession, config: ConfigLike, tables: list[str] | None = None, **options: Any) -> "Verification":
    """Compare silver with the live source at one consistent point (docs/VERIFY.md): a
    :class:`~cdc_apply.verification.run.Verification` with one result per table (``lines()``, ``as_dict()``,
    ``exit_code``: 0 equal, 1 differences, 2 errors). ``options``: ``range_rows``,
    ``max_source_rows_per_second``, ``wait_seconds``, ``samples``, ``record``, ``dsn``."""
    from cdc_apply.verification.run import verify as _verify

    return _verify(spark, as_config(config), tables, **options)


def forget(spark: SparkSession, config: ConfigLike, table: str, keys: list[str], **options: Any) -> "Forgetting":
    """Remove every trace of ``keys`` of ``table`` from the lake (docs/FORGET.md): a
    :class:`~cdc_apply.forgetting.run.Forgetting` saying what each table lost (``lines()``, ``as_dict()``).
    ``keys``: a value each, or a JSON object by key column. ``options``: ``even_if_in_source``,
    ``wait_seconds``, ``vacuum``, ``retain_hours``, ``dsn``. A :class:`ForgetError` when refused."""
    from cdc_apply.forgetting.run import forget as _forget

    return _forget(spark, as_config(config), table, keys, **options)
