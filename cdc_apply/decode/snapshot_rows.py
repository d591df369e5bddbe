"""The decode of a snapshot load (cdc_apply.lake.silver.snapshot_loads): every row an Insert, few columns out.

A load reads the rows of a snapshot's stream blocks that are neither control messages nor ones the
general decode keeps (the marker and any non-Insert of the snapshot's xid, found by the control scan),
so each must decode to one Insert of the snapshot's relation version: anything else in the blocks is
bad input and fails the load, naming its seq, rather than being left out. Only the columns a silver
table's projection can read of an Insert cross back to the JVM — every output column costs Spark a
conversion per row, and the rest (old values, unchanged TOAST, truncate and message fields, errors) are
null for an Insert.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_apply.decode.changes import decode_batches
from cdc_apply.decode.changes_rows import context
from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput import messages as m
from cdc_apply.planning.decode_plan import DecodePlan, pool_columns

# The common columns an Insert gives a silver table (its position, commit and metadata columns).
INSERT_COMMON = ("seq", "lsn", "txn", "commit_lsn", "commit_ts", "origin", "user", "xid", "op", "slot")


def insert_columns(plan: DecodePlan) -> tuple[str, ...]:
    """The decoded columns a snapshot load returns: :data:`INSERT_COMMON` and the new values."""
    return INSERT_COMMON + tuple(f"new_{p}" for p in range(len(pool_columns(plan).types)))


def decode_snapshot_rows(batches: Iterable[pa.RecordBatch], plan: DecodePlan,
                         columns: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of a load: bronze rows in, their Inserts' ``columns`` out; a row that
    does not decode to an Insert raises :class:`DecodeError` naming its source, seq and LSN."""
    pending: list[pa.RecordBatch] = []   # the input batch whose output is due (decode_batches: one out per in)

    def inputs() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                if pending:   # the previous batch decoded to nothing
                    _reject(pending[0], None)
                pending.append(batch)
                yield batch

    for out in decode_batches(inputs(), plan):
        _check_inserts(pending.pop(), out)
        yield out.select(list(columns))
    if pending:
        _reject(pending[0], None)


def _check_inserts(batch: pa.RecordBatch, out: pa.RecordBatch) -> None:
    op = out.column("op")
    if out.num_rows != batch.num_rows or op.null_count or not pc.all(pc.equal(op, "I")).as_py():
        _reject(batch, out)


def _reject(batch: pa.RecordBatch, out: pa.RecordBatch | None) -> None:
    """Raise for the first row of ``batch`` that ``out`` holds no Insert of."""
    seqs = batch.column("seq").to_numpy(zero_copy_only=False)
    inserted = np.array([], dtype=np.int64)
    if out is not None:
        ops = np.asarray(out.column("op").to_pylist(), dtype=object)
        inserted = out.column("seq").to_numpy(zero_copy_only=False)[ops == "I"]
    missing = np.flatnonzero(~np.isin(seqs, inserted))
    i = int(missing[0]) if len(missing) else 0
    payload = batch.column("payload")[i].as_py()
    kind = m.MESSAGE_NAMES.get(payload[:1].decode("latin-1"), repr(payload[:1])) if payload else "none (empty or null)"
    raise DecodeError("a snapshot's stream block holds a message that is not an Insert of its relation",
                      message_type=kind, **context(batch.column("source")[i].as_py(), int(seqs[i]),
                                                   int(batch.column("lsn")[i].as_py())))
