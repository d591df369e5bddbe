"""The apply job: bronze micro-batches to silver tables, exactly once.

Per micro-batch (``foreachBatch``):

1. collect the batch's control messages (everything but changes: a small set) and plan it —
   transactions, relation versions, seq ranges — on the driver;
2. decode the change rows once, in parallel (``mapInArrow``), and persist them;
3. per silver table, in parallel threads: evolve the schema, empty the table at a TRUNCATE,
   collapse to one row per key and MERGE;
4. append the transactions log, messages and quarantine (beside step 3 in a small batch without
   a snapshot load) and, last, progress.

Every write is guarded by the pipeline's own apply version (not Spark's batch id): silver commits
record their step in ``userMetadata`` (``ledger.py``), bookkeeping rows their apply version; change
rows at or below a source's applied seq are skipped, so a re-run batch — or a replay of bronze from
the start — changes nothing twice. Over Spark Connect ``lake/batch_loop.py`` calls ``process``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

from cdc_apply.config import Config
from cdc_apply.config.choices import OnError
from cdc_apply.delta.refs import bronze_ref
from cdc_apply.delta.spark_errors import error_text, first_decode_error, lost_commit_race, unwrap_error
from cdc_apply.errors import ApplyError, StopRequested
from cdc_apply.lake.batch_context import BatchContext, Landed
from cdc_apply.lake.batch_loop import run_batches
from cdc_apply.lake.books.batch_logs import BatchLogs
from cdc_apply.lake.books.batch_logs import now as _now
from cdc_apply.lake.books.bookkeeping import Bookkeeping, failed_source
from cdc_apply.lake.control_scan import ControlScan, scan_controls, scan_rows
from cdc_apply.lake.decode_stage import count_changes, decode_changes
from cdc_apply.lake.local_batch import bounds_of, collect_micro_batch, count_local
from cdc_apply.lake.progress_rows import progress_rows
from cdc_apply.lake.report import BatchReport
from cdc_apply.lake.silver.merge import BATCH_SETTINGS
from cdc_apply.lake.silver.snapshot_loads import load_counts
from cdc_apply.lake.silver_tables import SilverTables
from cdc_apply.lake.sources.bronze import check_bronze
from cdc_apply.lake.sources.bronze_contract import applied_rows, check_late_rows, count_rows
from cdc_apply.lake.sources.bronze_files import local_unapplied_ages
from cdc_apply.lake.sources.bronze_tail import BronzeTail, unapplied_ages
from cdc_apply.lake.sources.formats import SourceFormats
from cdc_apply.lake.sources.micro_batch import micro_batch_bounds
from cdc_apply.lake.sources.payload_columns import first_change_seqs
from cdc_apply.log import TextOut
from cdc_apply.metrics.registry import record_apply_batch, record_apply_failure
from cdc_apply.pgoutput.types import resolve_column_type
from cdc_apply.planning.decode_plan import SKIP
from cdc_apply.planning.plan import BatchPlan, plan_batch
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.snapshot_loads import SnapshotLoad, find_snapshot_loads
from cdc_apply.planning.state import SourceState
from cdc_apply.planning.table_plan import SlotCount
from cdc_apply.planning.tables import type_options_of
from cdc_apply.spark.session import session_settings

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from cdc_apply.delta.engine import SparkTables

# A batch whose bronze payloads come to at most this many bytes is small: it is read from bronze once and
# kept in memory for the batch (each read otherwise pays a Delta file-skipping job and a scan; for a large
# batch the copy costs more than the reads it saves), and writes its logs beside its tables (_apply).
FRESH_CACHE_BYTES = 16 << 20
# The decode turns every bad message into an error row whatever apply.on_error says (plan_batch's
# ``quarantine``): under "fail" the batch then stops on the first of them (first_decode_error), the lowest
# seq, not on whichever task failed first.
DECODE_ERRORS_AS_ROWS = True


# A batch that lost a commit race to another writer of one of its tables (a forget, optimize) runs again, whole,
# up to this many times in all; a conflict that keeps coming is another apply job, the StateError's case.
CONFLICT_ATTEMPTS = 3
def fits_fresh_cache(size: int | None) -> bool:
    """Whether ``size`` bytes (None: not known) may be a small batch's (``FRESH_CACHE_BYTES``). Asked of the
    batch's files before its bounds query, which then sums the payloads only where they may fit: files
    hold the payloads, compressed, beside the other columns and other sources' rows, so files larger
    than the budget make the batch large — an in-place read, never a wrong one."""
    return size is None or size <= FRESH_CACHE_BYTES


@dataclass(frozen=True)
class Resumed:
    """What an apply job starts from, read by :meth:`ApplyPipeline.open`."""

    books: Bookkeeping
    formats: SourceFormats
    version: int                             # the last applied batch's version (0: none)
    states: dict                             # source -> its applied state (cdc_apply.lake.books.progress)
    histories: dict[str, SchemaHistory]      # source -> the schema history the applied batches recorded
    quarantined_sources: set[str]            # sources with a change ever quarantined


def _resume(tables: SparkTables, config: Config, books: Bookkeeping, formats: SourceFormats,
            created: frozenset[str] = frozenset()) -> Resumed:
    """Where the applied batches left off, read from the tables (``created``: the tables this process has just
    made, which hold no row: a new pipeline's first run reads none of them)."""
    version, states = (0, {}) if "progress" in created else books.load_progress(tables)
    # The versions recorded by the batches progress covers (not those of a batch cut short after its append).
    histories = ({} if {"schema_history", "type_cache"} <= created
                 else books.load_history(tables, through_version=version))
    quarantined = set() if "quarantine" in created else books.quarantined_sources(tables)
    return Resumed(books, formats, version, states, histories, quarantined)


class ApplyPipeline:
    """Holds the carried state between micro-batches of one apply job."""

    @classmethod
    def open(cls, tables: SparkTables, config: Config, out: TextOut = sys.stdout,
             fault_hook: Callable[[str], None] | None = None) -> ApplyPipeline:
        """The job of ``config`` on ``tables`` (the engine its entry point chose): bronze checked, the
        bookkeeping tables made where missing, and where the applied batches left off read (a new pipeline's
        tables hold nothing to read)."""
        bronze = bronze_ref(config)
        check_bronze(tables, bronze, "bronze.path" if config.bronze.path else "bronze.table")
        books = Bookkeeping(config)
        try:
            created = books.create_all(tables)
        except Exception as exc:  # another job creating the same tables: the named error, not Delta's
            raise unwrap_error(exc, config) from None
        formats = SourceFormats(config)
        formats.create_tables(tables)
        return cls(tables, config, _resume(tables, config, books, formats, created), out, fault_hook)

    def __init__(self, tables: SparkTables, config: Config, resumed: Resumed, out: TextOut = sys.stdout,
                 fault_hook: Callable[[str], None] | None = None) -> None:
        """A job over what :meth:`open` read (no I/O here)."""
        self.tables = tables
        self.spark = tables.spark
        self.config = config
        self.out = out
        self.bronze = bronze_ref(config)
        self.books = resumed.books
        self.version, self.states = resumed.version, resumed.states
        self.histories: dict[str, SchemaHistory] = resumed.histories
        self.type_options = type_options_of(config)
        self.silver = SilverTables(tables, config, self.type_options)
        # Read once: the policy decides how planning treats a bad control message, whether a batch stops
        # at its first error row, and whether snapshots load on their own (their load has no error rows).
        self.quarantines = config.apply.on_error == OnError.QUARANTINE
        self.quarantined_sources = resumed.quarantined_sources
        self.logs = BatchLogs(tables, config, self.books, self.silver.names_of, self._type_name)
        self.formats = resumed.formats
        # Beside the batch: the lag, the bronze contract's count and a small batch's logs (_apply).
        self._side = ThreadPoolExecutor(max_workers=3, thread_name_prefix="cdc_apply-side")
        self._tail = BronzeTail(tables, self.bronze)
        # Tests inject crashes here: called with "table:<ns.name>", "history:<ns.name>" (after a table's
        # history write, before its silver writes), "logs" and "progress".
        self._fault = fault_hook or (lambda point: None)
        self.reports: list[BatchReport] = []
        # request_stop: set, a batch not yet begun is refused; the query stops when none runs.
        self.stopping = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        self._query: StreamingQuery | None = None

    def _messages(self, spark=None):
        """Every source's pgoutput messages (bronze's, or transcoded from it: see cdc_apply.lake.sources.formats),
        read on ``spark`` (the job's session unless given: a table's own, whose settings plan the read)."""
        return self.formats.messages(spark or self.spark, self.bronze)

    def _first_change_seq(self, source: str, ranges, subxids):
        """Seq of each subtransaction's first change within ``ranges`` (read from bronze, one job)."""
        return first_change_seqs(self.spark, self._messages(), source, ranges, subxids)

    def _type_name(self, source: str):
        history = self.histories[source]
        return lambda oid, typmod: resolve_column_type(oid, typmod, history.types, self.type_options).pg_name

    # -- one batch -------------------------------------------------------------------
    def process(self, df, batch_id: int) -> BatchReport:
        """Apply one micro-batch (``foreachBatch``); returns what it did, also printed as a line."""
        with self._idle:
            if self.stopping.is_set():
                # Not applied and not a failure: the streaming query re-runs a batch it has not committed.
                raise StopRequested("this batch runs again at the next start")
            self._busy = True
        try:
            with session_settings(self.spark, BATCH_SETTINGS):
                for attempt in range(1, CONFLICT_ATTEMPTS + 1):
                    try:
                        return self._process(df, batch_id)
                    except Exception as exc:
                        if attempt < CONFLICT_ATTEMPTS and lost_commit_race(exc):
                            self._run_again(exc, attempt)
                            continue
                        self._record_failure(unwrap_error(exc))
                        raise
                raise AssertionError("unreachable: the last attempt returns or raises")
        finally:
            with self._idle:
                self._busy = False
                self._idle.notify_all()

    def _run_again(self, exc: Exception, attempt: int) -> None:
        """After a batch lost a commit race to another writer of a table (``cdc-apply forget``'s DELETE,
        ``optimize``'s compaction): read where the applied batches left off again, as a restart would, so the
        batch runs again whole — its writes already committed are recognised by their tags and not repeated."""
        lines = [ln.strip() for ln in error_text(exc).splitlines() if ln.strip()]
        line = next((ln for ln in lines if "Concurrent" in ln or "CONCURRENT" in ln), lines[0] if lines else
                    type(exc).__name__)
        print(f"cdc_apply: batch {self.version + 1} lost a commit race to another writer ({line[:200]}); "
              f"running it again (attempt {attempt + 1} of {CONFLICT_ATTEMPTS})", file=self.out, flush=True)
        resumed = _resume(self.tables, self.config, Bookkeeping(self.config), self.formats)
        self.books, self.version, self.states = resumed.books, resumed.version, resumed.states
        self.histories, self.quarantined_sources = resumed.histories, resumed.quarantined_sources
        self.silver = SilverTables(self.tables, self.config, self.type_options)
        self.logs = BatchLogs(self.tables, self.config, self.books, self.silver.names_of, self._type_name)

    def request_stop(self) -> None:
        """Stop the job once the batch under way (if any) is applied: no batch is cut short, none starts
        after. Safe from any thread (a signal handler's, for one); returns at once, the stop goes on in a
        thread of its own."""
        self.stopping.set()
        threading.Thread(target=self._stop_when_idle, name="cdc_apply-stop", daemon=True).start()

    def _stop_when_idle(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: not self._busy)
        query = self._query
        if query is not None:   # a streaming query; the Connect loop sees ``stopping`` itself
            query.stop()

    def _record_failure(self, error: Exception) -> None:
        """Leave the failed attempt where ``cdc-apply status`` finds it, under the source the error names
        (none: a failure of the whole batch); never hide the error itself."""
        record_apply_failure(self.config.pipeline, str(error))
        try:
            self.books.record_failure(self.tables, [failed_source(error)], self.version + 1,
                                      str(error).splitlines()[0][:4000])
        except Exception as inner:  # noqa: BLE001 - the batch's own error is the one to raise
            print(f"cdc_apply: could not record the failure ({inner})", file=self.out, flush=True)

    def _process(self, df, batch_id: int) -> BatchReport:
        from pyspark.sql import functions as F

        started = time.monotonic()
        wanted = set(self.config.bronze.sources)
        if wanted:
            df = df.where(F.col("source").isin(sorted(wanted)))
        stats, local, measured = self._bounds(df, wanted)
        version = self.version + 1
        report = BatchReport(version, batch_id, clock=started)
        if not stats:
            return report
        check_late_rows(self.spark, self.bronze, self.config, self.states, stats)
        last = {source: int(row.last) for source, row in stats.items()}
        lag_query = self._side.submit(self._bronze_lag, last)
        prepared = {source: self.formats.of(source).prepare(self.spark, self.bronze, source,
                                                            self.states.get(source, SourceState()), last[source],
                                                            version)
                    for source in stats}
        last = {source: p.last_seq for source, p in prepared.items()}
        new_rows = self._new_rows(stats, last)
        payloads = sum(int(r.bytes or 0) for r in stats.values()) if measured else None   # summed only when measured
        small = payloads is not None and fits_fresh_cache(payloads)
        holds = small and self._holds_the_batch(stats, last)
        if local is None and holds:   # files not sized (Spark Connect) or larger than the rows: by the payloads
            local = collect_micro_batch(df, payloads)
        if local is not None and holds:
            return self._process_fresh(None, Landed(stats, last, prepared, small, lag_query, started, local=local),
                                       report)
        # A large batch reads bronze by seq even so: the micro-batch is a scan of Spark's own RDD, every
        # column of every row at each read, where a read of bronze prunes columns and skips files.
        rows = df if holds else self._messages()
        fresh = rows.where(new_rows).select("source", "seq", "lsn", "payload")
        if small:
            fresh = fresh.persist()
        # A large batch's bronze files, read in place, can prove their seqs unique without a shuffle
        # (bronze_contract.count_runs); a small one is counted on its cached rows.
        in_place = (self.bronze.read(self.spark).where(new_rows)
                    if not small and all(self.formats.of(s).counts_bronze_rows for s in stats) else None)
        try:
            return self._process_fresh(fresh, Landed(stats, last, prepared, small, lag_query, started, in_place),
                                       report)
        finally:
            fresh.unpersist()   # a no-op for a batch read from bronze each time

    def _bounds(self, df, wanted: set[str]) -> tuple[dict, Any, bool]:
        """Each source's rows in the micro-batch (first and last seq, count; payload bytes when ``measured``),
        the batch's rows on the driver when it came whole (``local``), and whether its size was measured.

        A micro-batch whose files are small (as the plan sizes them, no job) comes to the driver whole
        (local_batch.py). Otherwise the payloads' bytes decide whether the batch is kept in memory; a batch
        whose files alone are larger skips summing a length per payload, and takes its bounds from its files'
        statistics where they say them (a query of the micro-batch reads every payload: micro_batch.py)."""
        from pyspark.sql import functions as F

        planned = self.tables.planned_bytes(df)
        measured = fits_fresh_cache(planned)
        local = collect_micro_batch(df, planned) if measured else None
        if local is not None:
            return bounds_of(local), local, measured
        from_files = None if measured else micro_batch_bounds(self.tables, df, self.bronze, wanted or None)
        if from_files is not None:
            return from_files, None, measured
        bounds = [F.max("seq").alias("last"), F.min("seq").alias("first"), F.count(F.lit(1)).alias("n")]
        if measured:
            bounds.append(F.sum(F.length("payload")).alias("bytes"))
        return {r.source: r for r in df.groupBy("source").agg(*bounds).collect()}, None, measured

    def _new_rows(self, stats, last: dict[str, int]):
        """The condition on bronze's rows of the batch: each source's seqs past its applied one up to ``last``.

        The micro-batch says how far each source has landed; the rows themselves are read from the bronze
        table by seq, so however Spark splits bronze commits into micro-batches, every row is seen once and
        in seq order — unless the micro-batch holds exactly those rows (_holds_the_batch)."""
        from pyspark.sql import functions as F

        new_rows = None
        for source in stats:
            state = self.states.get(source, SourceState())
            cond = (F.col("source") == source) & (F.col("seq") > state.applied_seq) & (F.col("seq") <= last[source])
            new_rows = cond if new_rows is None else new_rows | cond
        return new_rows

    def _holds_the_batch(self, stats, last: dict[str, int]) -> bool:
        """Whether the micro-batch's rows are the batch's rows: of pgoutput sources only, each source's
        seqs from the one after its applied seq to ``last``, as many rows as seqs (a lander numbers its
        messages without gaps). Bronze rows in that range are then these, or a (source, seq) landed twice
        — which the batch's uniqueness count finds among these, or which has a seq at or below the applied
        one in a later micro-batch (``check_late_rows``) — so reading bronze by seq, which costs a Delta
        file-skipping job at every read (~0.3 s a small batch here), would find nothing else."""
        for source, row in stats.items():
            applied = self.states.get(source, SourceState()).applied_seq
            if (self.formats.of(source).name != "pgoutput" or int(row.first) != applied + 1
                    or int(row.n) != last[source] - applied):
                return False
        return True

    def _process_fresh(self, fresh, landed: Landed, report: BatchReport) -> BatchReport:
        version = report.apply_version
        report.messages = sum(int(row.n) for row in landed.stats.values())
        # The bronze contract's count (a shuffle of every row's seq, unless its files' runs prove them
        # unique) runs beside the control scan and the planning, which are mostly the driver's Python;
        # nothing is written before it is answered.
        counting = (self._side.submit(count_rows, fresh, landed.bronze_rows) if landed.local is None
                    else self._side.submit(count_local, landed.local))
        try:
            plan, scanned = self._plan(fresh, landed)
        except BaseException:
            try:
                counting.result()
            except Exception as duplicate:   # a (source, seq) landed twice is the cause to name, not what it broke
                raise duplicate from None
            raise
        counted = counting.result()
        states = {s: replace(b.state,
                             applied_rows=applied_rows(self.spark, self.bronze, s, b.previous) + counted.get(s, 0))
                  if self.formats.of(s).counts_bronze_rows
                  else replace(b.state, format_state=landed.prepared[s].format_state)
                  for s, b in plan.sources.items()}
        loads = self._snapshot_loads(plan, scanned)
        decoded, counts = decode_changes(self.tables, self._messages, fresh, plan, report.messages, loads, scanned,
                                         landed.local)
        report.mark("plan")
        try:
            self._apply(plan, decoded, counts, version, report, loads, logs_beside=landed.small and not loads)
        finally:
            if decoded is not None:
                decoded.unpersist()
        self._fault("progress")
        rows = progress_rows(plan, states, landed, report, self.formats, self.books)
        self.books.append(self.tables, "progress", rows, version)
        for row in rows:   # the next batch carries them on
            self.books.keep_table_versions(row[0], json.loads(row[-1]))
        report.mark("progress")
        self.version = version
        self.states = {**self.states, **states}
        report.seconds = time.monotonic() - landed.started
        self.reports.append(report)
        record_apply_batch(self.config.pipeline, report, self.config.tables)
        print(report.line(), file=self.out, flush=True)
        return report

    def _plan(self, fresh, landed: Landed) -> tuple[BatchPlan, ControlScan]:
        """Collect the batch's control messages and plan it (``cdc_apply.planning.plan``); also returns
        the scan, which says what snapshot loads leave to the general decode (:meth:`_snapshot_loads`)."""
        scanned = (scan_controls(fresh, landed.stats) if landed.local is None
                   else scan_rows(zip(*(landed.local.column(k).to_pylist() for k in range(4))), landed.stats))
        controls = scanned.controls
        inputs = {}
        for source in landed.stats:
            self.histories.setdefault(source, SchemaHistory())
            rows = sorted(controls[source])
            inputs[source] = (self.states.get(source, SourceState()), self.histories[source], rows,
                              landed.last[source])
        plan = plan_batch(inputs, self._first_change_seq, self.type_options, self.config.apply.origin,
                          quarantine=DECODE_ERRORS_AS_ROWS, table_selected=self.config.table_selected,
                          txn_users={s: p.users for s, p in landed.prepared.items() if p.users},
                          quarantine_controls=self.quarantines)
        return plan, scanned

    def _snapshot_loads(self, plan: BatchPlan, scanned: ControlScan) -> tuple[SnapshotLoad, ...]:
        """The batch's snapshots whose rows go straight into silver (cdc_apply.planning.snapshot_loads):
        not under the quarantine policy (their load decodes without error rows) nor for tables that keep
        a history table (its versions come from the decoded change rows); placed by seq where the
        control scan allows (``ControlScan.place_loads``)."""
        if self.quarantines:
            return ()

        def wanted(source: str, relation_id: int) -> bool:
            name = self.histories[source].relations[relation_id].latest.qualified_name
            return self.config.table_selected(name) and self.config.history_for(name) is None

        return scanned.place_loads(find_snapshot_loads(plan, self.histories, wanted),
                                   lambda source: self.states.get(source, SourceState()).applied_seq)

    def _apply(self, plan: BatchPlan, decoded, counts: list[SlotCount] | None, version: int, report: BatchReport,
               loads: tuple[SnapshotLoad, ...] = (), logs_beside: bool = False) -> None:
        """The decode's counts (``counts``: None until counted), then the silver tables and the logs (beside
        the tables: ``logs_beside``)."""
        if decoded is None:
            self.logs.write_schema(plan, version)
            report.quarantined = self.logs.write_quarantine(plan, None, version)
            report.mark("logs")
            return
        if counts is None:
            counts = count_changes(plan, decoded)
        if not self.quarantines and any(r.errors for r in counts):
            raise first_decode_error(decoded)
        truncates = sorted((t for r in counts for t in r.truncates), key=lambda t: (t.source, t.seq))
        report.mark("decode")
        report.transactions = sum(len(b.committed) for b in plan.sources.values())
        report.aborted = sum(len(b.assembly.aborted) for b in plan.sources.values())
        # A change quarantined now may have left silver a row PostgreSQL no longer has.
        self.quarantined_sources |= {r.source for r in counts if r.errors}
        self.quarantined_sources |= {s for s, b in plan.sources.items() if b.assembly.bad_controls}
        batch = BatchContext(version, plan, decoded, BatchContext.group_loads(loads), self._messages, self._fault,
                             frozenset(self.quarantined_sources))
        tables = self.silver.plan_tables(plan, self.histories, counts, truncates)
        # Nothing is written until the state is known to match every table the batch writes.
        self.silver.check_tables(batch, tables, self.books.load_written)
        self.logs.write_schema(plan, version)
        quarantined = sum(r.n for r in counts if r.errors)
        report.quarantined = int(quarantined) + sum(len(b.assembly.bad_controls) for b in plan.sources.values())

        def run(planned):
            batch.fault(f"table:{planned.work.qualified_name}")
            began = time.monotonic()
            stats = self.silver.apply_table(batch, planned)
            stats.seconds = time.monotonic() - began
            return planned.work, stats

        def write_logs(loaded: dict[tuple[str, int], int]):
            """``loaded``: (source, txn) -> rows a table's one snapshot load wrote (TableStats.loaded)."""
            batch.fault("logs")
            self.logs.write_logs(plan, decoded, counts, truncates, version, load_counts(loads, loaded, self._messages))

        # The logs need nothing the tables write but a snapshot load's row counts; each write is guarded by
        # the apply version, so their order does not matter. Beside the tables they fill a small batch's
        # idle cores; a large batch keeps both cores busy without them (docs/ARCHITECTURE.md, step 6).
        logs = self._side.submit(write_logs, {}) if logs_beside else None   # beside: no loads to count
        loaded: dict[tuple[str, int], int] = {}
        try:
            with ThreadPoolExecutor(max_workers=self.config.apply.parallelism) as pool:
                several = len(plan.sources) > 1
                for work, stats in pool.map(run, tables):
                    if stats.past_rules:
                        print(stats.past_rules, file=self.out, flush=True)
                    report.tables[f"{work.source}:{work.qualified_name}" if several else work.qualified_name] = stats
                    report.written.append((work.source, work.relation_id, work.qualified_name, stats))
                    loaded.update({(work.source, txn): rows for txn, rows in stats.loaded.items()})
        except BaseException:
            if logs is not None:
                wait([logs])   # nothing of the batch goes on writing after it failed; the tables' error is raised
            raise
        report.mark("tables")
        if logs is None:
            write_logs(loaded)
        else:
            logs.result()
        report.mark("logs")

    def _bronze_lag(self, ends: dict[str, int]) -> tuple[dict[str, int], dict[str, float], object]:
        """Bronze's newest seq per source and the age of the oldest change past the batch's end (``ends``:
        the newest bronze seq the batch reads per source), for the lag. Runs beside the batch (its own
        thread), and nothing in the batch waits for it until the progress rows; the newest seq is
        followed through bronze's log (:class:`~cdc_apply.lake.sources.bronze_tail.BronzeTail`) rather than a
        query a batch, the ages are read only when bronze is ahead of the batch: by delta-rs on a local
        bronze (:func:`~cdc_apply.lake.sources.bronze_files.local_unapplied_ages`), else by one Spark query."""
        floors = {}
        for source in ends:
            state = self.states.get(source)
            floors[source] = 0 if state is None else self.formats.of(source).bronze_seq(state)
        newest = self._tail.newest(floors)
        asked = _now()
        landed_only = {s for s in ends if self.formats.of(s).name != "pgoutput"}
        # A local bronze is read by delta-rs (no Spark job beside the batch); elsewhere, by Spark.
        ages = local_unapplied_ages(self.bronze, ends, newest, asked, landed_only)
        if ages is None:
            ages = unapplied_ages(self.spark, self.bronze, ends, newest, asked, landed_only=landed_only)
        return newest, ages, asked

    def run(self, once: bool = False, await_termination: bool = True):
        """Start the Structured Streaming query over bronze (``once``: everything available, then stop);
        :meth:`request_stop` ends it cleanly."""
        if not self.tables.streams_in_driver:   # foreachBatch would run in the server's Python: batch_loop.py
            return run_batches(self, once, self.stopping)
        # Bronze is append-only: a commit that removes rows from it is a forget's DELETE (cdc-apply forget,
        # after the job applied those messages), whose rewritten files hold messages already applied.
        reader = self.spark.readStream.format("delta").option("skipChangeCommits", "true")
        if self.config.bronze.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", self.config.bronze.max_files_per_trigger)
        if self.config.bronze.max_bytes_per_trigger:
            reader = reader.option("maxBytesPerTrigger", self.config.bronze.max_bytes_per_trigger)
        stream = self.bronze.load(reader)

        def each_batch(df, batch_id: int) -> None:
            self.process(df, batch_id)

        writer = (stream.writeStream.foreachBatch(each_batch)
                  .option("checkpointLocation", self.config.checkpoint_location)
                  .queryName(f"cdc_apply_{self.config.pipeline}"))
        writer = writer.trigger(availableNow=True) if once else writer.trigger(
            processingTime=self.config.apply.trigger_interval)
        try:
            query = self._query = writer.start()
        except Exception as exc:
            raise unwrap_error(exc, self.config) from None
        if self.stopping.is_set():   # asked to stop while the query was starting
            self._stop_when_idle()
        if await_termination:
            try:
                query.awaitTermination()
            except Exception as exc:  # StreamingQueryException wraps our own error: surface that one
                if self.stopping.is_set() and StopRequested.summary in str(exc):
                    return query   # a batch refused while stopping: it runs again at the next start
                raise unwrap_error(exc, self.config) from None
        return query

__all__ = ["ApplyPipeline", "BatchReport", "SKIP", "ApplyError"]
