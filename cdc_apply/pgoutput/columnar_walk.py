"""The numpy kernels of :func:`~cdc_apply.pgoutput.columnar.walk_dml`.

All messages of a batch are walked together, one field (or one tuple column) at a time:
``pos`` holds every message's read position as an int64 array, a field is read for all
messages with one gather from the payloads' data buffer, and the positions advance by
the lengths just read. Big-endian integers at any byte offset are read through
unaligned strided views of the (padded) buffer, so a read is a single fancy index.

Nothing here raises for bad bytes: a message that does not validate (truncated, unknown
tuple kind, bad count, trailing bytes, ...) just gets ``ok[i] = False``; the caller asks
the reference decoder to explain it. Reads of a bad message stay inside the buffer
(positions never pass the message's end; the buffer is padded for the widest read).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_I, _U, _D = ord("I"), ord("U"), ord("D")
_K, _O, _N = ord("K"), ord("O"), ord("N")
KIND_TEXT, KIND_BINARY, KIND_NULL, KIND_TOAST = ord("t"), ord("b"), ord("n"), ord("u")
PAD = 16  # bytes past the last message, so every read of up to 8 bytes at pos <= end is in bounds

# Tuple column kind byte -> 0 (no value bytes: 'n', 'u'), 1 (Int32 length + bytes: 't', 'b'), 2 (bad).
_CLASS = np.full(256, 2, dtype=np.uint8)
_CLASS[[KIND_NULL, KIND_TOAST]] = 0
_CLASS[[KIND_TEXT, KIND_BINARY]] = 1
# In a key/old tuple an unchanged-TOAST value is an error.
_CLASS_NO_TOAST = _CLASS.copy()
_CLASS_NO_TOAST[KIND_TOAST] = 2
_SHIFT_KIND, _SHIFT_LEN, _MASK32 = np.uint64(56), np.uint64(24), np.uint64(0xFFFFFFFF)


class Payloads:
    """The bytes of ``n`` binary payloads as one padded numpy buffer plus per-message bounds."""

    __slots__ = ("n", "data", "buffer", "starts", "ends", "valid", "i16", "u32", "u64", "large")

    def __init__(self, payloads: pa.Array) -> None:
        n = len(payloads)
        self.n = n
        _, offsets_buf, data_buf = payloads.buffers()[:3]
        off_type = np.int64 if pa.types.is_large_binary(payloads.type) else np.int32
        if n:
            offsets = np.frombuffer(offsets_buf, dtype=off_type, count=n + 1,
                                    offset=payloads.offset * np.dtype(off_type).itemsize).astype(np.int64)
        else:
            offsets = np.zeros(1, dtype=np.int64)
        first, last = int(offsets[0]), int(offsets[-1])
        data = np.empty(last - first + PAD, dtype=np.uint8)
        data[last - first:] = 0
        if last > first:
            data[: last - first] = np.frombuffer(data_buf, dtype=np.uint8, count=last - first, offset=first)
        offsets -= first
        self.data = data
        self.buffer = pa.py_buffer(data)
        self.starts = offsets[:-1]
        self.ends = offsets[1:]
        self.valid = (np.ones(n, dtype=bool) if payloads.null_count == 0
                      else payloads.is_valid().to_numpy(zero_copy_only=False))
        size = len(data)
        # Unaligned big-endian views: u32[p] is the UInt32 whose first byte is data[p].
        self.i16 = np.ndarray(shape=(size - 1,), dtype=">i2", buffer=data, strides=(1,))
        self.u32 = np.ndarray(shape=(size - 3,), dtype=">u4", buffer=data, strides=(1,))
        self.u64 = np.ndarray(shape=(size - 7,), dtype=">u8", buffer=data, strides=(1,))
        # Past 2 GiB an Int32 length read as unsigned no longer overshoots every message end.
        self.large = size >= 2**31 - PAD


class Header:
    """Type byte, Xid, relation OID and first marker of every message (``ok`` False when unusable)."""

    __slots__ = ("op", "xid", "relation_id", "marker", "pos", "ok", "has_old", "has_new", "is_update")

    def __init__(self, buf: Payloads, in_stream: np.ndarray) -> None:
        starts, data = buf.starts, buf.data
        op = data[starts]
        rel_at = starts + 1 + 4 * in_stream.astype(np.int64)
        self.pos = rel_at + 5  # after the relation OID and the first marker
        self.xid = np.where(in_stream, buf.u32[starts + 1].astype(np.int64), -1)
        self.relation_id = buf.u32[rel_at].astype(np.int64)
        marker = data[rel_at + 4]
        is_insert, is_update, is_delete = op == _I, op == _U, op == _D
        old_marker = (marker == _K) | (marker == _O)
        marker_ok = np.where(is_insert, marker == _N, np.where(is_delete, old_marker, old_marker | (marker == _N)))
        ok = buf.valid & (self.pos <= buf.ends) & (is_insert | is_update | is_delete) & marker_ok
        self.op, self.marker, self.ok, self.is_update = op, marker, ok, is_update
        self.has_old = ok & old_marker
        self.has_new = ok & ~is_delete


class Tuples:
    """One TupleData per row of ``rows`` (sorted by column count, widest first), walked column by column.

    ``columns[c]`` is ``(k, kind, start, length)`` for the first ``k`` rows of ``rows`` (those with more
    than ``c`` columns): the kind byte, where the value bytes start and the Int32 length (meaningful
    only for 't'/'b'; read as unsigned). ``ascending``: ``rows`` kept its ascending order (all
    counts were equal, nothing was sorted).
    """

    __slots__ = ("rows", "count", "columns", "ascending")

    def __init__(self, rows: np.ndarray, count: np.ndarray, columns: list, ascending: bool) -> None:
        self.rows, self.count, self.columns, self.ascending = rows, count, columns, ascending

    @property
    def width(self) -> int:
        return len(self.columns)


def walk_tuples(buf: Payloads, rows: np.ndarray, pos: np.ndarray, ok: np.ndarray, toast_ok: bool) -> Tuples:
    """Walk the TupleData starting at ``pos[rows]``; advances ``pos`` and clears ``ok`` of bad rows."""
    ends = buf.ends[rows]
    p = pos[rows]
    count = buf.i16[p].astype(np.int64)
    p += 2
    # Every column takes at least one byte: a count the rest of the message cannot hold is bad
    # (and is never looped over).
    bad = (p > ends) | (count < 0) | (count > ends - p)
    count[bad] = 0
    ascending = True
    if len(count) and count.min() != count.max():
        ascending = False
        order = np.argsort(-count, kind="stable")
        rows, p, ends, count, bad = rows[order], p[order], ends[order], count[order], bad[order]
    width = int(count[0]) if len(count) else 0
    # k[c]: how many rows (a prefix, as sorted) have more than c columns.
    ks = np.searchsorted(-count, -np.arange(width), side="left").tolist() if width else []
    table = _CLASS if toast_ok else _CLASS_NO_TOAST
    u64, large = buf.u64, buf.large
    columns = []
    for k in ks:
        here = p[:k]
        e = ends[:k] if k != len(p) else ends
        word = u64[here].astype(np.uint64)
        kind = (word >> _SHIFT_KIND).astype(np.intp)
        cls = table[kind]
        has = cls == 1
        length = ((word >> _SHIFT_LEN) & _MASK32).view(np.int64)
        start = here + 5
        # A negative Int32 read as unsigned is >= 2**31: it runs past every message end.
        new = np.where(has, start + length, here + 1)
        b = (cls > 1) | (new > e)
        if large:
            b |= has & (length >= 2**31)
        if b.any():
            bad[:k] |= b
            new[b] = e[b]  # a bad row stays at its end: later reads stay in bounds
        p[:k] = new
        columns.append((k, kind, start, length))
    pos[rows] = p
    ok[rows[bad]] = False
    count[bad] = -1
    return Tuples(rows, count, columns, ascending)


def expect_marker(buf: Payloads, rows: np.ndarray, pos: np.ndarray, ok: np.ndarray, marker: int) -> None:
    """Rows of ``rows`` must have ``marker`` at ``pos``; step over it."""
    p = pos[rows]
    good = (p < buf.ends[rows]) & (buf.data[p] == marker)
    ok[rows[~good]] = False
    pos[rows] = p + 1


def gather_column(buf: Payloads, rows: np.ndarray, start: np.ndarray, stop: np.ndarray) -> pa.Array:
    """A binary array of ``n`` values: ``data[start[j]:stop[j]]`` at row ``rows[j]``, null at other rows.

    ``rows`` ascends, and each row's value lies inside its own message, so the bounds in row order
    never go backwards: they are the offsets of a binary array of 2m-1 segments (the values and the
    gaps between them) over the data buffer, and taking the even segments copies the values out in
    one Arrow call.
    """
    n, m = buf.n, len(rows)
    if m == 0:
        return pa.nulls(n, pa.binary())
    big = buf.large
    offsets = np.empty(2 * m, dtype=np.int64 if big else np.int32)
    offsets[0::2] = start
    offsets[1::2] = stop
    segments = pa.Array.from_buffers(pa.large_binary() if big else pa.binary(), 2 * m - 1,
                                     [None, pa.py_buffer(offsets), buf.buffer])
    if m == n:
        take = np.arange(0, 2 * n, 2, dtype=np.int32 if n < 2**30 else np.int64)
        return segments.take(take)
    where = np.zeros(n, dtype=np.int64)
    where[rows] = np.arange(0, 2 * m, 2)
    present = np.zeros(n, dtype=bool)
    present[rows] = True
    take = pa.Array.from_buffers(pa.int64(), n, [pa.py_buffer(np.packbits(present, bitorder="little")),
                                                 pa.py_buffer(where)])
    return segments.take(take)


def all_ascii(column: pa.Array) -> bool:
    """Whether every byte of the column's values is ASCII (then every value is valid UTF-8)."""
    _, offsets, data = column.buffers()[:3]
    large = pa.types.is_large_binary(column.type)
    bounds = np.frombuffer(offsets, dtype=np.int64 if large else np.int32, count=len(column) + 1,
                           offset=column.offset * (8 if large else 4))
    first, last = int(bounds[0]), int(bounds[-1])
    return last == first or int(np.frombuffer(data, dtype=np.uint8, count=last - first, offset=first).max()) < 0x80


def invalid_utf8_rows(column: pa.Array, text_rows: np.ndarray) -> np.ndarray:
    """Rows of ``text_rows`` whose value in ``column`` is not valid UTF-8."""
    if not len(text_rows):
        return text_rows
    _, offsets, data = column.buffers()[:3]
    large = pa.types.is_large_binary(column.type)
    mask = np.zeros(len(column), dtype=bool)
    mask[text_rows] = True
    strings = pa.Array.from_buffers(pa.large_string() if large else pa.string(), len(column),
                                    [pa.py_buffer(np.packbits(mask, bitorder="little")), offsets, data],
                                    offset=column.offset)
    try:
        strings.validate(full=True)
        return text_rows[:0]
    except pa.ArrowInvalid:
        pass
    bad = []
    for row, value in zip(text_rows.tolist(), column.take(pa.array(text_rows)).to_pylist()):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(row)
    return np.asarray(bad, dtype=np.int64)
