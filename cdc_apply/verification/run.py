"""``cdc-apply verify``: each silver table of a source compared with its live PostgreSQL table at one point.

1. **The point.** One snapshot of the source whose consistent point ``C`` is exact
   (:class:`~cdc_apply.verification.source.SourceSnapshot`): it shows every transaction committed below ``C``.
2. **The source's side**, read while the apply job goes on: each table's key space cut into ranges (by its
   first key column's order; a keyless table into buckets of its rows' hashes), per range a count and a
   hash sum, at most ``max_source_rows_per_second``.
3. **Silver at or past the point.** Wait until the apply job has applied a commit at or past ``C``, pin each
   silver table's newest version, and leave out of both sides the keys a transaction committed at or past
   ``C`` changed — the history table says which (its versions made or ended at or past ``C``; read after
   the pin, it also holds a batch under way, whose history is written before its silver). Every other key
   had the same state at ``C`` as in the pinned silver, so the comparison is exact while both keep changing.
4. **Drill down** into the ranges that differ only: their rows on both sides, key by key.

Each run appends one row per table to the ``verifications`` state table.
"""

from __future__ import annotations

import json
import math
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

from cdc_apply.config import Config
from cdc_apply.delta.refs import history_ref_for, silver_ref_for, state_ref
from cdc_apply.errors import CdcApplyError, VerifyError
from cdc_apply.lake.books.bookkeeping import Bookkeeping
from cdc_apply.lake.silver.soft_deletes import live_rows
from cdc_apply.lander.dsn import resolve_dsn
from cdc_apply.lander.options import publication_names
from cdc_apply.lander.snapshots.requests import emit_request
from cdc_apply.pgoutput.messages import format_lsn, parse_lsn
from cdc_apply.pgoutput.types import TypeOptions
from cdc_apply.planning.tables import type_options_of
from cdc_apply.verification import bronze_keys
from cdc_apply.verification import compare as cmp
from cdc_apply.verification import silver as sv
from cdc_apply.verification.encoding import (
    NotCompared,
    RangeKind,
    cut_bounds,
    encode_column,
    pg_row_hash,
    range_bounds,
    range_kind,
    spark_range_index,
)
from cdc_apply.verification.repair import repair_targets, wait_repaired
from cdc_apply.verification.source import SourceSnapshot, SourceTable, excluded_predicate, key_predicate
from cdc_apply.verification.value_text import SourceFormat

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables
    from cdc_apply.delta.refs import TableRef
    from cdc_apply.log import TextOut
    from cdc_apply.planning.schema import RelationHistory

DRILL_RANGES = 20         # differing ranges read row by row, at most, per table
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


@dataclass
class _Plan:
    """One table's source side: shape, encodings, ranges and the source's sums per range."""

    result: cmp.TableResult
    shape: SourceTable | None = None   # set, with ``silver``, once the table is found on both sides
    silver: TableRef | None = None
    columns: list = field(default_factory=list)
    kind: RangeKind | None = None
    bounds: list = field(default_factory=list)
    buckets: int | None = None
    sums: dict = field(default_factory=dict)
    relation: RelationHistory | None = None   # first names (where silver lives), key columns' lineage
    skipped: bool = False                     # a partition verified through its root's silver table

    def where(self, index: int) -> tuple[str, list]:
        if self.buckets:
            h = pg_row_hash(self.columns)
            return f"mod(mod({h}, {self.buckets}) + {self.buckets}, {self.buckets}) = %s", [index]
        low, high = range_bounds(self.bounds, index)
        shape = self.found()[0]
        return key_predicate(shape, shape.key[0] if self.kind else None, self.kind, low, high)

    def found(self) -> tuple[SourceTable, TableRef, RelationHistory]:
        """The shape, silver table and relation of a table found on both sides (every plan compared is:
        :func:`_plan_source` ends in an error otherwise)."""
        assert self.shape is not None and self.silver is not None and self.relation is not None, self.result.table
        return self.shape, self.silver, self.relation

    def index_of(self, row: tuple) -> int:
        if self.buckets:
            return int(row[-1]) % self.buckets
        return cmp.range_index(self.kind, self.bounds, row[0])


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
        # The source's sums are read while the apply job catches up with the point: both take seconds.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-source") as pool:
            def plan_all():
                with run.timed("source"):
                    return [_plan_source(engine, config, snap, name, ref, rel, options, range_rows,
                                         tables is not None, present[name]) for name, ref, rel in relations]
            planned = pool.submit(plan_all)
            try:
                with run.timed("wait"):
                    run.applied_lsn = sv.wait_applied(engine, config, source, point.lsn, wait_seconds)
            finally:
                plans = planned.result()
        plans = [p for p in plans if not p.skipped]
        for plan in plans:
            if plan.result.status != cmp.ERROR:
                _compare(engine, config, snap, plan, point.lsn, samples, wait_seconds, run)
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


