"""``cdc-apply verify``: each silver table of a source compared with its live PostgreSQL table at one point.

1. **The point.** One snapshot of the source whose consistent point ``C`` is exact
   (:class:`~cdc_apply.verification.source.SourceSnapshot`): it shows every transaction committed below ``C``.
2. **The source's side**, read in a thread of its own from the start: each table's key space cut into ranges
   (by its first key column's order; a keyless table into buckets of its rows' hashes), per range a count
   and a hash sum, one scan grouped by range (at most ``max_source_rows_per_second``: a query per range).
3. **Silver at or past the point**, at the same time. Wait until the apply job has applied a commit at or
   past ``C``, pin each silver table's newest version, and leave out of both sides the keys a transaction
   committed at or past ``C`` changed — the history table says which (its versions made or ended at or past
   ``C``; read after the pin, it also holds a batch under way, whose history is written before its silver).
   Every other key had the same state at ``C`` as in the pinned silver, so the comparison is exact while
   both keep changing. Silver sums the rows of the whole table in one aggregation
   (:mod:`cdc_apply.verification.table`).
4. **Drill down** only where the whole table differs: silver's sums per range, then the rows of the ranges
   that differ on both sides, key by key.

Each run appends one row per table to the ``verifications`` state table.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

from cdc_apply.config import Config
from cdc_apply.delta.refs import silver_ref_for, state_ref
from cdc_apply.errors import VerifyError
from cdc_apply.lake.books.bookkeeping import Bookkeeping
from cdc_apply.lander.dsn import resolve_dsn
from cdc_apply.lander.snapshots.requests import emit_request
from cdc_apply.pgoutput.messages import format_lsn, parse_lsn
from cdc_apply.planning.tables import type_options_of
from cdc_apply.verification import compare as cmp
from cdc_apply.verification import silver as sv
from cdc_apply.verification import table as tb
from cdc_apply.verification.repair import repair_targets, wait_repaired
from cdc_apply.verification.source import SourceSnapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables
    from cdc_apply.delta.refs import TableRef
    from cdc_apply.log import TextOut
    from cdc_apply.planning.schema import RelationHistory

VERIFICATIONS = "verifications"


@dataclass
class Verification:
    """One run: the source's point, how far silver was applied when it was read, one result per table."""

    source: str
    lsn: int
    applied_lsn: int | None = None
    tables: list[cmp.TableResult] = field(default_factory=list)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    seconds: float = 0.0
    source_rows_read: int = 0
    repair: dict | None = None             # --repair: what was copied again ({"tables", "ranges", "lsn"})
    repaired: "Verification | None" = None  # --repair: the differing tables verified again after the copy
    # Seconds per phase, summed over tables (the source's and silver's sides overlap): where a run's time goes.
    phases: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, phase: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.phases[phase] = round(self.phases.get(phase, 0.0) + time.monotonic() - started, 3)

    @property
    def exit_code(self) -> int:
        """Of each table's last verification: after a repair, the repaired tables' second one."""
        again = {t.table: t for t in self.repaired.tables} if self.repaired else {}
        return cmp.exit_code([again.get(t.table, t) for t in self.tables])

    def lines(self) -> list[str]:
        head = (f"source {self.source}: verified at {format_lsn(self.lsn)} (silver applied to "
                f"{format_lsn(self.applied_lsn) if self.applied_lsn is not None else '-'}) in {self.seconds:.1f} s")
        out = [head] + [t.line() for t in self.tables]
        if self.repair:
            ranges = self.repair["ranges"]
            parts = ([f"{len(ranges)} key ranges of {', '.join(sorted({r[0] for r in ranges}))}"] if ranges else []) + \
                [f"{t} whole" for t in self.repair["tables"]]
            out.append(f"repair: copied again {'; '.join(parts)} (request at {self.repair['lsn']})")
        if self.repaired:
            out += ["after repair: " + line for line in self.repaired.lines()]
        return out

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"run_id": self.run_id, "source": self.source, "lsn": format_lsn(self.lsn),
               "applied_lsn": format_lsn(self.applied_lsn) if self.applied_lsn is not None else None,
               "seconds": round(self.seconds, 3), "exit_code": self.exit_code, "phases": self.phases,
               "tables": [t.as_dict() for t in self.tables]}
        if self.repair:
            out["repair"] = {**self.repair, "after": self.repaired.as_dict() if self.repaired else None}
        return out


