"""One canonical text per row, written once as PostgreSQL SQL and once as Spark SQL, so both sides hash alike.

A row's text is the concatenation, in column order, of ``N`` for a NULL and ``V<length>:<value>`` otherwise
(the length prefix makes the concatenation unambiguous); its hash is the first 64 bits of the MD5 of that
text as a signed BIGINT, and a range's hash is the exact sum of its rows' hashes (a multiset hash:
independent of row order, and a duplicate counts twice). Each column's value text is chosen so the two
sides render the same value identically (:mod:`cdc_apply.verification.value_text`, one encoding per type);
a column no encoding compares is named, with why (:class:`NotCompared`). Pure: no Spark, no PostgreSQL
connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cdc_apply.delta.names import pg_ident
from cdc_apply.delta.names import quote_ident as spark_ident
from cdc_apply.delta.names import quote_literal as spark_literal
from cdc_apply.pgoutput.types import ColumnType
from cdc_apply.verification.value_text import SourceFormat, pg_value_item, spark_value_item, value_text

# How a range key column's values are ordered and written: as integers, as lower-case uuid text, as text.
RangeKind = Literal["int", "uuid", "text"]
# Key columns a range can be cut on: they order the same in PostgreSQL (text under COLLATE "C") and in Spark.
RANGE_KINDS: dict[str, RangeKind] = {"int2": "int", "int4": "int", "int8": "int", "uuid": "uuid", "text": "text"}



@dataclass(frozen=True)
class ColumnEncoding:
    """One column's value text on both sides (``None``-valued exactly when the column is NULL)."""

    name: str
    kind: str
    pg: str       # PostgreSQL SQL expression
    spark: str    # Spark SQL expression


@dataclass(frozen=True)
class NotCompared:
    """A column verify cannot compare, and why."""

    name: str
    why: str

    def text(self) -> str:
        return f"{self.name} ({self.why})"


def encode_column(name: str, column_type: ColumnType, spark_type: str,
                  form: SourceFormat = SourceFormat()) -> ColumnEncoding | NotCompared:
    """The encoding of a column of PostgreSQL type ``column_type`` held in silver as ``spark_type`` (Spark's
    simple string, e.g. ``decimal(10,2)``) from a source sending ``form``; :class:`NotCompared` when no
    encoding compares the pair."""
    got = value_text(column_type, pg_ident(name), spark_ident(name), spark_type.lower(), form)
    if isinstance(got, str):
        return NotCompared(name, got)
    return ColumnEncoding(name, column_type.kind, *got)


def pg_row_text(columns: list[ColumnEncoding]) -> str:
    """PostgreSQL SQL for a row's canonical text: each value's part (:func:`pg_value_item`) in column order."""
    if not columns:
        return "''"
    return "concat(" + ", ".join(pg_value_item(e.pg) for e in columns) + ")"


def spark_row_text(columns: list[ColumnEncoding]) -> str:
    """Spark SQL for a row's canonical text (the same characters as :func:`pg_row_text`)."""
    if not columns:
        return "''"
    return "concat(" + ", ".join(spark_value_item(e.spark) for e in columns) + ")"


def pg_row_hash(columns: list[ColumnEncoding]) -> str:
    """PostgreSQL SQL: the row's 64-bit hash as a signed BIGINT."""
    return f"('x' || left(md5({pg_row_text(columns)}), 16))::bit(64)::int8"


def spark_row_hash(columns: list[ColumnEncoding]) -> str:
    """Spark SQL: the row's 64-bit hash as a signed BIGINT (``conv`` to base -10 reads it signed)."""
    return f"CAST(conv(left(md5(CAST({spark_row_text(columns)} AS BINARY)), 16), 16, -10) AS BIGINT)"


def pg_key_text(column: str) -> str:
    """PostgreSQL SQL: a key column's text, as it names the key in results and in exclusions."""
    return f"{pg_ident(column)}::text"


def spark_key_text(column: str) -> str:
    return f"CAST({spark_ident(column)} AS STRING)"


def range_kind(column_type: ColumnType) -> RangeKind | None:
    """How a key column is cut into ranges (``int``, ``uuid``, ``text``), or None when it cannot be."""
    if column_type.kind == "text" and column_type.pg_name.split("(")[0] in ("text", "varchar"):
        return "text"
    return RANGE_KINDS.get(column_type.kind) if column_type.kind != "text" else None


def pg_range_predicate(column: str, kind: RangeKind | None, low, high) -> tuple[str, list]:
    """PostgreSQL SQL for ``low <= column < high`` (``None``: open) in the order Spark uses, and its parameters.
    Text compares under COLLATE "C" (bytes of UTF-8, as Spark compares strings); a uuid as a uuid (the
    same order as its lower-case text)."""
    c = pg_ident(column) + (' COLLATE "C"' if kind == "text" else "")
    cast = "::uuid" if kind == "uuid" else ""
    parts, params = [], []
    if low is not None:
        parts.append(f"{c} >= %s{cast}")
        params.append(low)
    if high is not None:
        parts.append(f"{c} < %s{cast}")
        params.append(high)
    return (" AND ".join(parts) or "TRUE"), params


def spark_value(kind: RangeKind, value) -> str:
    return str(int(value)) if kind == "int" else spark_literal(str(value))


def spark_range_index(column: str, kind: RangeKind, bounds: list) -> str:
    """Spark SQL: the index of the range a row's key falls in, ranges cut at ``bounds`` (sorted): index i
    holds ``bounds[i-1] <= key < bounds[i]``. A balanced CASE tree: log2(ranges) comparisons a row."""
    s = spark_ident(column)

    def tree(lo: int, hi: int) -> str:   # the ranges lo..hi (inclusive), split by bounds[lo..hi-1]
        if lo == hi:
            return str(lo)
        mid = (lo + hi) // 2
        return f"CASE WHEN {s} < {spark_value(kind, bounds[mid])} THEN {tree(lo, mid)} ELSE {tree(mid + 1, hi)} END"

    return tree(0, len(bounds))


def sort_key(kind: RangeKind):
    """How Python orders a range column's values the way both sides do (ints as numbers, text by code
    point — UTF-8 byte order —, uuids by their lower-case text)."""
    return int if kind == "int" else (lambda v: str(v).lower() if kind == "uuid" else str(v))


def cut_bounds(kind: RangeKind, sample: list, parts: int) -> list:
    """``parts - 1`` distinct cut points at the quantiles of a sample of a range column's values."""
    values = sorted({(int(v) if kind == "int" else str(v).lower() if kind == "uuid" else str(v)) for v in sample
                     if v is not None}, key=sort_key(kind))
    if parts <= 1 or not values:
        return []
    cuts = [values[len(values) * i // parts] for i in range(1, parts)]
    out: list = []
    for cut in cuts:
        if not out or sort_key(kind)(cut) > sort_key(kind)(out[-1]):
            out.append(cut)
    return out


def range_bounds(bounds: list, index: int) -> tuple:
    """``(low, high)`` of range ``index`` (``None``: open end)."""
    return (bounds[index - 1] if index > 0 else None, bounds[index] if index < len(bounds) else None)
