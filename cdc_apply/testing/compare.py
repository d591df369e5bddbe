"""Does silver equal the source? Table by table, every row, every column, typed values compared exactly.

PostgreSQL's side is read as the text of each type's output function (what
pgoutput sends in text mode) and converted with the same type map the job
uses; silver's side is read from the Delta tables. Dates and timestamps are
compared as their integers (Python's datetime cannot hold BC or infinity),
floats bit-exactly (NaN equal to NaN), decimals by value. Tables are compared
in Arrow (:func:`compare_tables`): Python values only for nested columns and to
name the rows that differ.

Used by ``make demo``, the differential suite, and by anyone who wants to
check a pipeline against its source.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Iterable, Mapping

import pyarrow as pa

from cdc_apply.pgoutput.types import ColumnType, TypeOptions, resolve_relation_column
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


def typed_source_table(table: SourceTable, user_types: Mapping[int, tuple[str, str]],
                       options: TypeOptions = TypeOptions()) -> pa.Table:
    """The source table's rows as typed Arrow columns (``c0``, ``c1``, ...), converted like the job does
    (an array column with the dimensions ``options`` give it)."""
    types: list[ColumnType] = [resolve_relation_column(t, m, user_types, options, table.qualified_name, name)
                               for name, t, m in table.columns]
    columns = list(zip(*table.rows)) if table.rows else [()] * len(types)
    arrays = [convert_text(t, pa.array([None if v is None else v.encode() for v in col], pa.binary()))
              for t, col in zip(types, columns)]
    return _positional(arrays, len(table.rows))


def silver_table(df, columns: Iterable[str]) -> pa.Table:
    """A silver DataFrame's ``columns`` as an Arrow table (``c0``, ``c1``, ...)."""
    names = list(columns)
    if not names:
        return _positional([], df.count())
    table = df.select(*["`" + n.replace("`", "``") + "`" for n in names]).toArrow()
    return _positional([column.combine_chunks() for column in table.columns], table.num_rows)


def silver_rows(df, columns: Iterable[str]) -> list[tuple]:
    """Rows of a silver DataFrame's ``columns`` as comparable Python values."""
    return _python_rows(silver_table(df, columns))


def _positional(arrays: list[pa.Array], rows: int) -> pa.Table:
    if not arrays:  # a table without columns still has its rows
        return pa.table({"_": pa.nulls(rows)}).drop_columns(["_"])
    return pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])


def _python_rows(table: pa.Table) -> list[tuple]:
    if table.num_columns == 0:
        return [()] * table.num_rows
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


_SORTABLE = (pa.types.is_integer, pa.types.is_boolean, pa.types.is_string, pa.types.is_large_string,
             pa.types.is_binary, pa.types.is_large_binary, pa.types.is_decimal, pa.types.is_null)
_FLOAT_BITS = {pa.float64(): pa.int64(), pa.float32(): pa.int32(), pa.float16(): pa.int16()}


def _comparable(array: pa.Array) -> pa.Array:
    """Dates and timestamps as their integers, floats as their bits (one NaN)."""
    import pyarrow.compute as pc

    storage = _storage(array.type)
    if pa.types.is_time(array.type):
        storage = pa.int64() if pa.types.is_time64(array.type) else pa.int32()
    if storage != array.type and not pa.types.is_list(storage):
        array = array.cast(storage)
    bits = _FLOAT_BITS.get(array.type)
    if bits is not None:
        array = pc.if_else(pc.is_nan(array), pa.scalar(float("nan"), array.type), array).view(bits)
    return array


