"""One table's verification, in the steps :func:`cdc_apply.verification.run.verify` runs them in.

1. :func:`plan_table` — its shape, each column's encoding and its key ranges (the source's catalog and a sample).
2. :func:`source_sums` — the source's (rows, hash sum) per range, read in the source's thread.
3. :func:`silver_side` — meanwhile, once silver is past the point: the pinned silver, the keys changed past
   the point, and silver's whole-table (rows, hash sum) with those keys left out.
4. :func:`compare` — the source's sums less the changed keys' rows; silver's per-range sums and the rows of
   the ranges that differ are read only when the whole-table sums differ.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from cdc_apply.config import Config
from cdc_apply.delta.refs import history_ref_for
from cdc_apply.errors import CdcApplyError, VerifyError
from cdc_apply.lake.books.ledger import tag_commit_lsn
from cdc_apply.lake.silver.soft_deletes import live_rows
from cdc_apply.lander.options import publication_names
from cdc_apply.pgoutput.types import TypeOptions
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
from cdc_apply.verification.source import SourceSnapshot, SourceTable, excluded_predicate, key_predicate
from cdc_apply.verification.value_text import SourceFormat

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables
    from cdc_apply.delta.refs import TableRef
    from cdc_apply.planning.schema import RelationHistory

DRILL_RANGES = 20         # differing ranges read row by row, at most, per table
Timed = Callable[[str], ContextManager[None]]   # Verification.timed: a phase's seconds


@dataclass
class Plan:
    """One table's verification: shape, encodings, ranges, the source's sums per range, silver's side."""

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
    rows: Any = None                          # silver's pinned rows as (keys..., hash, range), excluded keys left out
    excluded: list = field(default_factory=list)
    silver_total: tuple[int, int] | None = None
    source_seconds: float = 0.0               # the source's sums, read in the source's thread

    def where(self, index: int) -> tuple[str, list]:
        if self.buckets:
            h = pg_row_hash(self.columns)
            return f"mod(mod({h}, {self.buckets}) + {self.buckets}, {self.buckets}) = %s", [index]
        low, high = range_bounds(self.bounds, index)
        shape = self.found()[0]
        return key_predicate(shape, shape.key[0] if self.kind else None, self.kind, low, high)

    def found(self) -> tuple[SourceTable, TableRef, RelationHistory]:
        """The shape, silver table and relation of a table found on both sides (every plan compared is:
        :func:`plan_table` ends in an error otherwise)."""
        assert self.shape is not None and self.silver is not None and self.relation is not None, self.result.table
        return self.shape, self.silver, self.relation

    def index_of(self, row: tuple) -> int:
        if self.buckets:
            return int(row[-1]) % self.buckets
        return cmp.range_index(self.kind, self.bounds, row[0])

    @property
    def compared(self) -> bool:
        return not self.skipped and self.result.status != cmp.ERROR


def plan_table(engine: SparkTables, config: Config, snap: SourceSnapshot, name: str, ref, relation,
               options: TypeOptions, range_rows: int, named: bool, has_silver: bool) -> Plan:
    """The table's shape, encodings and ranges; ``named``: the caller asked for this table (a partition is then
    verified too, against a silver table of its own); ``has_silver``: whether ``ref`` exists."""
    plan = Plan(cmp.TableResult(name), relation=relation)
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
        masked = masked_names(config, name, relation)
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
            plan.result.ranges = len(plan.bounds) + 1
        else:
            plan.buckets = parts
            plan.result.ranges = parts
    except CdcApplyError as err:
        plan.result.status, plan.result.error = cmp.ERROR, str(err)
    plan.result.seconds = time.monotonic() - started
    return plan


def source_sums(snap: SourceSnapshot, plan: Plan) -> None:
    """The source's ``{range: (rows, hash sum)}``: one scan grouping the rows by range — a range per query
    only when the reads are paced (``max_source_rows_per_second``: the pause falls between ranges)."""
    if not plan.compared:
        return
    started = time.monotonic()
    shape = plan.found()[0]
    try:
        if plan.buckets:
            plan.sums = snap.range_sums(shape, plan.columns, "TRUE", [], buckets=plan.buckets)
        elif plan.kind and plan.bounds and not snap.limit.rows_per_second:
            plan.sums = snap.grouped_sums(shape, plan.columns, shape.key[0], plan.kind, plan.bounds)
        else:
            for index in range(len(plan.bounds) + 1):
                where, params = plan.where(index)
                plan.sums.update({index: s for s in snap.range_sums(shape, plan.columns, where, params).values()})
    except CdcApplyError as err:
        plan.result.status, plan.result.error = cmp.ERROR, str(err)
    plan.source_seconds = time.monotonic() - started


