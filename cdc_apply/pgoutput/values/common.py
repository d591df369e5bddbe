"""Shared machinery of the value converters: Arrow buffers as numpy, errors, per-value fallbacks.

Converters work a column at a time. The raw column is a ``pa.binary()`` array; its offsets
and data buffers are read as numpy arrays so fixed-width binary forms turn into numbers
without touching Python objects, and rare shapes go through :func:`per_value`, which
converts each *distinct* value once (low-cardinality columns are common in CDC batches).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_apply.errors import DecodeError

from ..types import ColumnType

_EXCERPT = 40
# Up to this many arrays, parsing them in Python beats the fixed cost of the numpy paths.
SMALL_BATCH = 128
ScalarParser = Callable[[ColumnType, bytes], Any]


class Malformed(Exception):
    """Raised inside per-value parsers; :func:`per_value` turns it into a DecodeError with the row."""


def excerpt(raw: Any) -> str:
    """A short printable excerpt of a raw value for error messages."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    raw = bytes(raw)
    text = repr(raw[:_EXCERPT])
    return text + ("..." if len(raw) > _EXCERPT else "")


def fail(column_type: ColumnType, values: pa.Array, row: int, detail: str) -> DecodeError:
    """A DecodeError naming the type, the row and an excerpt of the row's bytes."""
    scalar = values[row].as_py() if 0 <= row < len(values) else None
    return DecodeError(f"bad {column_type.pg_name} value: {detail}",
                       type=column_type.pg_name, row=row,
                       value=excerpt(scalar) if scalar is not None else None)


