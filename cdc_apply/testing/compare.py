"""Does silver equal the source? Table by table, every row, every column, typed values compared exactly.

PostgreSQL's side is read as the text of each type's output function (what
pgoutput sends in text mode) and converted with the same type map the job
uses; silver's side is read from the Delta tables. Dates and timestamps are
compared as their integers (Python's datetime cannot hold BC or infinity),
floats bit-exactly (NaN equal to NaN), decimals by value.

Used by ``make demo``, the differential suite, and by anyone who wants to
check a pipeline against its source.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable, Mapping

import pyarrow as pa

from cdc_apply.pgoutput.types import ColumnType, TypeOptions, resolve_column_type
from cdc_apply.pgoutput.values import convert_text

_TABLES = """
SELECT c.oid::int8, n.nspname, c.relname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'
ORDER BY n.nspname, c.relname
"""
_COLUMNS = """
SELECT a.attname, a.atttypid::int8, a.atttypmod
FROM pg_attribute a WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
"""


@dataclass(frozen=True)
class SourceTable:
    oid: int
    namespace: str
    name: str
    columns: tuple[tuple[str, int, int], ...]  # (name, type oid, typmod)
    rows: tuple[tuple[str | None, ...], ...]   # output-function text

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass
class TableCheck:
    name: str
    equal: bool
    source_rows: int
    silver_rows: int
    missing: list = field(default_factory=list)     # in the source, not in silver (a few)
    unexpected: list = field(default_factory=list)  # in silver, not in the source (a few)

    def line(self) -> str:
        verdict = "OK" if self.equal else "DIFFERS"
        text = f"{verdict:8s} {self.name}: source {self.source_rows} rows, silver {self.silver_rows} rows"
        if not self.equal:
            text += f"; missing {self.missing[:3]}; unexpected {self.unexpected[:3]}"
        return text


def snapshot_postgres(conn, schemas: Iterable[str] | None = None) -> list[SourceTable]:
    """Every user table of the connected database (or of ``schemas``), rows as output-function text."""
    from psycopg2 import sql

    wanted = set(schemas) if schemas is not None else None
    out = []
    with conn.cursor() as cur:
        cur.execute(_TABLES)
        tables = cur.fetchall()
        for oid, namespace, name in tables:
            if wanted is not None and namespace not in wanted:
                continue
            cur.execute(_COLUMNS, (oid,))
            columns = tuple((n, t, m) for n, t, m in cur.fetchall())
            exprs = [sql.SQL("CASE WHEN num_nulls({0}) = 1 THEN NULL ELSE format('%s', {0}) END").format(
                sql.Identifier(c[0])) for c in columns]
            cur.execute(sql.SQL("SELECT {} FROM {}.{}").format(
                sql.SQL(", ").join(exprs) if exprs else sql.SQL("1"), sql.Identifier(namespace), sql.Identifier(name)))
            rows = tuple(tuple(r) for r in cur.fetchall()) if exprs else ()
            out.append(SourceTable(oid, namespace, name, columns, rows))
    return out


def _storage(array_type: pa.DataType) -> pa.DataType:
    if pa.types.is_date32(array_type):
        return pa.int32()
    if pa.types.is_timestamp(array_type):
        return pa.int64()
    if pa.types.is_list(array_type):
        return pa.list_(_storage(array_type.value_type))
    return array_type


def python_values(array: pa.Array) -> list:
    """An Arrow array as comparable Python values (dates and timestamps as integers)."""
    storage = _storage(array.type)
    return (array.cast(storage) if storage != array.type else array).to_pylist()


def typed_source_rows(table: SourceTable, user_types: Mapping[int, tuple[str, str]],
                      options: TypeOptions = TypeOptions()) -> list[tuple]:
    types: list[ColumnType] = [resolve_column_type(t, m, user_types, options) for _, t, m in table.columns]
    if not table.rows:
        return []
    columns = list(zip(*table.rows))
    converted = [python_values(convert_text(t, pa.array([None if v is None else v.encode() for v in col],
                                                          pa.binary())))
                 for t, col in zip(types, columns)]
    return [tuple(r) for r in zip(*converted)]


def silver_rows(df, columns: Iterable[str]) -> list[tuple]:
    """Rows of a silver DataFrame's ``columns`` as comparable Python values."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    by_name = {f.name: f.dataType for f in df.schema.fields}
    exprs = []
    for name in columns:
        c, t = F.col(f"`{name}`"), by_name[name]
        if isinstance(t, T.DateType):
            c = F.unix_date(c)
        elif isinstance(t, (T.TimestampType, T.TimestampNTZType)):
            c = F.unix_micros(c.cast("timestamp"))
        elif isinstance(t, T.ArrayType) and isinstance(t.elementType, T.DateType):
            c = F.transform(c, F.unix_date)
        elif isinstance(t, T.ArrayType) and isinstance(t.elementType, (T.TimestampType, T.TimestampNTZType)):
            c = F.transform(c, lambda x: F.unix_micros(x.cast("timestamp")))
        exprs.append(c.alias(name))

    # Arrow, not Row objects: collect() builds a Python Row per row, which dominated the soak's comparison.
    table = df.select(*exprs).toArrow()
    return list(zip(*(python_values(table.column(i).combine_chunks()) for i in range(table.num_columns))))