def silver_side(engine: SparkTables, config: Config, plan: Plan, lsn: int, wait_seconds: float,
                timed: Timed) -> None:
    """Silver's side, once the apply job is past ``lsn``: pin the table, find the keys changed past the point
    (the history table, else bronze), and sum the other rows' hashes (one aggregation, no ranges)."""
    if not plan.compared:
        return
    started = time.monotonic()
    result = plan.result
    shape, silver, relation = plan.found()
    key = list(shape.key)
    try:
        with timed("pin"):
            result.silver_version, frame = sv.pin(engine, silver)
        frame = live_rows(frame, config.silver.metadata_prefix)   # soft-deleted rows are rows the source lacks
        history = history_ref_for(config, config.source.name, relation.versions)
        with timed("excluded"):
            if config.history_for(result.table) is not None and engine.exists(history):
                plan.excluded = sv.changed_keys(engine, history, config.silver.metadata_prefix, lsn, plan.columns,
                                                key)
            else:
                plan.excluded = _changed_from_bronze(engine, config, plan, lsn, key, wait_seconds)
        result.excluded_keys = len(plan.excluded)
        range_sql = spark_range_index(key[0], plan.kind, plan.bounds) if key and plan.kind and plan.bounds else None
        plan.rows = sv.without(engine, sv.prepared(frame, plan.columns, key, range_sql, plan.buckets), key,
                               plan.excluded)
        with timed("silver_sums"):
            plan.silver_total = sv.total(plan.rows)
    except CdcApplyError as err:
        result.status, result.error = cmp.ERROR, str(err)
    result.seconds += time.monotonic() - started


def compare(engine: SparkTables, snap: SourceSnapshot, plan: Plan, samples: int, timed: Timed) -> None:
    """The two sides compared: whole tables first; the ranges, then the rows of those that differ, only when
    the tables differ (equal (rows, hash sum) of the whole table and differing ranges would need two range
    differences whose hash sums cancel, as unlikely as a collision of the hash itself)."""
    if not plan.compared:
        return
    started = time.monotonic()
    result = plan.result
    shape = plan.found()[0]
    key = list(shape.key)
    try:
        source_sums = plan.sums
        if plan.excluded:
            with timed("excluded"):
                where, params = excluded_predicate(shape, plan.columns, plan.excluded)
                source_sums = cmp.subtract(source_sums, snap.rows(shape, plan.columns, key, where, params),
                                           plan.index_of)
        source_total = (sum(n for n, _ in source_sums.values()), sum(s for _, s in source_sums.values()))
        assert plan.silver_total is not None   # silver_side summed it, or the plan is an error
        result.source_rows, result.silver_rows = source_total[0], plan.silver_total[0]
        if source_total == plan.silver_total:
            return
        with timed("silver_sums"):
            silver_sums = sv.range_sums(plan.rows)
        differing = cmp.differing_ranges(source_sums, silver_sums)
        if differing:
            result.status = cmp.DIFFERS
            for index in differing:
                low, high = (None, None) if plan.buckets else range_bounds(plan.bounds, index)
                result.differing.append(cmp.RangeDifference(index, low, high, source_sums.get(index, (0, 0))[0],
                                                            silver_sums.get(index, (0, 0))[0]))
            with timed("drill"):
                drill = differing[:DRILL_RANGES]
                gone = {tuple(k) for k in plan.excluded}
                source_rows = []
                for index in drill:
                    where, params = plan.where(index)
                    source_rows += [r for r in snap.rows(shape, plan.columns, key, where, params)
                                    if (tuple(r[:-1]) if key else (int(r[-1]),)) not in gone]
                silver_rows = sv.range_rows(plan.rows, drill, len(key))
                result.samples = cmp.key_differences(source_rows, silver_rows, bool(key))[:samples]
    except CdcApplyError as err:
        result.status, result.error = cmp.ERROR, str(err)
    finally:
        result.seconds += plan.source_seconds + time.monotonic() - started


def masked_names(config: Config, name: str, relation) -> set[str]:
    """The table's columns silver keeps masked (``mask_columns``), by their current names."""
    from cdc_apply.planning.tables import resolve_rules

    if relation is None or not relation.versions:
        return set()
    latest = relation.versions[-1]
    masked = dict(resolve_rules(relation.versions, config.columns_for(name)).masked)
    return {c.name for lin, c in zip(latest.lineage, latest.columns) if lin in masked}


def _changed_from_bronze(engine: SparkTables, config: Config, plan: Plan, lsn: int, key: list[str],
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
    assert version is not None  # silver_side pinned silver before asking
    tag = sv.newest_tag(engine, silver, version)
    applied = None if tag is None else tag_commit_lsn(tag)
    if applied is not None and applied < lsn:
        # The pinned version's newest batch write applied no transaction at or past the point (a source
        # quiet since, or one whose changes since touched other tables): no key of it changed past the point.
        return []
    sv.wait_logged(engine, config, tag, wait_seconds, table=f"{silver} (version {version})")
    names = sorted({v.qualified_name for v in relation.versions})
    spans = bronze_keys.transactions_past(engine, config, source, names, lsn)
    units = bronze_keys.bronze_units(engine, config, source, spans)
    return sorted(bronze_keys.changed_keys(units, relation, bronze_keys.key_positions(relation, key)))
