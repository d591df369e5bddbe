"""Arrays -> list<element type>: one-dimensional ones here, a column of more dimensions by :mod:`.array_nested`.

Text (array_out) is read by :mod:`.array_text`. Binary (array_send): int32 ndim, int32 has-null flag,
uint32 element OID, ndim x (int32 length, int32 lower bound), then each element as int32 length
(-1 = NULL) and its send form. A multi-dimensional value in a one-dimensional column is refused,
saying its dimensions. Elements are converted a column at a time by the element type's converter,
so an int4[] column costs one int4 conversion of all its elements.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from cdc_apply.errors import DecodeError

from ..types import MAX_ARRAY_DIMENSIONS, ColumnType
from .array_nested import binary_elements, dimension_mismatch, nested_binary, nested_text
from .array_text import parse_array_text, split_array_texts
from .common import SMALL_BATCH, Malformed, fail, offsets_and_data, raw_values, valid_mask

_INT32 = struct.Struct(">i")
_HEADER = struct.Struct(">iiI")
_DIMENSION = struct.Struct(">ii")


def parse_array_binary(raw: bytes, element_oid: int | None) -> list[bytes | None]:
    """The element send forms of array_send's bytes (None for NULL)."""
    if len(raw) < 12:
        raise Malformed("array header is 12 bytes")
    ndim, flags, oid = _HEADER.unpack_from(raw)
    if ndim == 0:
        if len(raw) != 12:
            raise Malformed("junk after an empty array")
        return []
    if ndim != 1:
        raise Malformed(dimension_mismatch(ndim, 1) if 1 < ndim <= MAX_ARRAY_DIMENSIONS
                        else f"invalid number of dimensions {ndim}")
    if flags not in (0, 1):
        raise Malformed(f"invalid array flags {flags}")
    if element_oid is not None and oid != element_oid:
        raise Malformed(f"element type OID {oid}, expected {element_oid}")
    if len(raw) < 20:
        raise Malformed("truncated array dimensions")
    count, _ = _DIMENSION.unpack_from(raw, 12)
    if count < 0 or count > len(raw):
        raise Malformed(f"invalid array length {count}")
    return binary_elements(raw, 20, count)


def array_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """array_out -> list<element>; elements converted by the element type's text converter."""
    from . import convert_text

    if ct.dimensions > 1:
        return nested_text(ct, values)
    if len(values) <= SMALL_BATCH:
        counts, flat = np.zeros(len(values) + 1, dtype=np.int64), []
        for row, raw in enumerate(raw_values(values)):
            if raw is not None:
                flat.extend(_parsed(ct, values, row, lambda: parse_array_text(raw.decode("utf-8"), ct.delimiter)))
            counts[row + 1] = len(flat)
        return _assemble(ct, values, counts, pa.array(flat, pa.binary()), convert_text)
    done, counts, starts, lengths = split_array_texts(values, ct.delimiter)
    slow_rows = np.flatnonzero(valid_mask(values) & ~done)
    slow_counts: list[int] = []
    slow_flat: list[str | None] = []
    for slow_row, slow_raw in zip(slow_rows.tolist(), raw_values(values.take(pa.array(slow_rows, pa.int64())))):
        assert slow_raw is not None  # slow rows are valid ones
        text = slow_raw
        items = _parsed(ct, values, slow_row, lambda: parse_array_text(text.decode("utf-8"), ct.delimiter))
        slow_counts.append(len(items))
        slow_flat.extend(items)
    _, data = offsets_and_data(values)
    offsets, elements = _merge_rows(len(values), np.flatnonzero(done), counts[done], _gather(data, starts, lengths),
                                    slow_rows, slow_counts, slow_flat, pa.binary())
    return _assemble(ct, values, offsets, elements, convert_text)


