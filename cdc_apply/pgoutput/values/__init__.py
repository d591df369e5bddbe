"""Tuple column values -> typed Arrow arrays, a column at a time.

A pgoutput TupleData carries each present column value either as text ('t': the type's
output function, UTF-8) or binary ('b': the type's send function). The decoder gathers one
column's raw values from many rows into a ``pa.binary()`` array (nulls where the value is
SQL NULL or unchanged TOAST) and converts it here into ``column_type.arrow_type``. The same
row sent as text and as binary converts to equal values (see docs/TYPES.md for the few
documented exceptions). A malformed value raises :class:`~cdc_apply.errors.DecodeError`
naming the type, the row within the array and an excerpt of its bytes.

One module per family of types, each with its ``TEXT``/``BINARY`` converters by kind:
:mod:`.numbers`, :mod:`.numeric`, :mod:`.strings`, :mod:`.dates`, :mod:`.interval`,
:mod:`.arrays` (array_out's text in :mod:`.array_text`); :mod:`.common` holds what they share.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import pyarrow as pa

from cdc_apply.errors import DecodeError

from ..types import ColumnType
from . import dates, interval, numbers, numeric, strings
from .arrays import array_binary, array_text
from .common import ScalarParser, as_binary, one_by_one

Converter = Callable[[ColumnType, pa.Array], pa.Array]

_TEXT: dict[str, Converter] = {"array": array_text}
_BINARY: dict[str, Converter] = {"array": array_binary}
# kind -> (one-value parser, most values it is used for): below that count converting value by
# value beats the fixed cost (Arrow calls, regex compiles) of the column-at-a-time path.
_SCALAR_TEXT: dict[str, tuple[ScalarParser, int]] = {}
_SCALAR_BINARY: dict[str, tuple[ScalarParser, int]] = {}
for _module in (numbers, numeric, strings, dates, interval):
    _TEXT.update(_module.TEXT)
    _BINARY.update(_module.BINARY)
    _SCALAR_TEXT.update(getattr(_module, "SCALAR_TEXT", {}))
    _SCALAR_BINARY.update(getattr(_module, "SCALAR_BINARY", {}))


def convert_text(column_type: ColumnType, values: pa.Array) -> pa.Array:
    """Convert text-format values ('t' in TupleData: the output function's UTF-8 text).

    ``values`` is ``pa.binary()`` (``large_binary`` and strings are accepted); the result is
    an array of ``column_type.arrow_type`` of the same length with the same nulls.
    """
    return _convert(_TEXT, _SCALAR_TEXT, column_type, values)


def convert_binary(column_type: ColumnType, values: pa.Array) -> pa.Array:
    """Convert binary-format values ('b' in TupleData: the type's send function output).

    Same contract as :func:`convert_text`.
    """
    return _convert(_BINARY, _SCALAR_BINARY, column_type, values)


def _convert(table: dict[str, Converter], scalars: dict[str, tuple[ScalarParser, int]], column_type: ColumnType,
             values: pa.Array) -> pa.Array:
    values = as_binary(values)
    converter = table[column_type.kind]
    if len(values) == values.null_count:
        return pa.nulls(len(values), column_type.arrow_type)
    scalar = scalars.get(column_type.kind)   # (parser, the most values it converts one by one)
    if scalar is not None and len(values) <= scalar[1]:
        converter = partial(one_by_one, parse=scalar[0])
    try:
        result = converter(column_type, values)
    except DecodeError:
        raise
    except (ValueError, TypeError, IndexError, OverflowError, ArithmeticError, UnicodeError,
            pa.ArrowException) as exc:
        # A converter bug or an input shape no check anticipated: still a DecodeError.
        raise DecodeError(f"cannot convert {column_type.pg_name} values: {type(exc).__name__}: {exc}",
                          type=column_type.pg_name) from exc
    if result.type != column_type.arrow_type:
        result = result.cast(column_type.arrow_type)
    return result


def convert_text_value(column_type: ColumnType, raw: bytes | str) -> object:
    """One text-format value -> its Python value (``as_py`` of the converted Arrow scalar).

    Same caveat as :func:`convert_binary_value` for out-of-range dates and timestamps.
    """
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    return _as_py(convert_text(column_type, pa.array([raw], pa.binary()))[0])


def convert_binary_value(column_type: ColumnType, raw: bytes) -> object:
    """One binary-format value -> its Python value (``as_py`` of the converted Arrow scalar).

    Dates and timestamps Python's datetime cannot hold (BC, past 9999, +/-infinity) come back
    as their Arrow integer: days or microseconds since 1970-01-01.
    """
    return _as_py(convert_binary(column_type, pa.array([raw], pa.binary()))[0])


def _as_py(scalar: pa.Scalar) -> object:
    try:
        return scalar.as_py()
    except (ValueError, OverflowError):
        return scalar.cast(_integers_for_dates(scalar.type)).as_py()


def _integers_for_dates(arrow_type: pa.DataType) -> pa.DataType:
    if pa.types.is_date32(arrow_type):
        return pa.int32()
    if pa.types.is_timestamp(arrow_type):
        return pa.int64()
    if pa.types.is_list(arrow_type):
        return pa.list_(_integers_for_dates(arrow_type.value_type))
    return arrow_type