def _plan_source(engine: SparkTables, config: Config, snap: SourceSnapshot, name: str, ref, relation,
                 options: TypeOptions, range_rows: int, named: bool, has_silver: bool) -> _Plan:
    """The table's source side; ``named``: the caller asked for this table (a partition is then verified
    too, against a silver table of its own); ``has_silver``: whether ``ref`` exists."""
    plan = _Plan(cmp.TableResult(name), relation=relation)
    started = time.monotonic()
    try:
        namespace, relname = name.split(".", 1)
        shape = snap.table(namespace, relname, options, publication_names(config.source))
        if shape is None:
            raise VerifyError("the table is not in the source (dropped?)", table=name)
        if not has_silver:
            if shape.is_partition and not named:
                # A partition's changes are published as its root's (publish_via_partition_root): its rows
                # are verified in the root's silver table. Left out of the run, not an error.
                plan.skipped = True
                return plan
            raise VerifyError(f"the table has no silver table at {ref} (the silver location of the "
                              "configuration: [silver] path or table_template)", table=name)
        plan.shape, plan.silver = shape, ref
        silver_types = sv.silver_columns(engine.read(ref), config.silver.metadata_prefix)
        masked = _masked_names(config, name, relation)
        masked_keys = [k for k in shape.key if k in masked]
        if masked_keys:   # silver's keys are hashes: no key range or key of silver names a source row
            raise VerifyError(f"key column {', '.join(masked_keys)} is masked (mask_columns): verify cannot "
                              "compare the table", table=name)
        for column in shape.columns:
            if column.name in masked and column.name in silver_types:   # silver holds masks, not values
                plan.result.not_compared(column.name, "masked")
                continue
            if column.name not in silver_types:
                plan.result.source_only_columns.append(column.name)
                continue
            form = SourceFormat(config.source.binary, column.send)
            encoding = encode_column(column.name, column.type, silver_types[column.name], form)
            if isinstance(encoding, NotCompared):
                plan.result.not_compared(column.name, encoding.why)
            else:
                plan.columns.append(encoding)
        missing_keys = [k for k in shape.key if k not in silver_types]
        if missing_keys:
            raise VerifyError(f"silver has no key column {', '.join(missing_keys)}", table=name)
        parts = max(1, math.ceil(shape.estimated_rows / max(range_rows, 1)))
        if shape.key:
            plan.kind = range_kind(shape.column(shape.key[0]).type)
            if plan.kind and parts > 1:
                plan.bounds = cut_bounds(plan.kind, snap.sample(shape, shape.key[0]), parts)
            for index in range(len(plan.bounds) + 1):
                where, params = plan.where(index)
                plan.sums.update({index: s for s in snap.range_sums(shape, plan.columns, where, params).values()})
        else:
            plan.buckets = parts
            plan.sums = snap.range_sums(shape, plan.columns, "TRUE", [], buckets=parts)
        plan.result.ranges = len(plan.bounds) + 1 if shape.key else parts
    except CdcApplyError as err:
        plan.result.status, plan.result.error = cmp.ERROR, str(err)
    plan.result.seconds = time.monotonic() - started
    return plan


