"""Insert/Update/Delete messages column-at-a-time: raw column values as Arrow arrays.

:func:`walk_dml` takes many DML payloads at once and returns, per tuple
column, an Arrow binary array of the raw values (null where the value is
NULL, unchanged TOAST or absent) plus flags for binary-format values, the
unchanged-TOAST columns of each new tuple and the key/old tuple beside it.
The type converters then work on whole columns.

The walk is vectorised (:mod:`~cdc_apply.pgoutput.columnar_walk`): every
message advances together, one field or tuple column at a time, over the
payloads' Arrow data buffer; no Python object is made per message. A message
the walk cannot take (truncated, unknown tuple kind, bad column count,
trailing bytes, invalid UTF-8 text, unchanged TOAST in a key/old tuple, not
DML at all) is handed to the reference decoder, whose :class:`DecodeError`
(naming the message type and byte offset) lands in ``error``; that row gets
no values. :func:`walk_dml_reference` is the same contract built from the
reference decoder message by message (the oracle of the tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

from cdc_apply.errors import CdcApplyError, DecodeError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.columnar_walk import (
    KIND_BINARY,
    KIND_TEXT,
    KIND_TOAST,
    Header,
    Payloads,
    Tuples,
    all_ascii,
    expect_marker,
    gather_column,
    invalid_utf8_rows,
    walk_tuples,
)
from cdc_apply.pgoutput.decoder import decode_message

_K, _O, _N = ord("K"), ord("O"), ord("N")
# Which old tuple a DML message carries: the replica identity key ('K') or the whole old row ('O').
OldKind = Literal["K", "O"]


@dataclass(slots=True)
class DmlBatch:
    """The walked form of ``n`` DML messages (row ``i`` is the ``i``-th payload).

    A row with an ``error`` has the defaults everywhere else: op 0, relation_id 0,
    xid -1, old_kind None, counts -1, toast None, null values. Value arrays are
    ``pa.binary()`` (``large_binary`` only when a block of payloads passes 2 GiB).
    """

    op: np.ndarray            # uint8: ord('I'), ord('U'), ord('D'); 0 when error
    relation_id: np.ndarray   # int64
    xid: np.ndarray           # int64, -1 outside stream blocks
    old_kind: list[OldKind | None]   # per row; None: no old tuple
    new_count: np.ndarray     # int32 column count of the new tuple, -1 when absent
    old_count: np.ndarray     # int32 column count of the key/old tuple, -1 when absent
    toast: list               # indexes of unchanged-TOAST columns in the new tuple, or None
    new_values: list          # per column: pa.BinaryArray of length n
    new_binary: list          # per column: np.ndarray[bool], True where the value was 'b'
    old_values: list
    old_binary: list
    error: list               # DecodeError or None per row

    def toast_array(self) -> pa.ListArray:
        """``toast`` as an Arrow ``list<int32>`` (null where None), e.g. to ``take`` rows of it."""
        return pa.array(self.toast, type=pa.list_(pa.int32()))

    def old_kind_array(self) -> pa.StringArray:
        """``old_kind`` as an Arrow string array ('K', 'O' or null)."""
        return pa.array(self.old_kind, type=pa.string())


def toast_columns(values: m.TupleData) -> list[int] | None:
    """Indexes of the unchanged-TOAST columns of a tuple, or None when there are none."""
    found = [i for i, v in enumerate(values) if v is m.UNCHANGED_TOAST]
    return found or None


# -- the reference walk: one message at a time through the reference decoder -------------

@dataclass(slots=True)
class _Row:
    op: int
    relation_id: int
    xid: int
    old_kind: OldKind | None
    new: tuple | None
    old: tuple | None


def _reference_row(payload: bytes | None, in_stream: bool) -> _Row:
    """One DML message by the reference decoder; raises the DecodeError explaining a bad one."""
    msg = decode_message(payload or b"", in_stream)  # None is an empty message too
    if not isinstance(msg, (m.Insert, m.Update, m.Delete)):
        raise DecodeError("expected Insert, Update or Delete", message_type=type(msg).__name__)
    new = getattr(msg, "new", None)
    key, old = getattr(msg, "key", None), getattr(msg, "old", None)
    old_kind: OldKind | None = None
    if key is not None:
        old_kind, old = "K", key
    elif old is not None:
        old_kind = "O"
    if old is not None and any(v is m.UNCHANGED_TOAST for v in old):
        raise DecodeError("unchanged TOAST value in a key/old tuple", message_type=type(msg).__name__)
    return _Row(ord(msg.TYPE), msg.relation_id, -1 if msg.xid is None else msg.xid, old_kind, new, old)


def _columns(tuples: list, width: int) -> tuple[list, list]:
    values, binary = [], []
    for c in range(width):
        raw: list = []
        flags = np.zeros(len(tuples), dtype=bool)
        for i, tup in enumerate(tuples):
            v = tup[c] if tup is not None and c < len(tup) else None
            if v is None or v is m.UNCHANGED_TOAST:
                raw.append(None)
            elif isinstance(v, str):
                raw.append(v.encode("utf-8"))
            else:
                raw.append(v)
                flags[i] = True
        values.append(pa.array(raw, type=pa.binary()))
        binary.append(flags)
    return values, binary


def _empty(n: int) -> DmlBatch:
    return DmlBatch(np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64),
                    [None] * n, np.full(n, -1, dtype=np.int32), np.full(n, -1, dtype=np.int32), [None] * n,
                    [], [], [], [], [None] * n)


def _fill(batch: DmlBatch, i: int, row: _Row) -> None:
    batch.op[i], batch.relation_id[i], batch.xid[i], batch.old_kind[i] = row.op, row.relation_id, row.xid, row.old_kind
    if row.new is not None:
        batch.new_count[i] = len(row.new)
        batch.toast[i] = toast_columns(row.new)
    if row.old is not None:
        batch.old_count[i] = len(row.old)


def walk_dml_reference(payloads: pa.Array, in_stream: np.ndarray) -> DmlBatch:
    """:func:`walk_dml` message by message through the reference decoder (slow; the tests' oracle)."""
    payloads = _as_binary(payloads)
    n = len(payloads)
    batch = _empty(n)
    new_tuples: list = [None] * n
    old_tuples: list = [None] * n
    for i, payload in enumerate(payloads.to_pylist()):
        try:
            row = _reference_row(payload, bool(in_stream[i]))
        except CdcApplyError as err:
            batch.error[i] = err.with_traceback(None)  # no frames kept alive per row
            continue
        _fill(batch, i, row)
        new_tuples[i], old_tuples[i] = row.new, row.old
    width = int(max(batch.new_count.max(initial=0), batch.old_count.max(initial=0), 0))
    batch.new_values, batch.new_binary = _columns(new_tuples, width)
    batch.old_values, batch.old_binary = _columns(old_tuples, width)
    return batch


# -- the vectorised walk ----------------------------------------------------------------

def _as_binary(payloads) -> pa.Array:
    if isinstance(payloads, pa.ChunkedArray):
        payloads = payloads.combine_chunks() if payloads.num_chunks else pa.array([], pa.binary())
    if not isinstance(payloads, pa.Array):
        payloads = pa.array(payloads, type=pa.binary())
    if pa.types.is_string(payloads.type):
        payloads = payloads.view(pa.binary())
    elif pa.types.is_large_string(payloads.type):
        payloads = payloads.view(pa.large_binary())
    elif not (pa.types.is_binary(payloads.type) or pa.types.is_large_binary(payloads.type)):
        payloads = payloads.cast(pa.binary())
    return payloads


def _counts(n: int, tuples: Tuples, ok: np.ndarray) -> np.ndarray:
    count = np.full(n, -1, dtype=np.int32)
    count[tuples.rows] = tuples.count
    count[~ok] = -1
    return count


def _build(buf: Payloads, tuples: Tuples, ok: np.ndarray, width: int):
    """Per column: the value array, the binary flags and what finds its text rows (to check UTF-8)."""
    n = buf.n
    values: list[pa.Array] = []
    binary: list[np.ndarray] = []
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = []
    ok_rows = ok[tuples.rows]
    for k, kind, start, length in tuples.columns[:width]:
        rows = tuples.rows[:k]
        is_text, is_binary = kind == KIND_TEXT, kind == KIND_BINARY
        keep = (is_text | is_binary) & ok_rows[:k]
        if keep.all():
            rows_kept, s, size = rows, start, length
        else:
            rows_kept, s, size = rows[keep], start[keep], length[keep]
        if not tuples.ascending:
            order = np.argsort(rows_kept)
            rows_kept, s, size = rows_kept[order], s[order], size[order]
        values.append(gather_column(buf, rows_kept, s, s + size))
        flags = np.zeros(n, dtype=bool)
        if is_binary.any():
            flags[rows[is_binary & keep]] = True
        binary.append(flags)
        found.append((rows, is_text, keep))
    for _ in range(len(values), width):
        values.append(pa.nulls(n, pa.binary()))
        binary.append(np.zeros(n, dtype=bool))
        found.append(None)
    return values, binary, found


def _bad_utf8(values: list, found: list) -> list[np.ndarray]:
    """Rows with a text value that is not UTF-8, per column that has any (usually none)."""
    bad = []
    for column, where in zip(values, found):
        if where is None or all_ascii(column):
            continue
        rows, is_text, keep = where
        rows = invalid_utf8_rows(column, rows[is_text & keep])
        if len(rows):
            bad.append(rows)
    return bad


def _toast(n: int, tuples: Tuples, ok: np.ndarray) -> list:
    toast: list = [None] * n
    found_rows, found_cols = [], []
    for column, (k, kind, _, _) in enumerate(tuples.columns):
        is_toast = kind == KIND_TOAST
        if not is_toast.any():
            continue
        rows = tuples.rows[:k]
        hit = rows[is_toast & ok[rows]]
        if len(hit):
            found_rows.append(hit)
            found_cols.append(np.full(len(hit), column, dtype=np.int64))
    if found_rows:
        r, c = np.concatenate(found_rows), np.concatenate(found_cols)
        order = np.lexsort((c, r))
        r, c = r[order], c[order]
        cuts = np.flatnonzero(np.diff(r)) + 1
        for row, cols in zip(r[np.r_[0, cuts]].tolist(), np.split(c, cuts)):
            toast[row] = cols.tolist()
    return toast


# Rows walked together: big inputs go in blocks whose bytes stay in the CPU caches across the
# column passes (a block of 16k typical messages is 2-3 MB).
BLOCK_ROWS = 16384


def walk_dml(payloads: pa.Array, in_stream: np.ndarray) -> DmlBatch:
    """Walk DML payloads; ``in_stream[i]`` says whether payload ``i`` sits in a stream block.

    ``payloads`` is a binary Arrow array (large_binary, string or a ChunkedArray are taken too).
    Never raises for bad bytes: a message that does not decode gets its DecodeError in ``error``.
    """
    payloads = _as_binary(payloads)
    n = len(payloads)
    in_stream = np.asarray(in_stream, dtype=bool)
    if in_stream.shape != (n,):
        raise ValueError(f"in_stream has shape {in_stream.shape}, expected ({n},)")
    if n <= BLOCK_ROWS * 3 // 2:
        return _walk_block(payloads, in_stream)
    return _concat([_walk_block(payloads.slice(i, BLOCK_ROWS), in_stream[i:i + BLOCK_ROWS])
                    for i in range(0, n, BLOCK_ROWS)])


def _concat(parts: list[DmlBatch]) -> DmlBatch:
    width = max(len(p.new_values) for p in parts)

    def columns(side: str) -> tuple[list, list]:
        values, binary = [], []
        for c in range(width):
            pieces, flags = [], []
            for p in parts:
                have = c < len(getattr(p, f"{side}_values"))
                pieces.append(getattr(p, f"{side}_values")[c] if have else pa.nulls(len(p.op), pa.binary()))
                flags.append(getattr(p, f"{side}_binary")[c] if have else np.zeros(len(p.op), dtype=bool))
            if len({piece.type for piece in pieces}) > 1:  # a block past 2 GiB gave large_binary
                pieces = [piece.cast(pa.large_binary()) for piece in pieces]
            values.append(pa.concat_arrays(pieces))
            binary.append(np.concatenate(flags))
        return values, binary

    new_values, new_binary = columns("new")
    old_values, old_binary = columns("old")
    return DmlBatch(np.concatenate([p.op for p in parts]), np.concatenate([p.relation_id for p in parts]),
                    np.concatenate([p.xid for p in parts]), [k for p in parts for k in p.old_kind],
                    np.concatenate([p.new_count for p in parts]), np.concatenate([p.old_count for p in parts]),
                    [t for p in parts for t in p.toast], new_values, new_binary, old_values, old_binary,
                    [e for p in parts for e in p.error])


def _walk_block(payloads: pa.Array, in_stream: np.ndarray) -> DmlBatch:
    n = len(payloads)
    if n == 0:
        return _empty(0)
    buf = Payloads(payloads)
    head = Header(buf, in_stream)
    ok, pos = head.ok.copy(), head.pos.copy()
    old = walk_tuples(buf, np.flatnonzero(head.has_old), pos, ok, toast_ok=False)
    expect_marker(buf, np.flatnonzero(head.has_old & head.is_update & ok), pos, ok, _N)
    new = walk_tuples(buf, np.flatnonzero(head.has_new & ok), pos, ok, toast_ok=True)
    ok &= pos == buf.ends

    while True:
        new_count, old_count = _counts(n, new, ok), _counts(n, old, ok)
        width = int(max(new_count.max(initial=0), old_count.max(initial=0), 0))
        new_values, new_binary, new_found = _build(buf, new, ok, width)
        old_values, old_binary, old_found = _build(buf, old, ok, width)
        bad = _bad_utf8(new_values + old_values, new_found + old_found)
        if not bad:
            break
        ok[np.concatenate(bad)] = False  # rare: rebuild without them

    kinds = np.full(n, None, dtype=object)
    with_old = ok & head.has_old
    kinds[with_old & (head.marker == _K)] = "K"
    kinds[with_old & (head.marker == _O)] = "O"
    batch = DmlBatch(np.where(ok, head.op, 0).astype(np.uint8), np.where(ok, head.relation_id, 0),
                     np.where(ok, head.xid, -1), kinds.tolist(), new_count, old_count, _toast(n, new, ok),
                     new_values, new_binary, old_values, old_binary, [None] * n)
    failed = np.flatnonzero(~ok)
    if len(failed):
        _explain(batch, payloads, in_stream, failed)
    return batch


def _explain(batch: DmlBatch, payloads: pa.Array, in_stream: np.ndarray, failed: np.ndarray) -> None:
    """Rows the walk refused: the reference decoder's error, or (should it accept one) its values."""
    rows = failed.tolist()
    accepted: dict[int, _Row] = {}
    for i, payload in zip(rows, payloads.take(pa.array(failed)).to_pylist()):
        try:
            accepted[i] = _reference_row(payload, bool(in_stream[i]))
        except CdcApplyError as err:
            batch.error[i] = err.with_traceback(None)  # no frames kept alive per row
    if accepted:
        _merge(batch, accepted)


def _merge(batch: DmlBatch, accepted: dict[int, _Row]) -> None:
    """Put rows decoded by the reference decoder into the batch (never expected: a safety net)."""
    n = len(batch.op)
    for i, row in accepted.items():
        _fill(batch, i, row)
    width = int(max(batch.new_count.max(initial=0), batch.old_count.max(initial=0), 0))
    where = np.arange(n, dtype=np.int64)
    rows = list(accepted)
    where[rows] = n + np.arange(len(rows))
    take = pa.array(where)
    for attr in ("new", "old"):
        values, binary = getattr(batch, f"{attr}_values"), getattr(batch, f"{attr}_binary")
        extra_values, extra_binary = _columns([getattr(accepted[i], attr) for i in rows], width)
        for c in range(width):
            if c >= len(values):
                values.append(pa.nulls(n, pa.binary()))
                binary.append(np.zeros(n, dtype=bool))
            values[c] = pa.concat_arrays([values[c].cast(pa.binary()), extra_values[c]]).take(take)
            binary[c][rows] = extra_binary[c]