def array_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """array_send -> list<element>; elements converted by the element type's binary converter.

    Headers are read for all rows at once and elements are walked one position at a time
    across all rows (a numpy step per element position), so short arrays cost no Python per
    row; rows with many elements are walked in Python.
    """
    from . import convert_binary

    if ct.dimensions > 1:
        return nested_binary(ct, values)
    element = ct.element_type
    element_oid = None if element.kind == "user" else element.type_oid
    if len(values) <= SMALL_BATCH:
        counts, flat = np.zeros(len(values) + 1, dtype=np.int64), []
        for row, raw in enumerate(raw_values(values)):
            if raw is not None:
                flat.extend(_parsed(ct, values, row, lambda: parse_array_binary(raw, element_oid)))
            counts[row + 1] = len(flat)
        return _assemble(ct, values, counts, pa.array(flat, pa.binary()), convert_binary)
    offsets, data = offsets_and_data(values)
    valid = valid_mask(values)
    lengths = np.diff(offsets)
    present = np.flatnonzero(valid)
    short = present[lengths[present] < 12]
    if short.size:
        raise fail(ct, values, int(short[0]), "array header is 12 bytes")
    starts = offsets[:-1]
    header = data[starts[present][:, None] + np.arange(12)].view(">i4").astype(np.int64)
    ndim, flags = header[:, 0], header[:, 1]
    oid = header[:, 2] & 0xFFFFFFFF
    counts = np.zeros(len(values), dtype=np.int64)
    walk = present[ndim == 1]
    bad = _first_bad(present, (ndim < 0) | (ndim > 1) | ((flags != 0) & (flags != 1))
                     | ((ndim == 0) & (lengths[present] != 12)) | ((ndim == 1) & (lengths[present] < 20))
                     | ((element_oid is not None) & (oid != (element_oid or 0)) & (ndim == 1)))
    if bad is not None:
        raw = values[bad].as_py()
        _parsed(ct, values, bad, lambda: parse_array_binary(raw, element_oid))  # raises the precise reason
        raise fail(ct, values, bad, "malformed array header")
    if walk.size:
        counts[walk] = data[starts[walk][:, None] + np.arange(12, 16)].view(">i4").reshape(-1)
    bad = _first_bad(walk, (counts[walk] < 0) | (counts[walk] * 4 > lengths[walk] - 20))
    if bad is not None:
        raise fail(ct, values, bad, f"invalid array length {int(counts[bad])}")
    element_starts, element_lengths = _walk(ct, values, offsets, data, walk, counts)
    first = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    return _assemble(ct, values, first, _gather(data, element_starts, element_lengths), convert_binary)


def _first_bad(rows: np.ndarray, bad: np.ndarray) -> int | None:
    hits = np.flatnonzero(bad)
    return int(rows[hits[0]]) if hits.size else None


_LONG = 64  # rows with more elements than this are walked in Python


def _walk(ct, values, offsets, data, rows, counts):
    """Absolute (start, length) of every element, in row order; length -1 is NULL."""
    total = int(counts.sum())
    first = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    element_starts = np.zeros(total, dtype=np.int64)
    element_lengths = np.zeros(total, dtype=np.int64)
    ends = offsets[1:]
    long_rows = rows[counts[rows] > _LONG]
    active = rows[(counts[rows] > 0) & (counts[rows] <= _LONG)]
    position = offsets[:-1] + 20
    k = 0
    while active.size:
        here = position[active]
        bad = _first_bad(active, here + 4 > ends[active])
        if bad is not None:
            raise fail(ct, values, bad, "truncated array element")
        length = data[here[:, None] + np.arange(4)].view(">i4").reshape(-1).astype(np.int64)
        after = here + 4 + np.maximum(length, 0)
        bad = _first_bad(active, (length < -1) | (after > ends[active]))
        if bad is not None:
            raise fail(ct, values, bad, "invalid element length")
        element_starts[first[active] + k] = here + 4
        element_lengths[first[active] + k] = length
        position[active] = after
        k += 1
        active = active[counts[active] > k]
    done = rows[(counts[rows] > 0) & (counts[rows] <= _LONG)]
    empty = rows[counts[rows] == 0]
    bad = _first_bad(np.concatenate([done, empty]),
                     np.concatenate([position[done] != ends[done], 20 != ends[empty] - offsets[empty]]))
    if bad is not None:
        raise fail(ct, values, bad, "junk after the last array element")
    for row in long_rows:
        pos, end = int(offsets[row]) + 20, int(ends[row])
        raw = data
        for k in range(int(counts[row])):
            if pos + 4 > end:
                raise fail(ct, values, int(row), "truncated array element")
            (length,) = _INT32.unpack_from(raw, pos)
            if length < -1 or pos + 4 + max(length, 0) > end:
                raise fail(ct, values, int(row), f"invalid element length {length}")
            element_starts[first[row] + k], element_lengths[first[row] + k] = pos + 4, length
            pos += 4 + max(length, 0)
        if pos != end:
            raise fail(ct, values, int(row), "junk after the last array element")
    return element_starts, element_lengths


