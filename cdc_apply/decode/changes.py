"""Decode change rows (Insert, Update, Delete, Truncate, Message) into typed Arrow batches.

This runs inside Spark's ``mapInArrow`` but imports no Spark: it gets Arrow
record batches of bronze rows and a :class:`DecodePlan` built on the driver,
and yields record batches of :func:`output_schema`. No row depends on another
row: a row's transaction comes from the seq ranges of the plan, its relation
version from the schema history in the plan, so partitions decode in parallel
in any order.

Each relation version present gets a *slot*; its columns go to the pooled
``new_<p>`` / ``old_<p>`` output columns that rows of other slots share
(:func:`cdc_apply.planning.decode_plan.pool_columns`).

The stage is vectorised: type bytes come from the payload buffer, seq ranges
and relation versions are looked up with ``np.searchsorted`` per source, the
Insert/Update/Delete rows go through :func:`walk_dml` in one call and the
common columns are taken from per-transaction arrays. Only the rare rows
(Truncate, Message, rows outside any transaction, errors) take the per-row
path of :mod:`cdc_apply.decode.changes_rows`.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from cdc_apply.decode.changes_rows import Rows, common_batch, context, decode_row, typed_struct
from cdc_apply.decode.changes_vector import (
    PlanArrays,
    as_string,
    first_bytes,
    is_change,
    is_dml,
    op_strings,
    source_codes,
    where_txn,
)
from cdc_apply.decode.zip_imports import keep_zip_directories
from cdc_apply.errors import SchemaError
from cdc_apply.pgoutput.columnar import DmlBatch, walk_dml
from cdc_apply.planning.decode_plan import SKIP, DecodePlan, output_schema


def decode_batches(batches: Iterable[pa.RecordBatch], plan: DecodePlan) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: bronze rows in, decoded change rows out."""
    keep_zip_directories()
    schema = output_schema(plan)
    arrays = None
    for batch in batches:
        if batch.num_rows:
            if arrays is None:
                arrays = PlanArrays(plan)
            out = list(_Decode(batch, plan, schema, arrays).run(walk_dml))  # this module's: tests swap it
            # One batch out per batch in: Spark pays per batch (and per column of it), not per row.
            if len(out) > 1:
                yield pa.concat_batches(out)
            elif out:
                yield out[0]


