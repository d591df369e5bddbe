"""numpy/Arrow building blocks of the vectorised decode stage.

:class:`PlanArrays` is a :class:`DecodePlan` as arrays (seq ranges, relation
version seqs, per-transaction columns of every source concatenated), built
once per ``decode_batches`` call (one Spark task); the rest reads a batch's
columns without a Python object per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cdc_apply.pgoutput.messages import CHANGE_TYPES, DML_TYPES
from cdc_apply.planning.decode_plan import SKIP, DecodePlan, SourcePlan, pool_columns

_IUD = np.zeros(257, dtype=bool)  # indexed by first byte + 1 (-1: empty or null payload)
_IUD[[t + 1 for t in DML_TYPES]] = True
_CHANGE = np.zeros(257, dtype=bool)  # every type byte the decode stage owns
_CHANGE[[t + 1 for t in CHANGE_TYPES]] = True
_TS = pa.timestamp("us", tz="UTC")


class SourceArrays:
    """One source's :class:`SourcePlan` as numpy arrays; ``offset`` places its txns in the plan's."""

    __slots__ = ("plan", "starts", "ends", "txn", "in_stream", "offset", "ignored", "versions", "skips")

    def __init__(self, splan: SourcePlan, offset: int) -> None:
        self.plan = splan
        self.starts = np.asarray(splan.range_starts, dtype=np.int64)
        self.ends = np.asarray(splan.range_ends, dtype=np.int64)
        self.txn = np.asarray(splan.range_txn, dtype=np.int64)
        self.in_stream = np.asarray(splan.range_in_stream, dtype=bool)
        self.offset = offset
        self.ignored = np.fromiter(splan.ignored, dtype=np.int64, count=len(splan.ignored))
        self.skips = {rid: np.fromiter(txns, dtype=np.int64, count=len(txns))
                      for rid, txns in splan.skip_relations.items()}
        self.versions = {rid: (np.asarray(seqs, dtype=np.int64), np.asarray(slots, dtype=np.int64))
                         for rid, (seqs, slots) in splan.versions.items()}

    def locate(self, seqs: np.ndarray) -> np.ndarray:
        """Per seq, the index of the range holding it, or -1 (:meth:`SourcePlan.locate` for many)."""
        if not len(self.starts):
            return np.full(len(seqs), -1, dtype=np.int64)
        i = np.searchsorted(self.starts, seqs, side="right") - 1
        return np.where((i >= 0) & (seqs <= self.ends[i]), i, -1)

    def slots(self, relation_ids: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """Per row, the slot of its relation version, or -1 (:meth:`SourcePlan.slot_for` for many)."""
        out = np.full(len(seqs), -1, dtype=np.int64)
        if not self.versions or not len(seqs):
            return out
        first = relation_ids[0]
        groups = [first] if (relation_ids == first).all() else np.unique(relation_ids).tolist()
        for rid in groups:
            entry = self.versions.get(int(rid))
            if entry is None:
                continue
            vseqs, vslots = entry
            if not len(vseqs):
                continue
            rows = None if len(groups) == 1 else np.flatnonzero(relation_ids == rid)
            k = np.searchsorted(vseqs, seqs if rows is None else seqs[rows], side="left")
            found = np.where(k > 0, vslots[k - 1], -1)
            if rows is None:
                out[:] = found
            else:
                out[rows] = found
        return out


class PlanArrays:
    """A :class:`DecodePlan` as arrays: per source :class:`SourceArrays`, per txn the common columns."""

    __slots__ = ("sources", "commit_lsn", "commit_ts", "origin", "user", "xid", "ncols", "pool")

    def __init__(self, plan: DecodePlan) -> None:
        self.sources: dict[str, SourceArrays] = {}
        commit_lsn, commit_ts, origin, user, xid = [], [], [], [], []
        offset = 0
        for name, splan in plan.sources.items():
            self.sources[name] = SourceArrays(splan, offset)
            k = len(splan.txn_commit_lsn)
            offset += k
            commit_lsn.append(pa.array(splan.txn_commit_lsn, type=pa.int64()))
            xid.append(np.asarray(splan.txn_xid, dtype=np.int64).reshape(-1))
            # An empty tuple means "not known" for every txn of the source (null, as _txn_fields has it).
            commit_ts.append(pa.array(splan.txn_commit_ts, type=_TS) if splan.txn_commit_ts else pa.nulls(k, _TS))
            origin.append(pa.array(splan.txn_origin, type=pa.string()) if splan.txn_origin
                          else pa.nulls(k, pa.string()))
            user.append(pa.array(splan.txn_user, type=pa.string()) if splan.txn_user else pa.nulls(k, pa.string()))
        self.commit_lsn = _concat(commit_lsn, pa.int64())
        self.commit_ts = _concat(commit_ts, _TS)
        self.origin = _concat(origin, pa.string())
        self.user = _concat(user, pa.string())
        self.xid = np.concatenate(xid) if xid else np.zeros(0, dtype=np.int64)
        self.ncols = np.array([len(s.column_types) for s in plan.slots], dtype=np.int64)
        self.pool = pool_columns(plan)


def _concat(parts: list[pa.Array], type_: pa.DataType) -> pa.Array:
    return pa.concat_arrays(parts) if parts else pa.array([], type=type_)


def first_bytes(payloads: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Each payload's type byte (-1 when empty, null or not a binary column) and which are null."""
    n = len(payloads)
    null = (payloads.is_null().to_numpy(zero_copy_only=False) if payloads.null_count
            else np.zeros(n, dtype=bool))
    first = np.full(n, -1, dtype=np.int16)
    large = pa.types.is_large_binary(payloads.type)
    if not n or not (large or pa.types.is_binary(payloads.type)):
        return first, null  # other types never take the bulk path (the per-row path handles them as before)
    _, offsets_buf, data_buf = payloads.buffers()[:3]
    off_type = np.int64 if large else np.int32
    offsets: np.ndarray = np.frombuffer(offsets_buf, dtype=off_type, count=n + 1,
                                        offset=payloads.offset * (8 if large else 4))
    starts = offsets[:-1]
    filled = (offsets[1:] > starts) & ~null
    if data_buf is not None and filled.any():
        data = np.frombuffer(data_buf, dtype=np.uint8)
        first[filled] = data[starts[filled]]
    return first, null