def _gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of the byte ranges given (NULL where the length is -1)."""
    sizes = np.maximum(lengths, 0)
    new_offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=new_offsets[1:])
    total = int(new_offsets[-1])
    if total >= 2**31:
        raise DecodeError("array elements exceed 2 GiB in one batch")
    index = np.repeat(starts - new_offsets[:-1], sizes) + np.arange(total, dtype=np.int64)
    payload = data[index] if total else np.zeros(0, np.uint8)
    valid = lengths >= 0
    nulls = int((~valid).sum())
    return pa.Array.from_buffers(pa.binary(), len(sizes),
                                 [pa.array(valid).buffers()[1] if nulls else None,
                                  pa.py_buffer(new_offsets.astype(np.int32)), pa.py_buffer(payload)],
                                 null_count=nulls)


def _parsed(ct: ColumnType, values: pa.Array, row: int, parse) -> list:
    try:
        return parse()
    except (Malformed, ValueError, IndexError, struct.error) as exc:  # UnicodeDecodeError is a ValueError
        raise fail(ct, values, int(row), str(exc) or type(exc).__name__) from None


def _merge_rows(n: int, fast_rows: np.ndarray, fast_counts: np.ndarray, fast_elements: pa.Array,
                slow_rows: np.ndarray, slow_counts: list[int], slow_flat: list, element_type: pa.DataType):
    """Row-ordered element offsets and elements from rows split two ways."""
    counts = np.zeros(n, dtype=np.int64)
    counts[fast_rows] = fast_counts
    counts[slow_rows] = slow_counts
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if not slow_rows.size:
        return offsets, fast_elements
    slow_elements = pa.array(slow_flat, element_type)
    source = np.zeros(n, dtype=np.int64)  # where each row's elements start in fast ++ slow
    source[fast_rows] = np.concatenate([[0], np.cumsum(fast_counts)[:-1]]) if fast_rows.size else []
    source[slow_rows] = len(fast_elements) + np.concatenate([[0], np.cumsum(counts[slow_rows])[:-1]])
    index = np.repeat(source - offsets[:-1], counts) + np.arange(int(offsets[-1]), dtype=np.int64)
    return offsets, pa.concat_arrays([fast_elements, slow_elements]).take(pa.array(index))


def _assemble(ct: ColumnType, values: pa.Array, offsets: np.ndarray, raw_elements: pa.Array, convert) -> pa.Array:
    if offsets[-1] >= 2**31:
        raise DecodeError("too many array elements in one batch", type=ct.pg_name)
    try:
        elements = convert(ct.element, raw_elements)
    except DecodeError as exc:
        position = exc.context.get("row", 0)
        row = int(np.searchsorted(offsets, position, side="right") - 1)
        detail = exc.detail.removeprefix(f"bad {ct.element_type.pg_name} value: ")
        raise fail(ct, values, row, f"element {position - int(offsets[row]) + 1}: {detail}") from None
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), elements, type=ct.arrow_type,
                                    mask=pa.array(~valid_mask(values)) if values.null_count else None)
