"""Snapshot loads: a snapshot's rows written straight into its emptied silver table.

A snapshot of relation R arrives as a streamed transaction of xid 2 (docs/SNAPSHOTS.md): the marker,
R's Relation, a Truncate, then one Insert per copied row. Through the general decode every one of
those rows would be decoded into the batch's wide, persisted change rows, counted, projected and
only then appended — for an initial load of millions of rows almost all of a batch's time. A
:class:`SnapshotLoad` says where such a snapshot's Inserts are, so the lake layer leaves them out of
the general decode and writes them in one job of their own (read, decode, append) right after the
Truncate empties the table, before the batch's later changes of R are merged.

A snapshot is loaded this way when all its rows decode with one version of R (the one in force when
it starts, or the Relation the lander writes at its head); otherwise its rows take the general path.
Nothing here touches Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Iterable

from cdc_apply.pgoutput.snapshot import (
    SNAPSHOT_PREFIX,
    SNAPSHOT_XID,
    KeyRange,
    SnapshotDirective,
    parse_snapshot_directive,
)
from cdc_apply.planning.assemble import merge_ranges
from cdc_apply.planning.decode_plan import DecodePlan, SourcePlan
from cdc_apply.planning.plan import BatchPlan
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.state import SeqRange


def in_ranges(seq: int, ranges) -> bool:
    """Whether ``seq`` lies in one of the inclusive ``(first, last)`` seq ``ranges``."""
    return any(a <= seq <= b for a, b in ranges)

@dataclass(frozen=True, slots=True)
class SnapshotLoad:
    """One committed snapshot of one relation whose Inserts skip the general decode."""

    source: str
    txn: int                        # index of the snapshot's transaction among the source's committed ones
    relation_id: int
    slot: int                       # the decode slot of the snapshot's relation version (in the batch's plan)
    ranges: tuple[SeqRange, ...]    # the transaction's seq ranges: its stream blocks
    commit_lsn: int                 # the snapshot's consistent point C
    decode: DecodePlan              # the batch's plan narrowed to this transaction and its one slot (slot 0)
    key_range: KeyRange | None = None   # a key-range chunk's range (None: the whole table)
    # Rows of its blocks from ``held_from`` on were read by the batch's control scan, which found those
    # the general decode keeps (cdc_apply.lake.control_scan): the load's rows are ``taken``, seq ranges
    # (:func:`taken_ranges`) the general decode skips unread, less their control messages and ``held``
    # (the marker, the Truncate: rows the scan brought to the driver, which join the general decode
    # from there). Rows before ``held_from`` (read again from bronze) are told by their payload. None:
    # every row by its payload.
    held_from: int | None = None
    taken: tuple[SeqRange, ...] = ()
    held: tuple[int, ...] = ()

    def holds(self, seq: int) -> bool:
        return in_ranges(seq, self.ranges)

    @property
    def position(self) -> tuple[int, int]:
        """Where it takes effect in commit order: its commit LSN and first block."""
        return self.commit_lsn, self.ranges[0][0]

    def in_force(self, truncate_after: tuple[int, int] | None) -> bool:
        """Whether its rows survive the table's last truncate of the batch (``truncate_after``): a whole
        table's snapshot only when that truncate is its own, a chunk when it comes after it."""
        if self.key_range is None:
            return truncate_after is not None and self.holds(truncate_after[1])
        return truncate_after is None or self.position > tuple(truncate_after)


def find_snapshot_loads(plan: BatchPlan, histories: dict[str, SchemaHistory],
                        wanted: Callable[[str, int], bool]) -> tuple[SnapshotLoad, ...]:
    """Every committed snapshot of the batch that can be loaded, for which ``wanted(source, relation id)``."""
    loads = []
    for source, batch in sorted(plan.sources.items()):
        splan = plan.decode.sources[source]
        history = histories.get(source)
        for index, txn in enumerate(batch.committed):
            if txn.xid != SNAPSHOT_XID:
                continue
            snapshot = _snapshot_directive(txn.directives)
            if snapshot is None or history is None or snapshot.relation_id not in history.relations:
                continue
            relation_id = snapshot.relation_id
            if relation_id in splan.ignored or not wanted(source, relation_id):
                continue
            start, end = txn.ranges[0][0], txn.ranges[-1][1]
            seqs = [v.seq for v in history.relations[relation_id].versions if v.seq <= end]
            inside = [q for q in seqs if q >= start]   # any version between its first and last block
            entry = splan.versions.get(relation_id)
            # Every row must decode with one version: the one in force when the snapshot starts, or the
            # Relation of its own first block (a redundant one records no version).
            if not seqs or len(inside) > 1 or (inside and inside[0] > txn.ranges[0][1]):
                continue
            if entry is None or seqs[-1] not in entry[0]:
                continue
            slot = entry[1][entry[0].index(seqs[-1])]
            loads.append(SnapshotLoad(source, index, relation_id, slot, txn.ranges, txn.committed_lsn,
                                      _narrowed(plan.decode, source, splan, index, txn.ranges, relation_id,
                                                seqs[-1], slot), snapshot.key_range))
    return tuple(loads)


