"""The apply job: bronze micro-batches to silver tables, exactly once.

Per micro-batch (``foreachBatch``):

1. collect the batch's control messages (everything but changes: a small set)
   and plan it — transactions, relation versions, seq ranges — on the driver;
2. decode the change rows once, in parallel (``mapInArrow``), and persist them;
3. per silver table, in parallel threads: evolve the schema, empty the table
   at a TRUNCATE, collapse to one row per key and MERGE;
4. append the transactions log, messages and quarantine (beside step 3 in a
   small batch without a snapshot load) and, last, progress.

Every write is guarded by the pipeline's own apply version (not Spark's batch
id): silver commits record their step in ``userMetadata`` (``ledger.py``),
bookkeeping rows their apply version; change rows at or below a source's
applied seq are skipped, so a re-run batch — or a replay of bronze from the
start — changes nothing twice.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from functools import partial
from typing import Callable, TextIO

from cdc_apply.decode.changes import SKIP, decode_batches, output_ddl, output_schema
from cdc_apply.planning.plan import BatchPlan, plan_batch
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.snapshot_loads import SnapshotLoad, find_snapshot_loads
from cdc_apply.planning.state import SourceState
from cdc_apply.planning.table_plan import SlotCount
from cdc_apply.config import Config
from cdc_apply.lake.books.batch_logs import BatchLogs, counts_per_transaction, now as _now
from cdc_apply.lake.books.bookkeeping import Bookkeeping, failed_source
from cdc_apply.lake.sources.bronze import check_bronze
from cdc_apply.lake.sources.bronze_contract import applied_rows, check_late_rows, count_rows
from cdc_apply.lake.sources.bronze_tail import BronzeTail, unapplied_ages
from cdc_apply.lake.sources.payload_columns import first_change_seqs, is_control, is_directive
from cdc_apply.delta.spark_errors import first_decode_error, unwrap_error
from cdc_apply.lake.silver.merge import BATCH_SETTINGS
from cdc_apply.lake.report import BatchReport
from cdc_apply.lake.silver_tables import SilverTables
from cdc_apply.lake.silver.snapshot_loads import load_counts, without_loads
from cdc_apply.lake.sources.formats import SourceFormats
from cdc_apply.delta.refs import bronze_ref
from cdc_apply.errors import ApplyError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.types import TypeOptions, resolve_column_type
from cdc_apply.spark.session import session_settings

# Values (messages x decoded columns) per decode partition. Each decode task pays a fixed hand-off to a
# Python worker (~0.15 s here): a 1M-change batch of a 3-column table in 48 partitions of 25,000
# messages decoded in ~8 s, in 8 partitions in ~3 s (bench.large_batch). But a cached block evicted
# to disk is read back whole: the soak's 450k-message batches, rows as wide as a 300-column table (~625 decoded columns),
# ran the driver out of heap in two partitions and ran in partitions of 25,000 messages (~15M values).
DECODE_VALUES_PER_PARTITION = 8_000_000
# A batch whose bronze payloads come to at most this many bytes is small: it writes its logs beside its
# tables (_apply) and is read from bronze once, kept in memory for the batch: the bronze contract's
# count, the control scan and the decode then read the copy. Each read of bronze otherwise costs a Delta file-skipping job over bronze's log and a scan
# of its files: a running job's batches of ~10,000 messages at 1,000 rows/s (bench.sustained) planned
# in a median 1.7 s instead of 2.1 s. A 1M-message batch (~60 MB) planned 1.9 s slower with the copy
# (building it costs more than the two reads it saves), hence a budget for small batches only.
FRESH_CACHE_BYTES = 16 << 20


class ApplyPipeline:
    """Holds the carried state between micro-batches of one apply job."""

    def __init__(self, spark, config: Config, out: TextIO = sys.stdout,
                 fault_hook: Callable[[str], None] | None = None) -> None:
        self.spark = spark
        self.config = config
        self.out = out
        self.bronze = bronze_ref(config)
        check_bronze(spark, self.bronze, "bronze.path" if config.bronze.path else "bronze.table")
        self.books = Bookkeeping(config)
        try:
            self.books.create_all(spark)
        except Exception as exc:  # another job creating the same tables: the named error, not Delta's
            raise unwrap_error(exc, config) from None
        self.version, self.states = self.books.load_progress(spark)
        # The versions recorded by the batches progress covers (not those of a batch cut short after its append).
        self.histories: dict[str, SchemaHistory] = self.books.load_history(spark, through_version=self.version)
        self.type_options = TypeOptions(numeric=config.apply.numeric)
        self.silver = SilverTables(spark, config)
        self.silver.quarantined_sources = {r.source for r in self.books.ref("quarantine").read(spark)
                                           .select("source").distinct().collect()}
        self.logs = BatchLogs(spark, config, self.books, self.silver.names_of, self._type_name)
        self.formats = SourceFormats(config)
        self.formats.create_tables(spark)
        # Beside the batch: the lag, the bronze contract's count and a small batch's logs (_apply).
        self._side = ThreadPoolExecutor(max_workers=3, thread_name_prefix="cdc_apply-side")
        self._tail = BronzeTail(spark, self.bronze)
        # Tests inject crashes here: called with "table:<ns.name>", "history:<ns.name>" (after a table's
        # history write, before its silver writes), "logs" and "progress".
        self._fault = fault_hook or (lambda point: None)
        self.silver.fault = self._fault
        self.silver.messages = self._messages
        self.reports: list[BatchReport] = []

    def _messages(self):
        """Every source's pgoutput messages (bronze's, or transcoded from it: see cdc_apply.lake.sources.formats)."""
        return self.formats.messages(self.spark, self.bronze)

    # -- planning helpers ----------------------------------------------------------
    def _first_change_seq(self, source: str, ranges, subxids):
        """Seq of each subtransaction's first change within ``ranges`` (read from bronze, one job)."""
        return first_change_seqs(self.spark, self._messages(), source, ranges, subxids)

    def _type_name(self, source: str):
        history = self.histories[source]
        return lambda oid, typmod: resolve_column_type(oid, typmod, history.types, self.type_options).pg_name

    # -- one batch -------------------------------------------------------------------
    def process(self, df, batch_id: int) -> BatchReport:
        """Apply one micro-batch (``foreachBatch``); returns what it did, also printed as a line."""
        with session_settings(self.spark, BATCH_SETTINGS):
            try:
                return self._process(df, batch_id)
            except Exception as exc:
                self._record_failure(unwrap_error(exc))
                raise

    def _record_failure(self, error: Exception) -> None:
        """Leave the failed attempt where ``cdc-apply status`` finds it, under the source the error names
        (none: a failure of the whole batch); never hide the error itself."""
        try:
            self.books.record_failure(self.spark, [failed_source(error)], self.version + 1,
                                      str(error).splitlines()[0][:4000])
        except Exception as inner:  # noqa: BLE001 - the batch's own error is the one to raise
            print(f"cdc_apply: could not record the failure ({inner})", file=self.out, flush=True)

    def _process(self, df, batch_id: int) -> BatchReport:
        from pyspark.sql import functions as F

        started = time.monotonic()
        wanted = set(self.config.bronze.sources)
        if wanted:
            df = df.where(F.col("source").isin(sorted(wanted)))
        stats = {r.source: r for r in df.groupBy("source").agg(
            F.max("seq").alias("last"), F.min("seq").alias("first"), F.count(F.lit(1)).alias("n"),
            F.sum(F.length("payload")).alias("bytes")).collect()}
        version = self.version + 1
        report = BatchReport(version, batch_id, clock=started)
        if not stats:
            return report
        check_late_rows(self.spark, self.bronze, self.config, self.states, stats)
        lag_query = self._side.submit(self._bronze_lag, {source: int(row.last) for source, row in stats.items()})
        last = {source: int(row.last) for source, row in stats.items()}
        prepared = {source: self.formats.of(source).prepare(self.spark, self.bronze, source,
                                                            self.states.get(source, SourceState()), last[source], version)
                    for source in stats}
        last = {source: p.last_seq for source, p in prepared.items()}
        # The micro-batch says how far each source has landed; the rows themselves are read from the
        # bronze table by seq, so however Spark splits bronze commits into micro-batches, every row is
        # seen once and in seq order.
        new_rows = None
        for source in stats:
            state = self.states.get(source, SourceState())
            cond = (F.col("source") == source) & (F.col("seq") > state.applied_seq) & (F.col("seq") <= last[source])
            new_rows = cond if new_rows is None else new_rows | cond
        fresh = self._messages().where(new_rows).select("source", "seq", "lsn", "payload")
        small = sum(int(r.bytes or 0) for r in stats.values()) <= FRESH_CACHE_BYTES
        if small:
            fresh = fresh.persist()
        try:
            return self._process_fresh(fresh, stats, report, last, prepared, lag_query, started, small)
        finally:
            fresh.unpersist()   # a no-op for a batch read from bronze each time

    def _process_fresh(self, fresh, stats, report: BatchReport, last, prepared, lag_query, started: float,
                       small: bool) -> BatchReport:
        version = report.apply_version
        report.messages = sum(int(row.n) for row in stats.values())
        # The bronze contract's count (a shuffle of every row's seq) runs beside the control scan and
        # the planning, which are mostly the driver's Python; nothing is written before it is answered.
        counting = self._side.submit(count_rows, fresh)
        try:
            plan = self._plan(fresh, stats, last, prepared)
        except BaseException:
            counting.result()   # a (source, seq) landed twice is the cause to name, not what it broke
            raise
        landed = counting.result()
        states = {s: replace(b.state, applied_rows=applied_rows(self.spark, self.bronze, s, b.previous) + landed.get(s, 0))
                  if self.formats.of(s).counts_bronze_rows else replace(b.state, format_state=prepared[s].format_state)
                  for s, b in plan.sources.items()}
        loads = self._snapshot_loads(plan)
        decoded = self._decode(fresh, plan, report.messages, loads)
        report.mark("plan")
        try:
            self._apply(plan, decoded, version, report, loads, logs_beside=small and not loads)
        finally:
            if decoded is not None:
                decoded.unpersist()
        self._fault("progress")
        self._write_progress(plan, states, stats, report, prepared, lag_query)
        report.mark("progress")
        self.version = version
        self.states = {**self.states, **states}
        report.seconds = time.monotonic() - started
        self.reports.append(report)
        print(report.line(), file=self.out, flush=True)
        return report

    def _plan(self, fresh, stats, last: dict[str, int], prepared) -> BatchPlan:
        """Collect the batch's control messages and plan it (``cdc_apply.planning.plan``)."""
        controls: dict[str, list] = {s: [] for s in stats}
        # Through Arrow: a batch of 100,000 transactions has 200,000 Begin and Commit rows, and a Spark Row
        # per message took seconds to build.
        control_rows = fresh.where(is_control() | is_directive()).select("source", "seq", "lsn", "payload").toArrow()
        for source, seq, lsn, payload in zip(*(control_rows.column(k).to_pylist() for k in range(4))):
            controls[source].append((seq, lsn, payload))
        inputs = {}
        for source in stats:
            self.histories.setdefault(source, SchemaHistory())
            rows = sorted(controls[source])
            inputs[source] = (self.states.get(source, SourceState()), self.histories[source], rows, last[source])
        # The decode turns every bad message into an error row, whatever the policy: under "fail" the
        # batch then stops on the first of them (first_decode_error), not on whichever task failed first.
        return plan_batch(inputs, self._first_change_seq, self.type_options, self.config.apply.origin,
                          quarantine=True, table_selected=self.config.table_selected,
                          txn_users={s: p.users for s, p in prepared.items() if p.users},
                          quarantine_controls=self.config.apply.on_error == "quarantine")

    def _snapshot_loads(self, plan: BatchPlan) -> tuple[SnapshotLoad, ...]:
        """The batch's snapshots whose rows go straight into silver (cdc_apply.planning.snapshot_loads):
        not under the quarantine policy (their load decodes without error rows) nor for tables that keep
        a history table (its versions come from the decoded change rows)."""
        if self.config.apply.on_error != "fail":
            return ()

        def wanted(source: str, relation_id: int) -> bool:
            name = self.histories[source].relations[relation_id].latest.qualified_name
            return self.config.table_selected(name) and self.config.history_for(name) is None

        return find_snapshot_loads(plan, self.histories, wanted)

    def _decode(self, fresh, plan: BatchPlan, messages: int = 0, loads: tuple[SnapshotLoad, ...] = ()):
        from pyspark.sql import functions as F

        if not plan.has_changes and not any(
                b.state.applied_seq > b.previous.applied_seq for b in plan.sources.values()):
            return None
        changes = fresh.where(~is_control()).select("source", "seq", "lsn", "payload")
        # Counted on the batch's own rows: planning the union with older rows would cost a Delta
        # file-skipping job here and another in the decode; those rows only add partitions.
        partitions = changes.rdd.getNumPartitions()
        reread = None
        for source, batch in plan.sources.items():
            for a, b in batch.reread:
                cond = (F.col("source") == source) & F.col("seq").between(a, b)
                reread = cond if reread is None else reread | cond
        if reread is not None:
            old = (self._messages().where(reread & ~is_control())
                   .select("source", "seq", "lsn", "payload"))
            changes = changes.unionByName(old)
        changes = without_loads(changes, loads)
        # As few partitions as keep each cached block small (DECODE_VALUES_PER_PARTITION).
        messages -= sum(b - a + 1 for load in loads for a, b in load.ranges)   # loaded on their own
        per_partition = max(1, DECODE_VALUES_PER_PARTITION // len(output_schema(plan.decode)))
        wanted = max(self.spark.sparkContext.defaultParallelism, -(-messages // per_partition))
        if partitions < wanted:
            changes = changes.repartition(wanted)
        decoded = changes.mapInArrow(partial(decode_batches, plan=plan.decode), output_ddl(plan.decode))
        return decoded.persist()

    def _apply(self, plan: BatchPlan, decoded, version: int, report: BatchReport,
               loads: tuple[SnapshotLoad, ...] = (), logs_beside: bool = False) -> None:
        """The decode's counts, then the silver tables and the logs (beside the tables: ``logs_beside``)."""
        from pyspark.sql import functions as F

        if decoded is None:
            self.logs.write_schema(plan, version)
            report.quarantined = self.logs.write_quarantine(plan, None, version)
            report.mark("logs")
            return
        # One job decodes everything (filling the cache) and returns what the driver needs.
        truncate = F.when((F.col("op") == "T") & F.col("error").isNull(), F.struct(
            "source", "seq", "commit_lsn", "txn", "trunc_relids", "trunc_options"))
        # Per transaction too when the batch has few: the transactions log is then built on the driver
        # from these counts rather than summed in Spark beside the tables (batch_logs).
        per_txn = counts_per_transaction(plan)
        try:
            counts = [SlotCount(*r) if per_txn else SlotCount(r.source, None, *r[1:]) for r in (
                decoded.groupBy("source", *(["txn"] if per_txn else []), "slot", "op")
                .agg(F.count(F.lit(1)).alias("n"), F.count("toast").alias("toasted"),
                     F.count(F.when((F.col("op") == "U") & F.col("old_kind").isNotNull(), F.col("toast")))
                     .alias("moved_toasted"),
                     F.count("error").alias("errors"), F.max("commit_lsn").alias("last_commit_lsn"),
                     F.collect_list(truncate).alias("truncates")).collect())]
        except Exception as exc:  # surface the decoder's own error, not a JVM stack trace
            raise unwrap_error(exc) from None
        if self.config.apply.on_error == "fail" and any(r.errors for r in counts):
            raise first_decode_error(decoded)
        truncates = sorted((t for r in counts for t in r.truncates), key=lambda t: (t.source, t.seq))
        report.mark("decode")
        report.transactions = sum(len(b.committed) for b in plan.sources.values())
        report.aborted = sum(len(b.assembly.aborted) for b in plan.sources.values())
        # A change quarantined now may have left silver a row PostgreSQL no longer has.
        self.silver.quarantined_sources |= {r.source for r in counts if r.errors}
        self.silver.quarantined_sources |= {s for s, b in plan.sources.items() if b.assembly.bad_controls}
        works = self.silver.plan_tables(plan, self.histories, counts, truncates)
        # Nothing is written until the state is known to match every table the batch writes.
        self.silver.check_tables(works, version, {s: (b.previous.applied_seq, b.last_seq)
                                                  for s, b in plan.sources.items()},
                                 self.books.load_written)
        self.logs.write_schema(plan, version)
        self.silver.loads = {}
        for load in loads:
            self.silver.loads.setdefault((load.source, load.relation_id), []).append(load)
        self.silver.loaded = {}
        quarantined = sum(r.n for r in counts if r.errors)
        report.quarantined = int(quarantined) + sum(len(b.assembly.bad_controls) for b in plan.sources.values())

        def run(work):
            self._fault(f"table:{work.qualified_name}")
            began = time.monotonic()
            stats = self.silver.apply_table(decoded, work, version)
            stats.seconds = time.monotonic() - began
            return work, stats

        def write_logs():
            self._fault("logs")
            self.logs.write_logs(plan, decoded, counts, truncates, version,
                                 load_counts(loads, self.silver.loaded, self._messages))

        # The logs need nothing the tables write but a snapshot load's row counts; each write is guarded by
        # the apply version, so their order does not matter. Beside the tables they fill a small batch's
        # idle cores (~11,000 messages: ~4.0 s against ~4.4 s) but slowed a large one (1M: 48.6 against 46.5 s).
        logs = self._side.submit(write_logs) if logs_beside else None
        try:
            with ThreadPoolExecutor(max_workers=self.config.apply.parallelism) as pool:
                several = len(plan.sources) > 1
                for work, stats in pool.map(run, works):
                    report.tables[f"{work.source}:{work.qualified_name}" if several else work.qualified_name] = stats
                    report.written.append((work.source, work.relation_id, work.qualified_name, stats))
        except BaseException:
            if logs is not None:
                wait([logs])   # nothing of the batch goes on writing after it failed; the tables' error is raised
            raise
        report.mark("tables")
        if logs is None:
            write_logs()
        else:
            logs.result()
        report.mark("logs")

    def _bronze_lag(self, ends: dict[str, int]) -> tuple[dict[str, int], dict[str, float], object]:
        """Bronze's newest seq per source and the age of the oldest change past the batch's end (``ends``:
        the newest bronze seq the batch reads per source), for the lag. Runs beside the batch (its own
        thread), and nothing in the batch waits for it until the progress rows; the newest seq is
        followed through bronze's log (:class:`~cdc_apply.lake.sources.bronze_tail.BronzeTail`) rather than a
        query a batch, the ages are one query and only when bronze is ahead of the batch."""
        floors = {}
        for source in ends:
            state = self.states.get(source)
            floors[source] = 0 if state is None else self.formats.of(source).bronze_seq(state)
        newest = self._tail.newest(floors)
        asked = _now()
        ages = unapplied_ages(self.spark, self.bronze, ends, newest, asked,
                              landed_only={s for s in ends if self.formats.of(s).name != "pgoutput"})
        return newest, ages, asked

    def _write_progress(self, plan: BatchPlan, states, stats, report: BatchReport, prepared, lag_query) -> None:
        version, batch_id = report.apply_version, report.batch_id
        # Lag: bronze rows past the applied point (or past what was transcoded), and the age of the oldest
        # change among them, in bronze as the tail saw it when the batch began.
        bronze_max, ages, asked = lag_query.result()
        now = _now()
        # A change still waiting has aged by the batch's own time since it was asked for.
        ages = {s: age + (now - asked).total_seconds() if age > 0 else 0.0 for s, age in ages.items()}
        applied = {source: self.formats.of(source).bronze_seq(states[source]) for source in plan.sources}
        rows = []
        for source, batch in plan.sources.items():
            state = states[source]
            commit_ts = m.pg_timestamp_to_datetime(state.last_commit_ts) if state.last_commit_ts is not None else None
            lag_seq = max(bronze_max.get(source, applied[source]) - applied[source], 0)
            fresh = self.formats.of(source).freshness(prepared[source])   # e.g. a heartbeat newer than the last commit
            if fresh is not None:
                commit_ts = max(commit_ts, fresh) if commit_ts else fresh
            pending = state.describe_pending()
            carried = pending["open"] + pending["streamed"] + pending["prepared"]
            report.carried += carried
            report.lag_seq = max(report.lag_seq, lag_seq)
            report.lag_seconds = max(report.lag_seconds or 0.0, ages[source])
            if commit_ts is not None:
                since = max((now - commit_ts).total_seconds(), 0.0)
                report.applied_commit_age_seconds = max(report.applied_commit_age_seconds or 0.0, since)
            tables = [(rid, name, t.delta_version, t.history_version, t.last_commit_lsn)
                      for s, rid, name, t in report.written if s == source]
            versions = self.books.table_versions(source)
            for rid, _, silver_version, history_version, _ in tables:
                old = versions.get(str(rid), [None, None])
                versions[str(rid)] = [silver_version if silver_version is not None else old[0],
                                      history_version if history_version is not None else old[1]]
            rows.append((source, version, batch_id, state.applied_seq, state.last_commit_lsn, commit_ts,
                         state.last_end_lsn, state.to_json(), bronze_max.get(source), int(stats[source].n),
                         len(batch.committed), carried, state.oldest_needed_seq(), lag_seq, ages[source], now,
                         tables, json.dumps(versions, separators=(",", ":"))))
        self.books.append(self.spark, "progress", rows, version)
        for row in rows:   # the next batch carries them on
            self.books.keep_table_versions(row[0], json.loads(row[-1]))

    # -- the streaming query --------------------------------------------------------------
    def run(self, once: bool = False, await_termination: bool = True):
        """Start the Structured Streaming query over bronze (``once``: everything available, then stop)."""
        reader = self.spark.readStream.format("delta")
        if self.config.bronze.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", self.config.bronze.max_files_per_trigger)
        if self.config.bronze.max_bytes_per_trigger:
            reader = reader.option("maxBytesPerTrigger", self.config.bronze.max_bytes_per_trigger)
        stream = reader.load(self.bronze.path) if self.bronze.path else reader.table(self.bronze.name)
        writer = (stream.writeStream.foreachBatch(lambda df, batch_id: self.process(df, batch_id))
                  .option("checkpointLocation", self.config.checkpoint_location)
                  .queryName(f"cdc_apply_{self.config.pipeline}"))
        writer = writer.trigger(availableNow=True) if once else writer.trigger(
            processingTime=self.config.apply.trigger_interval)
        try:
            query = writer.start()
        except Exception as exc:
            raise unwrap_error(exc, self.config) from None
        if await_termination:
            try:
                query.awaitTermination()
            except Exception as exc:  # StreamingQueryException wraps our own error: surface that one
                raise unwrap_error(exc, self.config) from None
        return query


__all__ = ["ApplyPipeline", "BatchReport", "SKIP", "ApplyError"]