def is_dml(first: np.ndarray) -> np.ndarray:
    return _IUD[first + 1]


def is_change(first: np.ndarray) -> np.ndarray:
    """Whether each type byte is one the decode stage owns (-1, empty or null, is not)."""
    return _CHANGE[first + 1]


def source_codes(column: pa.Array) -> tuple[np.ndarray, list]:
    """Per row a code into the returned list of source names (``None`` for a null source)."""
    n = len(column)
    if pa.types.is_dictionary(column.type):
        encoded = column
    else:
        encoded = column.dictionary_encode()
    names = encoded.dictionary.to_pylist()
    indices = encoded.indices
    if indices.null_count:
        names.append(None)
        indices = indices.fill_null(len(names) - 1)
    codes = indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False) if n else np.zeros(0, np.int64)
    return codes, names


def op_strings(ops: np.ndarray) -> pa.StringArray:
    """One-character strings from type bytes (all ASCII)."""
    k = len(ops)
    offsets = np.arange(k + 1, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), k, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(np.ascontiguousarray(ops, dtype=np.uint8))])


def as_string(column: pa.Array) -> pa.Array:
    return column if column.type == pa.string() else column.cast(pa.string())


def where_txn(sa: SourceArrays, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per located row its txn index (SKIP outside any range) and its in-stream flag."""
    inside = where >= 0
    txn = np.where(inside, sa.txn[where] if len(sa.txn) else SKIP, SKIP)
    in_stream = inside & (sa.in_stream[where] if len(sa.in_stream) else False)
    return txn, in_stream
