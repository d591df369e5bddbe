"""A snapshot's rows from bronze straight into its emptied silver table (see cdc_apply.planning.snapshot_loads).

One Spark job per batch and table: read each loaded snapshot's Insert rows from bronze by seq range,
decode them with the batch's decode stage narrowed to the snapshot's one relation version (so every
type, rename, column default and metadata column comes out exactly as through the general path),
project onto silver's columns and append — no persisted change rows, no per-key collapse, no join.
A key-range chunk empties only its range first (:func:`clear_ranges`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial, reduce
from typing import TYPE_CHECKING

from cdc_apply.decode.snapshot_rows import decode_snapshot_rows, insert_columns
from cdc_apply.delta.names import quote_ident
from cdc_apply.lake.silver.appends import append_rows
from cdc_apply.lake.silver.merge import project
from cdc_apply.lake.silver.merge_sql import key_ranges_sql
from cdc_apply.lake.silver.soft_deletes import mark_deleted, revive_copied
from cdc_apply.lake.sources.payload_columns import in_seq_ranges, is_control, is_insert
from cdc_apply.planning import columns as cc
from cdc_apply.planning.assemble import merge_ranges
from cdc_apply.planning.decode_plan import output_ddl, output_ddls, pool_columns
from cdc_apply.planning.snapshot_loads import SnapshotLoad, merge_loads
from cdc_apply.planning.table_plan import Clear, SlotCount, SlotMap, TableWork

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables

# A load's tasks each read a split of bronze, decode it in Python and write one file, all CPU-bound.
# Spark cuts a scan into about one split per task slot, so a 10M-row load ran 5 tasks on 2 slots, the
# last alone; at 4 splits per slot the tail is short (tables 21.9 s -> 18.1 s: docs/BENCHMARKS.md).
SPLITS_PER_SLOT = 4
MIN_SPLITS = "spark.sql.files.minPartitionNum"
# The load's Arrow batches hold up to this many decoded values (Spark's default is 10,000 rows
# whatever their width): a narrow table's batches of 100,000 rows cost its decode ~3 s less per
# 10M rows in per-batch overhead; a wide one's stay at Spark's default size.
LOAD_BATCH_VALUES = 1_500_000
LOAD_BATCH_ROWS = (10_000, 100_000)
ARROW_BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
# Spark 4 also ends a batch at this many bytes, and measures the batch after every row it adds — unless
# the setting is INT_MAX, which it takes for no limit: ~0.5 µs of a task's time a row (a 10M-row load's
# tables phase 15.0 -> 13.2 s in a warm session, docs/BENCHMARKS.md). When every chunk of a load says
# its longest payload (KeyRange.widest), no batch of the load's rows can reach the limit the user's
# session sets, so the load runs without the check: the same batches, cut by rows alone.
ARROW_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
UNCHECKED_BATCH_BYTES = str(2**31 - 1)
# An input row's bytes besides its payload and source name: seq, lsn, two offsets, validity bits.
ROW_OVERHEAD_BYTES = 64


def snapshot_inserts(messages, loads: list[SnapshotLoad]):
    """The Insert rows of snapshots of one source among bronze's ``messages`` (their stream blocks, by
    seq): the rows of each load's ``taken`` ranges that are no control message and not ``held`` — the
    load's decode fails on any that is not an Insert — and before its ``held_from`` the Insert rows, by
    payload."""
    from pyspark.sql import functions as F

    source = loads[0].source
    if any(load.held_from is None for load in loads):
        return messages.where(in_seq_ranges(source, merge_ranges(r for load in loads for r in load.ranges))
                              & is_insert())
    taken = in_seq_ranges(source, merge_ranges(r for load in loads for r in load.taken)) & ~is_control()
    held = sorted({seq for load in loads for seq in load.held})
    if held:
        taken = taken & ~F.col("seq").isin(held)
    earlier = [(a, min(b, load.held_from - 1)) for load in loads if load.held_from is not None  # all are here
               for a, b in load.ranges if a < load.held_from]
    if not earlier:
        return messages.where(taken)
    return messages.where(taken | (in_seq_ranges(source, merge_ranges(earlier)) & is_insert()))


def without_loads(changes, loads, skip: dict | None = None):
    """``changes`` (no control messages) less the rows of ``loads`` that :func:`load_snapshots` takes.
    ``skip``: per source, seq ranges to leave out whole (``ControlScan.skip_ranges``: ``changes`` are the
    rows the control scan read) — a filter Parquet's statistics skip files and row groups by; the held
    rows among them join from the driver. A source without them has its loads' Inserts told by payload."""
    skip = skip or {}
    cond = None
    for source, ranges in skip.items():
        part = in_seq_ranges(source, ranges)
        cond = part if cond is None else cond | part
    for load in loads:
        if load.source not in skip:
            part = in_seq_ranges(load.source, merge_ranges(load.ranges)) & is_insert()
            cond = part if cond is None else cond | part
    return changes if cond is None else changes.where(~cond)