def _masked_names(config: Config, name: str, relation) -> set[str]:
    """The table's columns silver keeps masked (``mask_columns``), by their current names."""
    from cdc_apply.planning.tables import resolve_rules

    if relation is None or not relation.versions:
        return set()
    latest = relation.versions[-1]
    masked = dict(resolve_rules(relation.versions, config.columns_for(name)).masked)
    return {c.name for lin, c in zip(latest.lineage, latest.columns) if lin in masked}


def _compare(engine: SparkTables, config: Config, snap: SourceSnapshot, plan: _Plan, lsn: int, samples: int,
             wait_seconds: float, run: Verification) -> None:
    started = time.monotonic()
    result = plan.result
    shape, silver, relation = plan.found()
    key = list(shape.key)
    try:
        with run.timed("pin"):
            result.silver_version, frame = sv.pin(engine, silver)
        frame = live_rows(frame, config.silver.metadata_prefix)   # soft-deleted rows are rows the source lacks
        history = history_ref_for(config, config.source.name, relation.versions)
        with run.timed("excluded"):
            if config.history_for(result.table) is not None and engine.exists(history):
                excluded = sv.changed_keys(engine, history, config.silver.metadata_prefix, lsn, plan.columns, key)
            else:
                excluded = _changed_from_bronze(engine, config, plan, lsn, key, wait_seconds)
        result.excluded_keys = len(excluded)
        source_sums = plan.sums
        if excluded:
            where, params = excluded_predicate(shape, plan.columns, excluded)
            source_sums = cmp.subtract(source_sums, snap.rows(shape, plan.columns, key, where, params), plan.index_of)
        range_sql = spark_range_index(key[0], plan.kind, plan.bounds) if key and plan.kind and plan.bounds else None
        rows = sv.without(engine, sv.prepared(frame, plan.columns, key, range_sql, plan.buckets), key, excluded)
        with run.timed("silver_sums"):
            silver_sums = sv.range_sums(rows)
        result.source_rows = sum(n for n, _ in source_sums.values())
        result.silver_rows = sum(n for n, _ in silver_sums.values())
        differing = cmp.differing_ranges(source_sums, silver_sums)
        if differing:
            result.status = cmp.DIFFERS
            for index in differing:
                low, high = (None, None) if plan.buckets else range_bounds(plan.bounds, index)
                result.differing.append(cmp.RangeDifference(index, low, high, source_sums.get(index, (0, 0))[0],
                                                            silver_sums.get(index, (0, 0))[0]))
            drill = differing[:DRILL_RANGES]
            gone = {tuple(k) for k in excluded}
            source_rows = []
            for index in drill:
                where, params = plan.where(index)
                source_rows += [r for r in snap.rows(shape, plan.columns, key, where, params)
                                if (tuple(r[:-1]) if key else (int(r[-1]),)) not in gone]
            silver_rows = sv.range_rows(rows, drill, len(key))
            result.samples = cmp.key_differences(source_rows, silver_rows, bool(key))[:samples]
    except CdcApplyError as err:
        result.status, result.error = cmp.ERROR, str(err)
    result.seconds += time.monotonic() - started


def _changed_from_bronze(engine: SparkTables, config: Config, plan: _Plan, lsn: int, key: list[str],
                         wait_seconds: float) -> list:
    """Without a history table: the keys the logged transactions committed at or past ``lsn`` changed, decoded
    from their bronze rows (:mod:`cdc_apply.verification.bronze_keys`), once the batch that wrote the pinned silver
    version has logged them. A keyless table compares as a multiset of whole rows and needs its history."""
    table = plan.result.table
    if not key:
        raise VerifyError("a table without a key is compared as a multiset of rows, which needs a history table to "
                          "tell the rows changed past the point; keep one ([tables.\"<name>\"] history = true)",
                          table=table)
    source = config.source.name
    _, silver, relation = plan.found()
    version = plan.result.silver_version
    assert version is not None  # _compare pinned silver before asking
    sv.wait_logged(engine, config, silver, version, wait_seconds)
    names = sorted({v.qualified_name for v in relation.versions})
    spans = bronze_keys.transactions_past(engine, config, source, names, lsn)
    units = bronze_keys.bronze_units(engine, config, source, spans)
    return sorted(bronze_keys.changed_keys(units, relation, bronze_keys.key_positions(relation, key)))


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
