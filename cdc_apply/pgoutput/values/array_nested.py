"""Multi-dimensional arrays -> lists nested once per dimension (``int4[]`` of 2: list<list<int32>>).

A Relation message names an array type, never its dimensions (int4[] is one OID for 1-D and 2-D
values, and PostgreSQL does not enforce declared dimensions), so a column's dimensions come from
the configuration (``[tables."ns.t"] array_dimensions``; :attr:`ColumnType.dimensions`). A value
with other dimensions is a DecodeError saying both; an empty array (``{}``, 0 dimensions) fits any
column. Lower bounds other than 1 are dropped, the elements kept, as for one-dimensional arrays.

Text (array_out): ``{{1,2},{3,NULL}}``, with ``[lb:ub][lb:ub]=`` before the braces when a lower
bound is not 1. Binary (array_send): int32 ndim, int32 has-null flag, uint32 element OID,
ndim x (int32 length, int32 lower bound), then the elements in row-major order, each an int32
length (-1 = NULL) and its send form. Values are parsed one at a time; their elements are
converted a column at a time by the element type's converter.
"""

from __future__ import annotations

import struct
from math import prod
from typing import Callable

import numpy as np
import pyarrow as pa

from cdc_apply.errors import DecodeError

from ..types import MAX_ARRAY_DIMENSIONS, ColumnType
from .array_text import BOUNDS, SPACE, after_element, read_element
from .common import Malformed, fail, raw_values, valid_mask

Shape = tuple[int, ...]   # the length of each dimension; () for an empty array
_HEADER = struct.Struct(">iiI")
_DIMENSION = struct.Struct(">ii")
_INT32 = struct.Struct(">i")


def dimension_mismatch(found: int, column: int) -> str:
    """Why a value of ``found`` dimensions does not fit a column of ``column``."""
    unit = "dimension" if column == 1 else "dimensions"
    return (f"a {found}-dimensional array in a column of {column} {unit}; set the column's dimensions in its "
            f"table's array_dimensions option ([tables.\"<namespace>.<table>\"] array_dimensions = "
            f"{{ <column> = {found} }}, docs/TYPES.md)")


def parse_nested_text(text: str, delimiter: str = ",") -> tuple[Shape, list[str | None]]:
    """The shape and the elements (row-major, None for NULL) of array_out's text of any dimensions."""
    n = len(text)
    pos, bounds = 0, []
    while (match := BOUNDS.match(text, pos)) is not None:
        bounds.append(int(match[2]) - int(match[1]) + 1)
        pos = match.end()
    if bounds:
        if len(bounds) > MAX_ARRAY_DIMENSIONS:
            raise Malformed(f"more than {MAX_ARRAY_DIMENSIONS} dimensions")
        if text[pos: pos + 1] != "=":
            raise Malformed("expected '=' after the array bounds")
        pos += 1
    while pos < n and text[pos] in SPACE:
        pos += 1
    if pos >= n or text[pos] != "{":
        raise Malformed("an array starts with '{'")
    found = _Found()
    pos = _level(text, pos, 0, delimiter, found)
    if text[pos:].strip(SPACE):
        raise Malformed("junk after the array")
    shape = tuple(length for length in found.lengths[: (found.leaf + 1) if found.leaf is not None else 0]
                  if length is not None)
    if bounds and tuple(bounds) != shape:
        raise Malformed(f"bounds say {'x'.join(map(str, bounds))} elements, found {'x'.join(map(str, shape))}")
    return shape, found.elements


class _Found:
    """What the braces read so far hold: each depth's length, the depth of the elements, the elements."""

    def __init__(self) -> None:
        self.lengths: list[int | None] = [None] * MAX_ARRAY_DIMENSIONS
        self.leaf: int | None = None
        self.elements: list[str | None] = []


def _level(text: str, pos: int, depth: int, delimiter: str, found: _Found) -> int:
    """Read the braces opening at ``pos`` (at depth ``depth``); every sub-array of a depth must have
    the length the first one had (PostgreSQL's arrays are rectangular)."""
    n = len(text)
    pos += 1
    count = 0
    while True:
        while pos < n and text[pos] in SPACE:
            pos += 1
        if pos >= n:
            raise Malformed("unterminated array")
        if text[pos] == "}" and count == 0:
            if depth:
                raise Malformed("an empty sub-array")
            return pos + 1
        if text[pos] == "{":
            if found.leaf is not None and depth >= found.leaf:
                raise Malformed("elements and sub-arrays mixed at one level")
            if depth + 1 >= MAX_ARRAY_DIMENSIONS:
                raise Malformed(f"more than {MAX_ARRAY_DIMENSIONS} dimensions")
            pos = _level(text, pos, depth + 1, delimiter, found)
        else:
            if found.leaf is None:
                found.leaf = depth
            elif found.leaf != depth:
                raise Malformed("elements and sub-arrays mixed at one level")
            element, pos = read_element(text, pos, delimiter)
            found.elements.append(element)
        count += 1
        pos, closed = after_element(text, pos, delimiter)
        if closed:
            break
    if found.lengths[depth] is None:
        found.lengths[depth] = count
    elif found.lengths[depth] != count:
        raise Malformed("sub-arrays of different lengths (a multi-dimensional array is rectangular)")
    return pos


