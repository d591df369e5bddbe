"""COPY ... TO STDOUT (FORMAT binary) rows -> pgoutput Insert messages, without a Python object per value.

A field of COPY's binary format is an int32 length (-1 for NULL) followed by
the type's send-function bytes; a column of pgoutput's TupleData is a kind
byte ('b' binary, 't' text, 'n' NULL) followed, unless NULL, by exactly that
int32 length and those bytes. So an Insert is the row's own bytes with a
12-byte head (``I``, xid, relation id, ``N``, the column count) and one kind
byte before each field, and a NULL field's four length bytes left out.

:func:`insert_payloads` does that for a whole chunk at once: the field
boundaries of all rows are found column by column with numpy (the rows are
the server's CopyData messages, one row each, and the walk checks every row
ends exactly where its message does), then one Arrow ``take`` lays out the
pieces — head, kind, field, kind, field, ... — into one buffer, cut into
one Insert per row. Columns whose values are copied as output text (a
``...::text`` expression in the SELECT list) get the kind 't': the text
type's send form is its UTF-8 bytes, which is what a 't' value holds.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from cdc_apply.errors import LandError
from cdc_apply.pgoutput.snapshot import SNAPSHOT_XID

SIGNATURE = b"PGCOPY\n\xff\r\n\0"
TRAILER = b"\xff\xff"
_HEADER = struct.Struct(">ii")        # flags, header extension length
_COUNT = struct.Struct(">h")
_LENGTH = struct.Struct(">i")
_INSERT_HEAD = struct.Struct(">cIIch")  # 'I', xid, relation id, 'N', number of columns
_OIDS_FLAG = 1 << 16
_CONSTANTS = b"btn"                     # kind bytes, appended after the rows; the head follows them


class CopySink:
    """The file object ``cursor.copy_expert`` writes to: keeps each CopyData message (one row) as it comes."""

    __slots__ = ("parts", "write")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.write = self.parts.append


def _header_length(first: bytes) -> int:
    if len(first) < len(SIGNATURE) + _HEADER.size or not first.startswith(SIGNATURE):
        raise LandError("COPY BINARY output does not start with the PGCOPY signature")
    flags, extension = _HEADER.unpack_from(first, len(SIGNATURE))
    if flags & _OIDS_FLAG or extension < 0:
        raise LandError(f"COPY BINARY header with flags {flags:#x}, extension {extension}: not a plain copy")
    return len(SIGNATURE) + _HEADER.size + extension


def _read_i32(data: np.ndarray, windows: np.ndarray, at: np.ndarray) -> np.ndarray:
    return windows[at].view(">i4").ravel().astype(np.int64)


def _bounds_by_scan(buf: bytes, begin: int, end: int, columns: int) -> np.ndarray:
    """Row starts found field by field (when the rows do not come one per message)."""
    starts, pos = [], begin
    while pos < end:
        starts.append(pos)
        if pos + 2 > end or _COUNT.unpack_from(buf, pos)[0] != columns:
            raise LandError(f"COPY BINARY row at byte {pos} does not have {columns} fields")
        pos += 2
        for _ in range(columns):
            if pos + 4 > end:
                raise LandError(f"COPY BINARY row is cut short at byte {pos}")
            (length,) = _LENGTH.unpack_from(buf, pos)
            pos += 4 + max(length, 0)
    if pos != end:
        raise LandError(f"COPY BINARY rows overrun their data ({pos} > {end})")
    return np.array(starts + [end], dtype=np.int64)


def insert_payloads(parts: list[bytes], relation_id: int, formats: bytes) -> pa.BinaryArray:
    """The Insert messages (xid 2, in a stream block) of one COPY BINARY output, one per row.

    ``parts``: the CopyData messages as received; ``formats``: per column ``b`` or ``t``.
    Raises :class:`LandError` when the bytes are not COPY BINARY rows of ``len(formats)`` fields.
    """
    # Imported here, not with the module: ~0.05–0.15 s that every lander's start would pay for a copy it may not take.
    import pyarrow.compute as pc

    if not parts:
        raise LandError("COPY BINARY sent nothing")
    head = _INSERT_HEAD.pack(b"I", SNAPSHOT_XID, relation_id, b"N", len(formats))
    buf = b"".join([*parts, _CONSTANTS, head])
    header = _header_length(buf)
    end = len(buf) - len(_CONSTANTS) - len(head) - len(TRAILER)
    if end < header or buf[end:end + len(TRAILER)] != TRAILER:
        raise LandError("COPY BINARY output does not end with its trailer")
    ncols = len(formats)
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    bounds = np.cumsum(lengths)[:-1]              # message ends, increasing; the last one ends the rows
    bounds = np.concatenate(([header], bounds[bounds > header]))
    data = np.frombuffer(buf, dtype=np.uint8)
    windows = np.lib.stride_tricks.as_strided(data, shape=(len(data) - 3, 4), strides=(1, 1))
    fields = _walk(buf, data, windows, bounds, end, ncols)
    if fields is None:                            # rows not one per message: find them the slow way
        fields = _walk(buf, data, windows, _bounds_by_scan(buf, header, end, ncols), end, ncols)
        if fields is None:
            raise LandError("COPY BINARY rows do not end where their fields do")
    starts, nulls = fields
    nrows = starts.shape[0]
    if nrows == 0:
        return pa.array([], pa.binary())
    # Pieces: the COPY header, each row's 2-byte count and every field, the trailer, the three kind
    # bytes, the Insert head and an empty piece (what a NULL field becomes): one binary array over buf.
    if len(buf) >= 2 ** 31:
        raise LandError("a COPY chunk of 2 GiB or more: copy smaller chunks")
    tail = len(buf) - len(_CONSTANTS) - len(head)
    grid = np.empty((nrows, ncols + 1), dtype=np.int64)
    grid[:, 0] = starts[:, 0] - 2
    grid[:, 1:] = starts
    offsets = np.concatenate(([0], grid.ravel(), [end, tail, tail + 1, tail + 2, tail + 3, len(buf), len(buf)]))
    offsets = offsets.astype(np.int32)
    pieces = pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(buf)])
    trailer = 1 + nrows * (ncols + 1)
    kind_b, kind_t, kind_n, head_at, empty = trailer + 1, trailer + 2, trailer + 3, trailer + 4, trailer + 5
    take = np.empty((nrows, 1 + 2 * ncols), dtype=np.int32)
    take[:, 0] = head_at
    kinds = np.array([kind_b if f == ord("b") else kind_t for f in formats], dtype=np.int32)
    take[:, 1::2] = np.where(nulls, kind_n, kinds)
    field_index = 2 + np.arange(nrows, dtype=np.int32)[:, None] * (ncols + 1) + np.arange(ncols, dtype=np.int32)
    take[:, 2::2] = np.where(nulls, empty, field_index)
    laid = pc.take(pieces, pa.array(take.ravel()))
    laid_offsets = np.frombuffer(laid.buffers()[1], dtype=np.int32, count=len(laid) + 1, offset=laid.offset * 4)
    row_offsets = np.ascontiguousarray(laid_offsets[::1 + 2 * ncols])
    return pa.Array.from_buffers(pa.binary(), nrows, [None, pa.py_buffer(row_offsets), laid.buffers()[2]])


def _walk(buf: bytes, data: np.ndarray, windows: np.ndarray, bounds: np.ndarray, end: int,
          ncols: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Field starts (int64, rows x columns; each at its int32 length) and NULL flags, or ``None`` when a
    row does not end exactly at its bound. Raises LandError when the bytes cannot be COPY rows at all."""
    row_starts, row_ends = bounds[:-1], bounds[1:]
    if bounds[-1] != end:
        return None
    nrows = len(row_starts)
    starts = np.empty((nrows, ncols), dtype=np.int64)
    nulls = np.empty((nrows, ncols), dtype=bool)
    if nrows == 0:
        return starts, nulls
    if np.any(row_ends - row_starts < 2):
        return None
    counts = (data[row_starts].astype(np.int64) << 8) | data[row_starts + 1]
    if np.any(counts != ncols):
        if np.any(counts == 0xFFFF):
            return None
        raise LandError(f"COPY BINARY rows do not have {ncols} fields")
    pos = row_starts + 2
    for j in range(ncols):
        if np.any(pos + 4 > row_ends):
            return None
        length = _read_i32(data, windows, pos)
        if np.any(length < -1):
            raise LandError(f"COPY BINARY field {j} with a negative length")
        starts[:, j] = pos
        nulls[:, j] = length == -1
        pos = pos + 4 + np.maximum(length, 0)
    if np.any(pos != row_ends):
        return None
    return starts, nulls