def _norm(value: Any) -> Any:
    if isinstance(value, float):
        return ("nan",) if math.isnan(value) else ("f", value.hex())
    if isinstance(value, Decimal):
        return ("dec", str(value.normalize()) if value.is_finite() else str(value))
    if isinstance(value, (list, tuple)):
        return tuple(_norm(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def canonical(rows: Iterable[tuple], skip: Iterable[int] = ()) -> list[tuple]:
    """Rows normalised for an exact comparison, sorted (a multiset: duplicates count)."""
    skipped = set(skip)
    return sorted((tuple(_norm(v) for i, v in enumerate(r) if i not in skipped) for r in rows), key=repr)


_PLAIN = frozenset({int, str, bool, bytes, type(None)})


def _normalised(rows: list[tuple], skipped: set[int]):
    """Rows with every value normalised; columns of plain values (most) skip the per-value call."""
    columns = [col for i, col in enumerate(zip(*rows)) if i not in skipped]
    columns = [col if set(map(type, col)) <= _PLAIN else tuple(map(_norm, col)) for col in columns]
    return zip(*columns) if columns else (() for _ in rows)


def compare_rows(name: str, source: list[tuple], silver: list[tuple], skip: Iterable[int] = ()) -> TableCheck:
    # A multiset compared by hashing: sorting by repr (canonical) grew to minutes at soak sizes.
    skipped = set(skip)
    want, got = (Counter(_normalised(rows, skipped)) for rows in (source, silver))
    check = TableCheck(name, want == got, want.total(), got.total())
    if not check.equal:
        check.missing = list((want - got).elements())[:5]
        check.unexpected = list((got - want).elements())[:5]
    return check


def compare_with_postgres(spark, config, conn, source: str, schemas: Iterable[str] | None = None,
                          options: TypeOptions = TypeOptions(),
                          snapshot: list[SourceTable] | None = None) -> list[TableCheck]:
    """Every table of the PostgreSQL database behind ``conn`` against its silver table.

    Silver tables are found through the pipeline's schema history (a relation's silver table is
    where its first name put it), so renamed tables are compared too. A table the stream never
    described must be empty in PostgreSQL. ``snapshot`` (from :func:`snapshot_postgres`) lets several
    sources of one database be compared against one read of it.
    """
    from cdc_apply.delta.bookkeeping import Bookkeeping
    from cdc_apply.delta.tables import silver_ref

    history = Bookkeeping(config).load_history(spark).get(source)
    checks = []
    for table in snapshot if snapshot is not None else snapshot_postgres(conn, schemas):
        user_types = history.types if history else {}
        want = typed_source_rows(table, user_types, options)
        relation = history.relations.get(table.oid) if history else None
        if relation is None:
            checks.append(compare_rows(table.qualified_name, want, []))
            continue
        first = relation.versions[0]
        ref = silver_ref(config, first.namespace, first.name, source)
        names = [c[0] for c in table.columns]
        got = silver_rows(ref.read(spark), names) if ref.exists(spark) else []
        checks.append(compare_rows(table.qualified_name, want, got))
    return checks