def as_binary(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The raw column as one ``pa.binary()`` array (large_binary and strings are accepted)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_binary(values.type):
        return values
    if pa.types.is_large_binary(values.type) or pa.types.is_string(values.type) \
            or pa.types.is_large_string(values.type):
        if values.nbytes < 2**31 - 1:
            return values.cast(pa.binary())
        return values.cast(pa.large_binary())
    raise DecodeError(f"raw column values must be binary, not {values.type}")


def offsets_and_data(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Absolute value offsets (n + 1, int64) into the data bytes (uint8) of a binary array."""
    n = len(values)
    buffers = values.buffers()
    width = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    offsets = np.frombuffer(buffers[1], dtype=width, count=n + 1, offset=values.offset * width().itemsize)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return offsets.astype(np.int64, copy=False), data


def raw_values(values: pa.Array) -> list[bytes | None]:
    """The values as Python bytes (None for null): slices of one bytes copy, cheaper than to_pylist."""
    offsets, data = offsets_and_data(values)
    start, stop = int(offsets[0]), int(offsets[-1])
    blob = data[start:stop].tobytes()
    bounds = (offsets - start).tolist()
    if values.null_count == 0:
        return [blob[a:b] for a, b in zip(bounds, bounds[1:])]
    return [blob[a:b] if ok else None for a, b, ok in zip(bounds, bounds[1:], valid_mask(values).tolist())]


def valid_mask(values: pa.Array) -> np.ndarray:
    """True where the value is present."""
    if values.null_count == 0:
        return np.ones(len(values), dtype=bool)
    return values.is_valid().to_numpy(zero_copy_only=False)


def validity_of(values: pa.Array) -> pa.Buffer | None:
    """A zero-offset validity bitmap equal to ``values``' (None when nothing is null)."""
    if values.null_count == 0:
        return None
    if values.offset == 0:
        return values.buffers()[0]
    return pa.array(valid_mask(values)).buffers()[1]


def with_nulls_of(values: pa.Array, arrow_type: pa.DataType, data: np.ndarray) -> pa.Array:
    """An Arrow array of a fixed-width type from native-endian ``data``, nulls where ``values`` has them."""
    return pa.Array.from_buffers(arrow_type, len(values),
                                 [validity_of(values), pa.py_buffer(np.ascontiguousarray(data))],
                                 null_count=values.null_count)


def fixed_width(column_type: ColumnType, values: pa.Array, width: int) -> np.ndarray:
    """The bytes of a column whose binary form is exactly ``width`` bytes, as (n, width) uint8.

    Null rows come back as zeros. A present value of another length is a DecodeError.
    """
    n = len(values)
    offsets, data = offsets_and_data(values)
    lengths = np.diff(offsets)
    valid = valid_mask(values)
    bad = np.flatnonzero(valid & (lengths != width))
    if bad.size:
        row = int(bad[0])
        raise fail(column_type, values, row, f"expected {width} bytes, got {int(lengths[row])}")
    start, stop = int(offsets[0]), int(offsets[-1])
    if stop - start == n * width:  # no nulls, or nulls stored as width bytes: one slice
        return data[start:stop].reshape(n, width)
    out = np.zeros((n, width), dtype=np.uint8)
    if stop - start == int(valid.sum()) * width and not lengths[~valid].any():
        out[valid] = data[start:stop].reshape(-1, width)
        return out
    rows = np.flatnonzero(valid)
    out[rows] = data[offsets[rows][:, None] + np.arange(width)]
    return out


def big_endian(block: np.ndarray, dtype: str) -> np.ndarray:
    """Native-endian numbers from an (n, width) block of big-endian bytes (``dtype`` like '>i4')."""
    return np.ascontiguousarray(block).view(dtype).reshape(-1).astype(dtype.replace(">", "="))


def strings_from_rows(rows: np.ndarray, values: pa.Array) -> pa.Array:
    """A string array from an (n, width) uint8 block of ASCII, nulls where ``values`` has them."""
    n, width = rows.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [validity_of(values), pa.py_buffer(offsets),
                                                  pa.py_buffer(np.ascontiguousarray(rows))],
                                 null_count=values.null_count)


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_rows(block: np.ndarray, groups: Sequence[int] = (), separator: int = ord(":")) -> np.ndarray:
    """Lower-case hex of each row of an (n, width) byte block, ``separator`` after the given byte counts.

    ``groups=(4, 6, 8, 10)`` with '-' gives the UUID layout; every byte with ':' gives MAC addresses.
    """
    n, width = block.shape
    digits = np.empty((n, width, 2), dtype=np.uint8)
    digits[:, :, 0] = _HEX[block >> 4]
    digits[:, :, 1] = _HEX[block & 15]
    text = digits.reshape(n, width * 2)
    if not groups:
        return text
    pieces, previous = [], 0
    for cut in groups:
        pieces.append(text[:, previous * 2: cut * 2])
        pieces.append(np.full((n, 1), separator, dtype=np.uint8))
        previous = cut
    pieces.append(text[:, previous * 2:])
    return np.concatenate(pieces, axis=1)


def decimal_from_int64(arrow_type: pa.DataType, unscaled: np.ndarray, values: pa.Array) -> pa.Array:
    """A decimal128 array whose unscaled values are the int64s given."""
    unscaled = unscaled.astype(np.int64, copy=False)
    words = np.empty((len(unscaled), 2), dtype=np.int64)
    words[:, 0] = unscaled
    words[:, 1] = unscaled >> 63  # sign extension to 128 bits
    return with_nulls_of(values, arrow_type, words)


def per_value(column_type: ColumnType, values: pa.Array, parse: Callable[[bytes], Any],
              build: Callable[[list], pa.Array], rows: np.ndarray | None = None) -> pa.Array:
    """Convert each distinct value with ``parse`` (bytes -> Python value) and ``build`` the column.

    ``parse`` raises :class:`Malformed` (or ValueError/IndexError/...) on a malformed value;
    the DecodeError names the first row holding it (``rows[i]`` when ``values`` is a subset
    taken at ``rows`` of the caller's column).
    """
    if len(values) == 0:
        return build([])
    encoded = values.dictionary_encode()
    dictionary = raw_values(encoded.dictionary)
    converted = []
    for position, raw in enumerate(dictionary):
        assert raw is not None  # a dictionary holds no nulls
        try:
            converted.append(parse(raw))
        except DecodeError:
            raise
        except Exception as exc:  # noqa: BLE001 - any parse failure is a malformed value
            indices = encoded.indices.to_numpy(zero_copy_only=False)
            row = int(np.flatnonzero(indices == position)[0])
            error = fail(column_type, values, row, _reason(exc))
            if rows is not None:
                error.context["row"] = int(rows[row])
                error = error.with_context()
            raise error from None
    return build(converted).take(encoded.indices)


def one_by_one(column_type: ColumnType, values: pa.Array, parse: ScalarParser) -> pa.Array:
    """Convert a few values with a scalar ``parse`` (raw bytes -> Python value for pa.array)."""
    out: list[object] = []
    for row, raw in enumerate(raw_values(values)):
        if raw is None:
            out.append(None)
            continue
        try:
            out.append(parse(column_type, raw))
        except DecodeError:
            raise
        except Exception as exc:  # noqa: BLE001 - any parse failure is a malformed value
            raise fail(column_type, values, row, _reason(exc)) from None
    return pa.array(out, column_type.arrow_type)


def _reason(exc: Exception) -> str:
    text = str(exc)
    return text if isinstance(exc, Malformed) and text else f"{type(exc).__name__}: {text}" if text \
        else type(exc).__name__


def first_bad_row(values: pa.Array, good: pa.Array | np.ndarray) -> int | None:
    """The first present row where ``good`` is false (or null), else None."""
    if isinstance(good, (pa.Array, pa.ChunkedArray)):
        good = pc.fill_null(good, False).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(valid_mask(values) & ~good)
    return int(bad[0]) if bad.size else None


def by_rows(arrow_type: pa.DataType, n: int, parts: list[tuple[np.ndarray, pa.Array]]) -> pa.Array:
    """One array of ``n`` rows from pieces converted for the given rows (other rows null)."""
    index = np.full(n, sum(len(rows) for rows, _ in parts), dtype=np.int64)
    start = 0
    for rows, piece in parts:
        index[rows] = start + np.arange(len(rows))
        start += len(rows)
    pieces = [piece.cast(arrow_type) for _, piece in parts] + [pa.nulls(1, arrow_type)]
    return pa.concat_arrays(pieces).take(pa.array(index))


def utf8(column_type: ColumnType, values: pa.Array) -> pa.Array:
    """The column as ``pa.string()``; invalid UTF-8 is a DecodeError naming the row."""
    try:
        return values.cast(pa.string() if pa.types.is_binary(values.type) else pa.large_string())
    except pa.ArrowInvalid:
        for row, raw in enumerate(raw_values(values)):
            if raw is not None:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise fail(column_type, values, row, f"invalid UTF-8 ({exc.reason})") from None
        raise


def cast_or_fail(column_type: ColumnType, values: pa.Array, strings: pa.Array,
                 target: pa.DataType) -> pa.Array:
    """``pc.cast`` of text to ``target``; on failure the DecodeError names the first row that fails."""
    try:
        return pc.cast(strings, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    for row in range(len(strings)):
        if strings[row].is_valid:
            try:
                pc.cast(strings.slice(row, 1), target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise fail(column_type, values, row, str(exc).split("\n")[0]) from None
    raise fail(column_type, values, 0, f"cannot convert to {target}")


def check_regex(column_type: ColumnType, values: pa.Array, strings: pa.Array, pattern: str,
                what: str) -> None:
    """Every present value matches ``pattern`` (RE2, anchored by the caller) or DecodeError."""
    row = first_bad_row(values, pc.match_substring_regex(strings, pattern))
    if row is not None:
        raise fail(column_type, values, row, f"not {what}")