def verify(spark: SparkSession, config: Config, tables: Sequence[str] | None = None, range_rows: int | None = None,
           max_source_rows_per_second: float | None = None, wait_seconds: float | None = None, samples: int = 5,
           record: bool = True, dsn: str | None = None, repair: bool = False) -> Verification:
    """Compare each silver table of ``config``'s source (or ``tables``, qualified names) with the live
    PostgreSQL table at one consistent point; append the results to the ``verifications`` state table
    (``record``). Differences are in the result, not raised; a :class:`VerifyError` when no point can be
    taken or the apply job does not reach it within ``wait_seconds``. ``range_rows``, ``wait_seconds`` and
    ``max_source_rows_per_second`` default to the configuration's ``[verify]`` section. ``repair``: copy the
    differing ranges again through the lander (:mod:`cdc_apply.verification.repair`; the lander and the apply job
    must be running), wait for them to be applied, and verify those tables again (``repaired``)."""
    from cdc_apply.delta.engine import spark_tables

    started = time.monotonic()
    engine = spark_tables(spark)   # the verify entry point: the engine chosen here
    source = config.source.name
    dsn = dsn or resolve_dsn(config.source)
    rate = max_source_rows_per_second or config.verify.max_source_rows_per_second
    range_rows = range_rows or config.verify.range_rows
    wait_seconds = config.verify.wait_seconds if wait_seconds is None else wait_seconds
    relations = _relations(engine, config, source, tables)
    present = {name: engine.exists(ref) for name, ref, _ in relations}   # read once: the check below and the planning
    if relations and not any(present.values()):
        # Nothing could be compared: say so now, not after waiting for the apply job.
        raise VerifyError(f"none of the {len(relations)} applied tables has a silver table (the first: "
                          f"{relations[0][1]}); is the silver location the apply job's? ([silver] path or "
                          "table_template)", source=source)
    with SourceSnapshot(dsn, rate) as snap:
        point = snap.open()
        snap.emit_marker()
        run = Verification(source, point.lsn)
        options = type_options_of(config)
        # The source's sums are read in a thread of their own while this one waits for the apply job and reads
        # silver: both sides are read at once. One worker runs its tasks in order: every table's plan (the
        # catalog and a key sample, quick), then every table's sums.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-source") as pool:
            planned = [pool.submit(tb.plan_table, engine, config, snap, name, ref, rel, options, range_rows,
                                   tables is not None, present[name]) for name, ref, rel in relations]
            summed = [pool.submit(_source_sums, snap, p, run) for p in planned]
            try:
                with run.timed("wait"):
                    run.applied_lsn = sv.wait_applied(engine, config, source, point.lsn, wait_seconds)
                for future in planned:
                    tb.silver_side(engine, config, future.result(), point.lsn, wait_seconds, run.timed)
                for done in summed:
                    done.result()
            except BaseException:
                # Nothing to compare: the source's query under way stops, the ones not begun never start.
                pool.shutdown(wait=False, cancel_futures=True)
                snap.cancel()
                raise
        plans = [f.result() for f in planned if not f.result().skipped]
        for plan in plans:
            tb.compare(engine, snap, plan, samples, run.timed)
        run.tables = [p.result for p in plans]
        run.source_rows_read = snap.limit.rows
    run.seconds = time.monotonic() - started
    if record:
        with run.timed("record"):
            record_run(engine, config, run)
    whole, ranges, entries = repair_targets(plans) if repair else ([], [], [])
    if entries:
        at = emit_request(config, whole, ranges)
        run.repair = {"tables": whole, "ranges": [list(r) for r in ranges], "lsn": at}
        wait_repaired(engine, config, entries, parse_lsn(at), wait_seconds)
        run.repaired = verify(spark, config, [p.result.table for p in plans if p.result.status == cmp.DIFFERS],
                              range_rows, max_source_rows_per_second, wait_seconds, samples, record, dsn)
    return run


def _source_sums(snap: SourceSnapshot, plan: Future[tb.Plan], run: Verification) -> None:
    with run.timed("source"):
        tb.source_sums(snap, plan.result())


def _relations(engine: SparkTables, config: Config, source: str, tables: Sequence[str] | None
               ) -> list[tuple[str, TableRef, RelationHistory]]:
    """``(current qualified name, silver ref, relation history)`` of the tables to verify (default: every
    applied, selected one)."""
    history = Bookkeeping(config).load_history(engine).get(source)
    known = {} if history is None else {r.latest.qualified_name: r for r in history.relations.values()}
    if tables is None:
        names = [n for n in sorted(known) if config.table_selected(n)]
        if not names:
            raise VerifyError("no table of the source has been applied: nothing to verify (is the state location "
                              "the apply job's? has it applied a batch?)", source=source,
                              state=config.state.path or config.state.schema)
    else:
        names = list(tables)
        missing = [n for n in names if n not in known]
        if missing:
            raise VerifyError(f"no relation of that name was applied: {', '.join(missing)}", source=source)
    out = []
    for name in names:
        out.append((name, silver_ref_for(config, source, known[name].versions), known[name]))
    return out


_COLUMNS = [("run_id", "STRING"), ("verified_at", "TIMESTAMP"), ("source", "STRING"), ("table_name", "STRING"),
            ("lsn", "BIGINT"), ("applied_lsn", "BIGINT"), ("silver_version", "BIGINT"), ("status", "STRING"),
            ("ranges", "BIGINT"), ("differing_ranges", "BIGINT"), ("source_rows", "BIGINT"),
            ("silver_rows", "BIGINT"), ("excluded_keys", "BIGINT"), ("samples", "STRING"),
            ("unhashed_columns", "STRING"), ("error", "STRING"), ("seconds", "DOUBLE")]


def record_run(engine: SparkTables, config: Config, run: Verification) -> None:
    """Append one row per table to the ``verifications`` state table (made by the first run)."""
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    rows = [(run.run_id, now, run.source, t.table, run.lsn, run.applied_lsn, t.silver_version, t.status, t.ranges,
             len(t.differing), t.source_rows, t.silver_rows, t.excluded_keys,
             json.dumps([s.text() for s in t.samples]), ",".join(t.unhashed_columns), t.error, t.seconds)
            for t in run.tables]
    schema = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
    state_ref(config, VERIFICATIONS).append(engine.spark.createDataFrame(rows, schema), None, 0)


def print_run(run: Verification, as_json: bool = False, out: TextOut | None = None) -> None:
    out = out or sys.stdout
    if as_json:
        print(json.dumps(run.as_dict(), indent=2, default=str), file=out)
    else:
        for line in run.lines():
            print(line, file=out)