def _snapshot_directive(directives) -> SnapshotDirective | None:
    for prefix, content in directives:
        if prefix == SNAPSHOT_PREFIX:
            try:
                return parse_snapshot_directive(content)
            except (ValueError, KeyError, TypeError):
                return None   # planning (snapshot_skips) already refused a marker it cannot read
    return None


def _narrowed(decode: DecodePlan, source: str, splan: SourcePlan, txn: int, ranges: tuple[SeqRange, ...],
              relation_id: int, version_seq: int, slot: int) -> DecodePlan:
    """The decode plan of the snapshot's rows alone: its ranges, its transaction (index 0), its slot (0)."""
    narrowed = SourcePlan(
        range_starts=tuple(a for a, _ in ranges), range_ends=tuple(b for _, b in ranges),
        range_txn=(0,) * len(ranges), range_in_stream=(True,) * len(ranges),
        txn_commit_lsn=(splan.txn_commit_lsn[txn],), txn_xid=(splan.txn_xid[txn],),
        txn_commit_ts=(splan.txn_commit_ts[txn],) if splan.txn_commit_ts else (),
        txn_origin=(splan.txn_origin[txn],) if splan.txn_origin else (),
        txn_user=(splan.txn_user[txn],) if splan.txn_user else (),
        versions={relation_id: ((version_seq,), (0,))})
    return DecodePlan({source: narrowed}, (decode.slots[slot],), quarantine=False)


def merge_loads(loads: list[SnapshotLoad]) -> DecodePlan:
    """One decode plan for snapshots of one relation version (one source, one slot): their ranges, each its
    own transaction — the chunks of a table copied in key ranges decode in one job."""
    first = loads[0]
    if any((load.source, load.slot) != (first.source, first.slot) for load in loads):
        raise ValueError("snapshot loads of different sources or relation versions decode apart")
    plans = [load.decode.sources[first.source] for load in loads]
    spans = sorted((a, b, i) for i, load in enumerate(loads) for a, b in load.ranges)
    merged = SourcePlan(
        range_starts=tuple(a for a, _, _ in spans), range_ends=tuple(b for _, b, _ in spans),
        range_txn=tuple(i for _, _, i in spans), range_in_stream=(True,) * len(spans),
        txn_commit_lsn=tuple(p.txn_commit_lsn[0] for p in plans), txn_xid=tuple(p.txn_xid[0] for p in plans),
        txn_commit_ts=tuple(p.txn_commit_ts[0] for p in plans) if all(p.txn_commit_ts for p in plans) else (),
        txn_origin=tuple(p.txn_origin[0] for p in plans) if all(p.txn_origin for p in plans) else (),
        txn_user=tuple(p.txn_user[0] for p in plans) if all(p.txn_user for p in plans) else (),
        versions=plans[0].versions)
    return DecodePlan({first.source: merged}, first.decode.slots, quarantine=False)


def taken_ranges(ranges: tuple[SeqRange, ...], held_from: int, unread: Iterable[int],
                 joins: Collection[int]) -> tuple[SeqRange, ...]:
    """The seq ranges of a snapshot load's blocks ``ranges`` from ``held_from`` on: the blocks joined
    across gaps that hold only ``joins`` (control messages and rows the driver holds, which the general
    decode does not read from bronze), less the ``unread`` seqs (rows it must read there) — so that a
    bronze file of a block and its stream messages lies inside one range and its statistics let a
    reader skip it."""
    joined = join_ranges(((max(a, held_from), b) for a, b in ranges if b >= held_from), joins)
    out: list[SeqRange] = []
    points = sorted(q for q in set(unread) if any(a <= q <= b for a, b in joined))
    for a, b in joined:
        for q in (q for q in points if a <= q <= b):
            if q > a:
                out.append((a, q - 1))
            a = q + 1
        if a <= b:
            out.append((a, b))
    return tuple(out)


def join_ranges(ranges: Iterable[SeqRange], joins: Collection[int]) -> tuple[SeqRange, ...]:
    """``ranges`` merged, and joined across every gap whose seqs are all in ``joins``."""
    joined: list[SeqRange] = []
    for a, b in merge_ranges(ranges):
        gap = range(joined[-1][1] + 1, a) if joined else range(0)
        if joined and len(gap) <= len(joins) and all(q in joins for q in gap):
            joined[-1] = (joined[-1][0], b)
        else:
            joined.append((a, b))
    return tuple(joined)