def _comparable_pair(a: pa.Array, b: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Both sides of one column in one sortable Arrow type; what Arrow cannot sort or the two sides
    type differently (nested values, decimals of other scales) as the text of their normalised value."""
    a, b = _comparable(a), _comparable(b)
    if a.type == b.type and any(test(a.type) for test in _SORTABLE):
        return a, b
    if all(pa.types.is_string(x.type) or pa.types.is_large_string(x.type) for x in (a, b)):
        return a.cast(pa.large_string()), b.cast(pa.large_string())
    return tuple(pa.array([repr(_norm(v)) for v in python_values(x)], pa.string()) for x in (a, b))


def compare_tables(name: str, source: pa.Table, silver: pa.Table) -> TableCheck:
    """:func:`compare_rows` over Arrow tables of the same column order, compared in Arrow: both sides
    sorted by every column, then compared whole. Rows go to Python only to name the differences."""
    import pyarrow.compute as pc

    if source.num_columns != silver.num_columns:
        raise ValueError(f"{name}: {source.num_columns} source columns vs {silver.num_columns} silver columns")
    if source.num_rows != silver.num_rows:
        equal = False
    elif source.num_columns == 0:
        equal = True
    else:
        pairs = [_comparable_pair(source.column(i).combine_chunks(), silver.column(i).combine_chunks())
                 for i in range(source.num_columns)]
        names = [f"c{i}" for i in range(len(pairs))]
        sides = [pa.Table.from_arrays([p[k] for p in pairs], names=names) for k in (0, 1)]
        keys = [(n, "ascending") for n in names]
        ordered = [t.take(pc.sort_indices(t, sort_keys=keys, null_placement="at_end")) for t in sides]
        equal = ordered[0].equals(ordered[1])
    if equal:
        return TableCheck(name, True, source.num_rows, silver.num_rows)
    return compare_rows(name, _python_rows(source), _python_rows(silver))


# Silver is read in parts of about this many bytes (as the source's Arrow size): one toArrow of a
# whole soak table (~690,000 rows, ~300 columns, 1.1 GB) broke spark.driver.maxResultSize.
PART_BYTES = 256 * 2 ** 20


def compare_silver(name: str, want: pa.Table, df, names: list[str], part_bytes: int = PART_BYTES) -> TableCheck:
    """:func:`compare_tables` of the source rows ``want`` against the silver DataFrame ``df``, in parts
    by ranges of the first column's values when that column is an integer and the table is large:
    the same ranges cut both sides, so the tables are equal exactly when every part is."""
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    parts = -(-want.nbytes // part_bytes)
    first = want.column(0).combine_chunks() if want.num_columns else None
    present = pc.drop_null(first) if first is not None and pa.types.is_integer(first.type) else None
    if parts <= 1 or present is None or len(present) == 0:
        return compare_tables(name, want, silver_table(df, names))
    cuts = pc.quantile(present, q=[k / parts for k in range(1, parts)], interpolation="lower").to_pylist()
    edges = [None, *sorted(set(int(c) for c in cuts)), None]
    column = F.col(f"`{names[0]}`")
    checks = []
    for low, high in zip(edges, edges[1:]):  # (low, high]; open at the ends
        mask, cond = pc.is_valid(first), column.isNotNull()
        if low is not None:
            mask, cond = pc.and_(mask, pc.greater(first, low)), cond & (column > low)
        if high is not None:
            mask, cond = pc.and_(mask, pc.less_equal(first, high)), cond & (column <= high)
        checks.append(compare_tables(name, want.filter(mask), silver_table(df.where(cond), names)))
    checks.append(compare_tables(name, want.filter(pc.is_null(first)), silver_table(df.where(column.isNull()), names)))
    return TableCheck(name, all(c.equal for c in checks), sum(c.source_rows for c in checks),
                      sum(c.silver_rows for c in checks), [r for c in checks for r in c.missing][:5],
                      [r for c in checks for r in c.unexpected][:5])


def apply_column_rules(want: pa.Table, names: list[str], relation, config) -> tuple[pa.Table, list[str]]:
    """PostgreSQL's rows as silver keeps them under the table's ``exclude_columns`` and ``mask_columns``
    (resolved by lineage over the relation's versions, as the job resolves them): excluded columns
    left out, masked ones masked by the same rule in Python (:mod:`cdc_apply.planning.masks`)."""
    from cdc_apply.planning.masks import mask_value
    from cdc_apply.planning.tables import resolve_rules

    latest = relation.versions[-1]
    rules = resolve_rules(relation.versions, config.columns_for(latest.qualified_name))
    if not (rules.excluded or rules.masked):
        return want, names
    salt, masks = config.mask_salt(), dict(rules.masked)
    # A name's column in the newest version that has it: ``names`` may be of an older state (history).
    lineage_of = {c.name: lin for version in relation.versions for lin, c in zip(version.lineage, version.columns)}
    arrays, kept = [], []
    for i, name in enumerate(names):
        lineage = lineage_of.get(name)
        if lineage in rules.excluded:
            continue
        column = want.column(i).combine_chunks()
        if lineage in masks:
            column = pa.array([mask_value(masks[lineage], salt, v) for v in column.to_pylist()], pa.string())
        arrays.append(column)
        kept.append(name)
    return _positional(arrays, want.num_rows), kept


def compare_with_postgres(spark, config, conn, source: str, schemas: Iterable[str] | None = None,
                          options: TypeOptions = TypeOptions(),
                          snapshot: list[SourceTable] | None = None) -> list[TableCheck]:
    """Every table of the PostgreSQL database behind ``conn`` against its silver table.

    Silver tables are found through the pipeline's schema history (a relation's silver table is
    where its first name put it), so renamed tables are compared too. A table the stream never
    described must be empty in PostgreSQL. ``snapshot`` (from :func:`snapshot_postgres`) lets several
    sources of one database be compared against one read of it.
    """
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.delta.refs import silver_ref_for
    from cdc_apply.lake.books.bookkeeping import Bookkeeping
    from cdc_apply.lake.silver.soft_deletes import live_rows

    engine = spark_tables(spark)
    history = Bookkeeping(config).load_history(engine).get(source)
    if not options.array_dimensions:   # the configuration's, as the job types the columns
        options = replace(options, array_dimensions=config.array_dimensions())
    checks = []
    for table in snapshot if snapshot is not None else snapshot_postgres(conn, schemas):
        user_types = history.types if history else {}
        want = typed_source_table(table, user_types, options)
        relation = history.relations.get(table.oid) if history else None
        ref = None
        if relation is not None:
            ref = silver_ref_for(config, source, relation.versions)
        if ref is not None and engine.exists(ref):
            names = [c[0] for c in table.columns]
            want, names = apply_column_rules(want, names, relation, config)
            silver = live_rows(ref.read(spark), config.silver.metadata_prefix)   # soft-deleted rows: absent
            checks.append(compare_silver(table.qualified_name, want, silver, names))
        else:  # no silver table: the source table must be empty
            checks.append(compare_rows(table.qualified_name, _python_rows(want), []))
    return checks