def in_range(column, low, high, ddl: str):
    """``low <= column < high`` (an open end when ``None``)."""
    from pyspark.sql import functions as F

    parts = []
    if low is not None:
        parts.append(column >= F.lit(low).cast(ddl))
    if high is not None:
        parts.append(column < F.lit(high).cast(ddl))
    return reduce(lambda a, b: a & b, parts, F.lit(True))


def clear_ranges(tables: SparkTables, work: TableWork, points=()) -> None:
    """Delete silver's rows in the key ranges of the batch's chunks (``work.clears``), one DELETE; in a
    soft-deleting table mark them deleted at the last chunk's commit (``points``: the plan's truncates)."""
    if work.deleted is not None:
        last = work.clears[-1]
        ts = next((p[2] for p in points if p[:2] == (last.commit_lsn, last.seq)), None)
        mark_deleted(tables, work, last.commit_lsn, ts, key_ranges_sql(work))
        return

    def ranges():
        from pyspark.sql import functions as F

        return reduce(lambda a, b: a | b, [in_range(F.col(quote_ident(work.columns[c.column].name)), c.low, c.high,
                                                    work.columns[c.column].spark_ddl) for c in work.clears])
    tables.delta_table(work.ref).delete(tables.in_form(lambda: key_ranges_sql(work), ranges))


def drop_cleared(events, work: TableWork):
    """Key events (:func:`cdc_apply.lake.silver.merge.key_events`) less those a later chunk's copy replaces:
    a key in a chunk's range before the chunk, in commit order."""
    from pyspark.sql import functions as F

    if not work.clears:
        return events
    keys = work.key_index
    gone = F.lit(False)
    for c in work.clears:
        if c.column not in keys:
            from cdc_apply.errors import ApplyError

            raise ApplyError(f"a snapshot chunk of {work.qualified_name} is a range of column "
                             f"{work.columns[c.column].name!r}, which is not the first column of the key the table "
                             "is applied with (a configured key?): set source.snapshot_chunk_rows = 0 for this "
                             "source so that tables are copied whole", table=work.qualified_name)
        key = F.col(cc.key(keys.index(c.column)))
        before = (F.col(cc.COMMIT_LSN) < c.commit_lsn) | (
            (F.col(cc.COMMIT_LSN) == c.commit_lsn) & (F.col(cc.SEQ) <= c.seq))
        gone = gone | (in_range(key, c.low, c.high, work.columns[c.column].spark_ddl) & before)
    return events.where(~gone)


def load_snapshots(tables: SparkTables, messages, loads: list[SnapshotLoad], clears: tuple[Clear, ...],
                   segments: tuple[TableWork, ...], metadata: str, revive: bool = False) -> int:
    """Append the rows of ``loads`` (one table's snapshots in force after the batch's last truncate) to its
    silver table, emptied just before; returns how many rows it wrote. A row a later chunk of the batch
    replaces (its key in that chunk's range, ``clears``) is left out. ``segments``: the table's works in
    the batch; the one holding a snapshot's slot says how its relation version maps onto silver. ``revive``:
    a keyed soft-deleting table whose rows were marked deleted, not removed: the rows are merged on the key
    instead (:func:`cdc_apply.lake.silver.soft_deletes.revive_copied`)."""
    from pyspark.sql import functions as F

    frames, work = [], None
    groups: dict[int, list[SnapshotLoad]] = {}
    for load in loads:   # the chunks of one relation version decode in one job
        groups.setdefault(load.slot, []).append(load)
    for slot_index, group in groups.items():
        work = next(w for w in segments if any(s.slot == slot_index for s in w.slots))
        slot = next(s for s in work.slots if s.slot == slot_index)
        plan = merge_loads(group)
        narrowed = replace(work, slots=(SlotMap(0, slot.mapping, slot.ddls, pool_columns(plan).columns[0],
                                                slot.version_seq),),
                           truncate_after=None, has_toast=False, toast_moves=False, clears=())
        rows = snapshot_inserts(messages, group).select("source", "seq", "lsn", "payload")
        columns = insert_columns(plan)
        decoded = rows.mapInArrow(partial(decode_snapshot_rows, plan=plan, columns=columns), output_ddl(plan, columns))
        projected = project(with_null_columns(decoded, plan, columns), narrowed)
        for c in clears:   # rows a later chunk of the batch replaces
            later = [load for load in group if (c.commit_lsn, c.seq) > load.position]
            if not later:
                continue
            column = work.columns[c.column]
            gone = in_range(F.col(cc.value(c.column)), c.low, c.high, column.spark_ddl)
            if len(later) < len(group):   # only rows of chunks before the clear
                gone = gone & ((F.col(cc.COMMIT_LSN) < c.commit_lsn) | (
                    (F.col(cc.COMMIT_LSN) == c.commit_lsn) & (F.col(cc.SEQ) < c.seq)))
            projected = projected.where(~gone)
        frames.append(projected)
    union = reduce(lambda a, b: a.unionByName(b), frames)
    assert work is not None  # ``loads`` holds at least one load, so the loop found its work
    if revive and work.key is not None:
        copied = union.where(F.col(cc.OP) == "I").select(
            *[F.col(cc.value(i)).alias(c.name) for i, c in enumerate(work.columns)],
            *[F.col(src).alias(col) for col, src in work.meta])
        return revive_copied(tables, copied, work)
    # One file per bronze split read (no shuffle to size them): a snapshot's splits hold ~1M rows each.
    append_rows(tables.spark, union, work, metadata, inserts=None)
    metrics = tables.delta_table(work.ref).history(1).select("operationMetrics").first()[0] or {}
    return int(metrics.get("numOutputRows", 0))