def parse_nested_binary(raw: bytes, element_oid: int | None) -> tuple[Shape, list[bytes | None]]:
    """The shape and the element send forms (row-major, None for NULL) of array_send's bytes."""
    if len(raw) < 12:
        raise Malformed("array header is 12 bytes")
    ndim, flags, oid = _HEADER.unpack_from(raw)
    if ndim == 0:
        if len(raw) != 12:
            raise Malformed("junk after an empty array")
        return (), []
    if not 0 < ndim <= MAX_ARRAY_DIMENSIONS:
        raise Malformed(f"invalid number of dimensions {ndim}")
    if flags not in (0, 1):
        raise Malformed(f"invalid array flags {flags}")
    if element_oid is not None and oid != element_oid:
        raise Malformed(f"element type OID {oid}, expected {element_oid}")
    pos = 12 + 8 * ndim
    if len(raw) < pos:
        raise Malformed("truncated array dimensions")
    shape = tuple(_DIMENSION.unpack_from(raw, 12 + 8 * i)[0] for i in range(ndim))
    count = prod(shape)
    if min(shape) < 0 or count * 4 > len(raw) - pos:
        raise Malformed(f"invalid array dimensions {'x'.join(map(str, shape))}")
    return (shape if count else ()), binary_elements(raw, pos, count)


def binary_elements(raw: bytes, pos: int, count: int) -> list[bytes | None]:
    """The ``count`` elements of array_send's bytes from ``pos`` on (each an int32 length, -1 for NULL, and its
    send form), which must end exactly at the end of ``raw``."""
    end = len(raw)
    elements: list[bytes | None] = []
    unpack = _INT32.unpack_from
    for _ in range(count):
        if pos + 4 > end:
            raise Malformed("truncated array element")
        (length,) = unpack(raw, pos)
        pos += 4
        if length == -1:
            elements.append(None)
            continue
        if length < 0 or pos + length > end:
            raise Malformed(f"invalid element length {length}")
        elements.append(raw[pos: pos + length])
        pos += length
    if pos != end:
        raise Malformed("junk after the last array element")
    return elements


def nested_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """array_out text of a column of ``ct.dimensions`` dimensions -> nested lists."""
    from . import convert_text

    return _nested(ct, values, lambda raw: parse_nested_text(raw.decode("utf-8"), ct.delimiter), convert_text)


def nested_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """array_send bytes of a column of ``ct.dimensions`` dimensions -> nested lists."""
    from . import convert_binary

    element = ct.element_type
    element_oid = None if element.kind == "user" else element.type_oid
    return _nested(ct, values, lambda raw: parse_nested_binary(raw, element_oid), convert_binary)


def _nested(ct: ColumnType, values: pa.Array, parse: Callable[[bytes], tuple[Shape, list]], convert) -> pa.Array:
    depth = ct.dimensions
    # counts[k]: how many children each list of level k has, in order (level 0: one list per row).
    counts: list[list[int]] = [[] for _ in range(depth)]
    flat: list = []
    row_starts = [0]
    for row, raw in enumerate(raw_values(values)):
        if raw is not None:
            try:
                shape, elements = parse(raw)
            except (Malformed, ValueError, IndexError, struct.error) as exc:  # UnicodeDecodeError is a ValueError
                raise fail(ct, values, row, str(exc) or type(exc).__name__) from None
            if shape and len(shape) != depth:
                raise fail(ct, values, row, dimension_mismatch(len(shape), depth))
            if not shape:
                counts[0].append(0)
            else:
                for level, length in enumerate(shape):
                    counts[level].extend([length] * prod(shape[:level]))
                flat.extend(elements)
        else:
            counts[0].append(0)
        row_starts.append(len(flat))
    if len(flat) >= 2**31:
        raise DecodeError("too many array elements in one batch", type=ct.pg_name)
    try:
        built: pa.Array = convert(ct.element, pa.array(flat, pa.binary()))
    except DecodeError as exc:
        position = exc.context.get("row", 0)
        row = int(np.searchsorted(row_starts, position, side="right") - 1)
        detail = exc.detail.removeprefix(f"bad {ct.element_type.pg_name} value: ")
        raise fail(ct, values, row, f"element {position - row_starts[row] + 1}: {detail}") from None
    for level in range(depth - 1, -1, -1):
        offsets = np.zeros(len(counts[level]) + 1, dtype=np.int32)
        np.cumsum(counts[level], out=offsets[1:])
        mask = pa.array(~valid_mask(values)) if level == 0 and values.null_count else None
        built = pa.ListArray.from_arrays(pa.array(offsets), built, mask=mask)
    return built.cast(ct.arrow_type) if built.type != ct.arrow_type else built
