"""A snapshot's rows from bronze straight into its emptied silver table (see cdc_apply.planning.snapshot_loads).

One Spark job per loaded snapshot: read the snapshot's Insert rows from bronze by seq range, decode
them with the batch's decode stage narrowed to the snapshot's one relation version (so every type,
rename, column default and metadata column comes out exactly as through the general path), project
onto silver's columns and append — no persisted change rows, no per-key collapse, no join.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import NamedTuple

from cdc_apply.decode.changes import decode_batches, output_ddl
from cdc_apply.lake.appends import append_rows
from cdc_apply.lake.merge import project
from cdc_apply.lake.payload_columns import in_seq_ranges, is_insert
from cdc_apply.planning.assemble import merge_ranges
from cdc_apply.planning.decode_plan import pool_columns
from cdc_apply.planning.snapshot_loads import SnapshotLoad
from cdc_apply.planning.table_plan import SlotMap, TableWork


def snapshot_inserts(messages, load: SnapshotLoad):
    """The snapshot's Insert rows among bronze's ``messages`` (its stream blocks, by seq)."""
    return messages.where(in_seq_ranges(load.source, merge_ranges(load.ranges)) & is_insert())


def without_loads(changes, loads):
    """``changes`` less the Insert rows of ``loads``: the general decode leaves them to :func:`load_snapshot`."""
    if not loads:
        return changes
    cond = None
    for load in loads:
        part = in_seq_ranges(load.source, merge_ranges(load.ranges))
        cond = part if cond is None else cond | part
    return changes.where(~(cond & is_insert()))


def load_snapshot(session, messages, load: SnapshotLoad, segments: tuple[TableWork, ...], metadata: str) -> int:
    """Append the snapshot's rows to its silver table (emptied by the snapshot's Truncate just before);
    returns how many rows it wrote. ``segments``: the table's works in the batch; the one holding the
    snapshot's slot says how its relation version maps onto silver's columns."""
    work = next(w for w in segments if any(s.slot == load.slot for s in w.slots))
    slot = next(s for s in work.slots if s.slot == load.slot)
    pool = pool_columns(load.decode)
    narrowed = replace(work, slots=(SlotMap(0, slot.mapping, slot.ddls, pool.columns[0], slot.version_seq),),
                       truncate_after=None, has_toast=False, toast_moves=False)
    rows = snapshot_inserts(messages, load).select("source", "seq", "lsn", "payload")
    decoded = rows.mapInArrow(partial(decode_batches, plan=load.decode), output_ddl(load.decode))
    # One file per bronze split read (no shuffle to size them): a snapshot's splits hold ~1M rows each.
    append_rows(session, project(decoded, narrowed), narrowed, metadata, inserts=None)
    metrics = narrowed.ref.delta_table(session).history(1).select("operationMetrics").first()[0] or {}
    return int(metrics.get("numOutputRows", 0))


def count_snapshot_rows(messages, load: SnapshotLoad) -> int:
    """How many rows the snapshot holds (for the transactions log when the load itself did not run)."""
    return snapshot_inserts(messages, load).count()


class LoadCount(NamedTuple):
    """A loaded snapshot's rows as one of the decode's count rows (what the transactions log reads)."""

    source: str
    txn: int
    slot: int
    op: str
    n: int
    errors: int = 0


def load_counts(loads, silver, messages) -> list[LoadCount]:
    """The batch's snapshot Inserts as count rows, for the transactions log: what each load wrote
    (``silver.loaded``); a snapshot a later one of its table replaced in the same batch was not loaded,
    and is counted in bronze (``messages()``)."""
    out = []
    for load in loads:
        key = (load.source, load.relation_id)
        n = silver.loaded.get(key) if silver.loads.get(key) is load else None
        if n is None:
            n = count_snapshot_rows(messages(), load)
        if n:
            out.append(LoadCount(load.source, load.txn, load.slot, "I", n))
    return out