def load_width(loads) -> int:
    """How many columns the decode of ``loads`` returns (the widest relation version's)."""
    return max(len(insert_columns(load.decode)) for load in loads)


def load_row_bytes(loads) -> int | None:
    """The most bytes one bronze row of ``loads`` takes in the decode's Arrow batches: the longest payload
    their chunks say (:attr:`KeyRange.widest`), the source's name and :data:`ROW_OVERHEAD_BYTES`; ``None``
    when a load does not say it (a whole table's snapshot, a chunk an older lander landed)."""
    ranges = [load.key_range for load in loads if load.key_range is not None]
    known = [r.widest for r in ranges if r.widest is not None]
    if not known or len(known) < len(loads):
        return None
    return max(known) + max(len(load.source.encode()) for load in loads) + ROW_OVERHEAD_BYTES


def load_settings(width: int, slots: int, user_splits: str | None = None, row_bytes: int | None = None,
                  batch_bytes: str | None = None) -> dict[str, str]:
    """The settings the session reading and decoding a table's loads runs them with: :data:`SPLITS_PER_SLOT`
    of ``slots`` (a split count the user set, ``user_splits``, is kept) and Arrow batches of
    :data:`LOAD_BATCH_VALUES` by ``width``, the decode's output columns (:func:`load_width`), whose bytes
    go unmeasured (:data:`ARROW_BATCH_BYTES`) when a batch of rows of at most ``row_bytes``
    (:func:`load_row_bytes`) stays within the session's limit, ``batch_bytes`` as Spark gives it."""
    low, high = LOAD_BATCH_ROWS
    rows = max(low, min(high, LOAD_BATCH_VALUES // max(width, 1)))
    settings = {ARROW_BATCH_ROWS: str(rows)}
    if user_splits is None:
        settings[MIN_SPLITS] = str(SPLITS_PER_SLOT * slots)
    limit = byte_size(batch_bytes)
    if row_bytes is not None and limit is not None and rows * row_bytes <= limit:
        settings[ARROW_BATCH_BYTES] = UNCHECKED_BATCH_BYTES
    return settings


def batch_byte_limit(spark) -> str | None:
    """The session's :data:`ARROW_BATCH_BYTES` as Spark gives it — its default when unset, which
    ``conf.get(key, None)`` would hide — or ``None`` where Spark has no such setting."""
    try:
        return spark.conf.get(ARROW_BATCH_BYTES)
    except Exception:  # noqa: BLE001 - classic and Connect sessions raise their own kinds for an unknown key
        return None


_BYTE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def byte_size(text: str | None) -> int | None:
    """A Spark size setting in bytes (``67108864b``, ``64m``, ``64mb``, ``1024``); ``None`` when unset or
    not a size."""
    found = re.fullmatch(r"\s*(\d+)\s*([kmgtp]?)b?\s*", text or "", re.IGNORECASE)
    return None if found is None else int(found[1]) * _BYTE_UNITS[found[2].lower()]


def with_null_columns(decoded, plan, columns: tuple[str, ...]):
    """The decode's whole output (:func:`output_ddls`) from ``columns`` of it, the rest null."""
    from pyspark.sql import functions as F

    return decoded.select(*[F.col(name) if name in columns else F.lit(None).cast(ddl).alias(name)
                            for name, ddl in output_ddls(plan).items()])


def count_snapshot_rows(messages, load: SnapshotLoad) -> int:
    """How many rows the snapshot holds (for the transactions log when the load did not count them)."""
    if load.key_range is not None and load.key_range.rows is not None:
        return load.key_range.rows
    return snapshot_inserts(messages, [load]).count()


def load_counts(loads, loaded: dict, messages) -> list[SlotCount]:
    """The batch's snapshot Inserts as count rows, for the transactions log: what a table's one load
    wrote (``loaded``, by (source, txn)), else what the snapshot holds (its chunk's count, or bronze's)."""
    out = []
    for load in loads:
        n = loaded.get((load.source, load.txn))
        if n is None:
            n = count_snapshot_rows(messages(), load)
        if n:
            out.append(SlotCount(load.source, load.txn, load.slot, "I", n))
    return out
