"""Compare table contents with what PostgreSQL said at a checkpoint, as typed values.

Both sides go through the type map: PostgreSQL's text (``expected.json``) with
``convert_text``, our raw values with ``convert_text`` or ``convert_binary``
(reference applier) or as they come out of Spark (silver tables). A few cells
cannot be known from the change stream at all and are skipped explicitly:
columns added with a DEFAULT keep NULL in silver for rows not changed since
(PostgreSQL stores the default in the catalog and writes no WAL for them).
"""

from __future__ import annotations

from typing import Any, Mapping

import pyarrow as pa

from cdc_apply.pgoutput.types import ColumnType, TypeOptions, resolve_column_type
from cdc_apply.pgoutput.values import convert_binary, convert_text
from cdc_apply.testing.compare import canonical, python_values  # noqa: F401  (canonical: re-exported)

# (scenario, table, column): added WITH DEFAULT, so untouched rows are unknowable from the stream.
UNKNOWABLE = {
    ("ddl", "public.ddl_t", "f"),
    ("ddl", "public.ddl_big", "z"),
}


def column_types(table: Mapping[str, Any], user_types: Mapping[int, tuple[str, str]],
                 options: TypeOptions = TypeOptions()) -> list[ColumnType]:
    return [resolve_column_type(c["type_oid"], c["typmod"], user_types, options) for c in table["columns"]]


def options_for(scenario: str) -> TypeOptions:
    """The types scenario stores NaN in numeric(p,s): only the lossless "string" policy can hold it."""
    return TypeOptions(numeric="string") if scenario == "types" else TypeOptions()


def convert_one(column, user_types, raw, options: TypeOptions = TypeOptions()):
    """One raw pgoutput value (``str`` text or ``bytes`` binary) as a comparable Python value."""
    t = resolve_column_type(column.type_oid, column.type_modifier, user_types, options)
    if isinstance(raw, str):
        return python_values(convert_text(t, pa.array([raw.encode()], pa.binary())))[0]
    return python_values(convert_binary(t, pa.array([raw], pa.binary())))[0]


def recast_one(value, column, user_types, options: TypeOptions = TypeOptions()):
    """A stored value after ALTER COLUMN TYPE (what PostgreSQL's default USING cast gives for our cases)."""
    t = resolve_column_type(column.type_oid, column.type_modifier, user_types, options)
    if pa.types.is_string(t.arrow_type):
        return value if isinstance(value, str) else str(value)
    if pa.types.is_integer(t.arrow_type):
        return int(value)
    return value


def typed_expected(table: Mapping[str, Any], types: list[ColumnType]) -> list[tuple]:
    """PostgreSQL's rows as typed Python values."""
    columns = list(zip(*table["rows"])) if table["rows"] else [[] for _ in types]
    converted = [python_values(convert_text(t, pa.array([None if v is None else v.encode() for v in col], pa.binary())))
                 for t, col in zip(types, columns)]
    return [tuple(row) for row in zip(*converted)] if table["rows"] else []


# Binary mode: composites and arrays of user types have no converter and are kept as '\x' + hex of their
# send form (docs/TYPES.md), which is lossless but not their text form.
KEPT_AS_HEX_IN_BINARY = {
    ("types", "app.user_types", "c_pair"),
    ("types", "app.user_types", "c_pairs"),
    ("types", "app.user_types", "c_posints"),
}


def skipped_columns(scenario: str, table: str, names: list[str], binary: bool = False) -> set[int]:
    skip = UNKNOWABLE | (KEPT_AS_HEX_IN_BINARY if binary else set())
    return {i for i, n in enumerate(names) if (scenario, table, n) in skip}