def decode_batch(batch: pa.RecordBatch, plan: DecodePlan, schema: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
    """Decode one batch of bronze rows (columns source, seq, lsn, payload; any order, any sources).

    Yields, in this order: the Truncate/Message rows and the errors of rows outside the bulk path,
    the Insert/Update/Delete rows that fail the walk or the schema, then per slot (in order of first
    appearance) its conversion errors and its rows. Without quarantine the first error raises.
    """
    schema = schema or output_schema(plan)
    yield from _Decode(batch, plan, schema, PlanArrays(plan)).run(walk_dml)



class _Decode:
    """One batch's columns and per-row lookups, shared by the steps of the decode."""

    def __init__(self, batch: pa.RecordBatch, plan: DecodePlan, schema: pa.Schema, arrays: PlanArrays) -> None:
        self.plan, self.schema, self.arrays = plan, schema, arrays
        self.n = n = batch.num_rows
        self.source_column = batch.column("source")
        self.seqs = batch.column("seq").to_numpy(zero_copy_only=False)
        self.lsns = batch.column("lsn").to_numpy(zero_copy_only=False)
        self.payloads = batch.column("payload")
        self.first, self.null = first_bytes(self.payloads)
        self.codes, self.names = source_codes(self.source_column)
        self.groups = ([(0, None)] if len(self.names) == 1 else
                       [(k, np.flatnonzero(self.codes == k)) for k in range(len(self.names))])
        # Per row: range index (-1: outside every range), txn index in its source (SKIP: none) and
        # in the plan's concatenated txn arrays, in-stream flag (rows of an unplanned source stay outside).
        self.txn = np.full(n, SKIP, dtype=np.int64)
        self.global_txn = np.zeros(n, dtype=np.int64)
        self.in_stream = np.zeros(n, dtype=bool)
        located = np.zeros(n, dtype=bool)
        for k, rows in self.groups:
            sa = self.arrays.sources.get(self.names[k])
            if sa is None:
                continue
            seqs = self.seqs if rows is None else self.seqs[rows]
            where = sa.locate(seqs)
            txn, in_stream = where_txn(sa, where)
            at = slice(None) if rows is None else rows
            located[at] = where >= 0
            self.txn[at] = txn
            self.global_txn[at] = sa.offset + np.maximum(txn, 0)
            self.in_stream[at] = in_stream
        skip = located & (self.txn == SKIP)
        self.dml = located & (self.txn >= 0) & is_dml(self.first)  # not skipped, not quarantined whole
        # Everything else that is not skipped goes row by row; so does every row whose type byte is no
        # change type (null, empty, unknown), even in a skipped range: bad input is never dropped unseen.
        self.slow = ~(skip | self.dml) | ~is_change(self.first)

    def run(self, walk) -> Iterator[pa.RecordBatch]:
        other = Rows()
        slow = np.flatnonzero(self.slow)
        if len(slow):
            take = pa.array(slow, type=pa.int64())
            for source, seq, lsn, payload in zip(self.source_column.take(take).to_pylist(), self.seqs[slow].tolist(),
                                                 self.lsns[slow].tolist(), self.payloads.take(take).to_pylist()):
                decode_row(self.plan, source, seq, lsn, payload, other)
        if len(other):
            yield common_batch(other, self.schema)
        rows = np.flatnonzero(self.dml)
        if len(rows):
            yield from _Dml(self, rows, walk).run()


class _Dml:
    """The Insert/Update/Delete rows of a batch (``rows``: their batch row indexes, ascending), walked together."""

    def __init__(self, d: _Decode, rows: np.ndarray, walk) -> None:
        self.d, self.rows = d, rows
        self.payloads = d.payloads if len(rows) == d.n else d.payloads.take(pa.array(rows, type=pa.int64()))
        self.walked: DmlBatch = walk(self.payloads, d.in_stream[rows])

    def run(self) -> Iterator[pa.RecordBatch]:
        d, walked, rows = self.d, self.walked, self.rows
        k = len(rows)
        failed = (np.zeros(k, dtype=bool) if walked.error.count(None) == k else
                  np.fromiter((e is not None for e in walked.error), dtype=bool, count=k))
        ignored = np.zeros(k, dtype=bool)
        slot = np.full(k, -1, dtype=np.int64)
        codes = d.codes[rows]
        seqs = d.seqs[rows]
        for code in ([int(codes[0])] if len(d.names) == 1 else np.unique(codes).tolist()):
            sa = d.arrays.sources[d.names[code]]
            at = np.flatnonzero((codes == code) & ~failed) if len(d.names) > 1 or failed.any() else None
            relation_ids = walked.relation_id if at is None else walked.relation_id[at]
            if len(sa.ignored):
                drop = np.isin(relation_ids, sa.ignored)
                if drop.any():
                    ignored[np.flatnonzero(drop) if at is None else at[drop]] = True
            for relation_id, txns in sa.skips.items():  # changes a later snapshot already holds
                txn_of = d.txn[rows] if at is None else d.txn[rows[at]]
                drop = (relation_ids == relation_id) & np.isin(txn_of, txns)
                if drop.any():
                    ignored[np.flatnonzero(drop) if at is None else at[drop]] = True
            found = sa.slots(relation_ids, seqs if at is None else seqs[at])
            if at is None:
                slot[:] = found
            else:
                slot[at] = found
        live = ~failed & ~ignored
        ncols = d.arrays.ncols[np.maximum(slot, 0)] if len(d.arrays.ncols) else np.zeros(k, dtype=np.int64)
        new, old = walked.new_count, walked.old_count
        mismatch = live & (slot >= 0) & (((new != -1) & (new != ncols)) | ((old != -1) & (old != ncols)))
        keep = live & (slot >= 0) & ~mismatch
        bad = live & ~keep | failed
        if bad.any():
            yield from self._errors(np.flatnonzero(bad), failed, slot)
        kept = np.flatnonzero(keep)
        if not len(kept):
            return
        self.old_kind = walked.old_kind_array()
        self.toast = None if walked.toast.count(None) == k else walked.toast_array()  # None: no unchanged TOAST
        slots = slot[kept]
        first_slot = int(slots[0])
        if (slots == first_slot).all():
            yield from self._slot_batch(first_slot, kept)
            return
        order = np.argsort(slots, kind="stable")
        ordered = slots[order]
        cuts = np.flatnonzero(np.diff(ordered)) + 1
        starts = np.r_[0, cuts]
        members = dict(zip(ordered[starts].tolist(), np.split(kept[order], cuts)))
        for s in sorted(members, key=lambda s: members[s][0]):  # slots in order of their first row
            yield from self._slot_batch(s, members[s])

    def _where(self, i: int) -> tuple:
        row = int(self.rows[i])
        return self.d.names[self.d.codes[row]], int(self.d.seqs[row]), int(self.d.lsns[row]), chr(self.d.first[row])

    def _errors(self, bad: np.ndarray, failed: np.ndarray, slot: np.ndarray) -> Iterator[pa.RecordBatch]:
        """The rows the walk or the schema refused, in row order: raise the first or quarantine them all."""
        walked, plan = self.walked, self.d.plan
        errors = Rows()
        for i in bad.tolist():
            source, seq, lsn, op = self._where(i)
            relation_id = int(walked.relation_id[i])
            if failed[i]:
                err = walked.error[i]
            elif slot[i] < 0:
                err = SchemaError(f"change for relation {relation_id}, which no Relation message described before it",
                                  relation_id=relation_id)
            else:
                spec = plan.slots[int(slot[i])]
                width = len(spec.column_types)
                new, old = int(walked.new_count[i]), int(walked.old_count[i])
                which, got = ("new", new) if new not in (-1, width) else ("key/old", old)
                err = SchemaError(f"{which} tuple has {got} columns, Relation {spec.qualified_name} has {width}",
                                  relation_id=relation_id)
            err = err.with_context(**context(source, seq, lsn))
            if not plan.quarantine:
                raise err from None
            errors.add(source=source, seq=seq, lsn=lsn, op=op, error=str(err), payload=self.payloads[i].as_py())
        yield common_batch(errors, self.d.schema)

    def _slot_batch(self, slot: int, idx: np.ndarray) -> Iterator[pa.RecordBatch]:
        d, walked, plan = self.d, self.walked, self.d.plan
        spec = plan.slots[slot]
        new_struct, new_bad = typed_struct(spec, walked.new_values, walked.new_binary, idx, walked.new_count)
        old_struct, old_bad = typed_struct(spec, walked.old_values, walked.old_binary, idx, walked.old_count)
        bad = new_bad | old_bad
        if bad:
            if not plan.quarantine:
                i, err = min(bad.items())
                source, seq, lsn, _ = self._where(int(idx[i]))
                raise err.with_context(**context(source, seq, lsn))
            errors = Rows()
            for i, err in sorted(bad.items()):
                at = int(idx[i])
                source, seq, lsn, op = self._where(at)
                err = err.with_context(**context(source, seq, lsn))
                errors.add(source=source, seq=seq, lsn=lsn, op=op, error=str(err), payload=self.payloads[at].as_py())
            yield common_batch(errors, d.schema)
            keep = np.ones(len(idx), dtype=bool)
            keep[list(bad)] = False
            idx = idx[keep]
            new_struct = new_struct.filter(pa.array(keep))
            old_struct = old_struct.filter(pa.array(keep))
            if not len(idx):
                return
        yield self._common(slot, idx, new_struct, old_struct)

    def _common(self, slot: int, idx: np.ndarray, new_struct: pa.Array, old_struct: pa.Array) -> pa.RecordBatch:
        """The slot's output batch: common columns taken from the batch and the plan's txn arrays."""
        d, walked, arrays = self.d, self.walked, self.d.arrays
        n = len(idx)
        rows = self.rows[idx]
        take_rows = pa.array(rows, type=pa.int64())
        gtxn = d.global_txn[rows]
        take_txn = pa.array(gtxn, type=pa.int64())
        xid = walked.xid[idx]
        cols = {
            "source": as_string(d.source_column.take(take_rows)),
            "seq": pa.array(d.seqs[rows], type=pa.int64()),
            "lsn": pa.array(d.lsns[rows], type=pa.int64()),
            "txn": pa.array(d.txn[rows].astype(np.int32)),
            "commit_lsn": arrays.commit_lsn.take(take_txn),
            "commit_ts": arrays.commit_ts.take(take_txn),
            "origin": arrays.origin.take(take_txn),
            "user": arrays.user.take(take_txn),
            "xid": pa.array(np.where(xid >= 0, xid, arrays.xid[gtxn]), type=pa.int64()),
            "op": op_strings(walked.op[idx]),
            "slot": pa.array(np.full(n, slot, dtype=np.int32)),
            "old_kind": self.old_kind.take(pa.array(idx, type=pa.int64())),
            "toast": (pa.nulls(n, pa.list_(pa.int32())) if self.toast is None
                      else self.toast.take(pa.array(idx, type=pa.int64()))),
        }
        # flatten(): a child is null wherever its struct is (no new / no old tuple).
        for j, (new, old) in enumerate(zip(new_struct.flatten(), old_struct.flatten())):
            cols[arrays.pool.new(slot, j)] = new
            cols[arrays.pool.old(slot, j)] = old
        out = [cols[f.name] if f.name in cols else pa.nulls(n, type=f.type) for f in d.schema]
        return pa.RecordBatch.from_arrays(out, schema=d.schema)
