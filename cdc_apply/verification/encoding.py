"""One canonical text per row, written once as PostgreSQL SQL and once as Spark SQL, so both sides hash alike.

A row's text is the concatenation, in column order, of ``N`` for a NULL and ``V<length>:<value>`` otherwise
(the length prefix makes the concatenation unambiguous); its hash is the first 64 bits of the MD5 of that
text as a signed BIGINT, and a range's hash is the exact sum of its rows' hashes (a multiset hash:
independent of row order, and a duplicate counts twice). Each column's value text is chosen so the two
sides render the same value identically:

===========================  ===============================  ====================================
PostgreSQL type (kind)        PostgreSQL                       Spark (silver type)
===========================  ===============================  ====================================
bool                          ``t`` / ``f``                    ``t`` / ``f`` (BOOLEAN)
int2, int4, int8, oid, xid    ``c::text``                      ``CAST(c AS STRING)`` (any integer)
text, varchar, bpchar, name,  ``c::text`` (the output          ``c`` (STRING: silver holds the output
uuid, json, jsonb, numeric    function's text)                 function's text)
 mapped to STRING
numeric mapped to DECIMAL     ``trim_scale(c)::text``          the decimal's text, trailing zeros cut
date                          days since 1970-01-01            ``unix_date(c)`` (DATE)
timestamp / timestamptz       microseconds since 1970-01-01    ``unix_micros`` (TIMESTAMP_NTZ/TIMESTAMP)
bytea                         ``encode(c, 'hex')``             ``lower(hex(c))`` (BINARY)
===========================  ===============================  ====================================

Infinite dates and timestamps are silver's int32/int64 extremes on both sides. Other types (floats,
intervals, times, arrays, network and geometric types, enums) are *unhashed*: named in the result, not
compared (:data:`HASHED`). Pure: no Spark, no PostgreSQL connection.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_apply.delta.names import pg_ident
from cdc_apply.delta.names import quote_ident as spark_ident
from cdc_apply.delta.names import quote_literal as spark_literal
from cdc_apply.pgoutput.types import ColumnType

INT32_MAX, INT32_MIN = 2 ** 31 - 1, -(2 ** 31)
INT64_MAX, INT64_MIN = 2 ** 63 - 1, -(2 ** 63)

_INTEGER_KINDS = {"int2", "int4", "int8", "uint4"}
_TEXT_KINDS = {"text", "uuid", "json", "jsonb", "numeric_text"}
_SPARK_INTEGERS = {"tinyint", "smallint", "int", "bigint"}
# Every kind some encoding covers (the rest are unhashed).
HASHED = sorted(_INTEGER_KINDS | _TEXT_KINDS | {"bool", "numeric", "date", "timestamp", "timestamptz", "bytea"})
# Key columns a range can be cut on: they order the same in PostgreSQL (text under COLLATE "C") and in Spark.
RANGE_KINDS = {"int2": "int", "int4": "int", "int8": "int", "uuid": "uuid", "text": "text"}



@dataclass(frozen=True)
class ColumnEncoding:
    """One column's value text on both sides (``None``-valued exactly when the column is NULL)."""

    name: str
    kind: str
    pg: str       # PostgreSQL SQL expression
    spark: str    # Spark SQL expression


def encode_column(name: str, column_type: ColumnType, spark_type: str) -> ColumnEncoding | None:
    """The encoding of a column of PostgreSQL type ``column_type`` held in silver as ``spark_type``
    (Spark's simple string, e.g. ``decimal(10,2)``), or None when the pair is not hashed."""
    kind, c, s = column_type.kind, pg_ident(name), spark_ident(name)
    spark_type = spark_type.lower()
    if kind == "bool" and spark_type == "boolean":
        pg, sp = f"CASE WHEN {c} THEN 't' ELSE 'f' END", f"CASE WHEN {s} THEN 't' ELSE 'f' END"
        return ColumnEncoding(name, kind, f"CASE WHEN {c} IS NULL THEN NULL ELSE {pg} END",
                              f"CASE WHEN {s} IS NULL THEN NULL ELSE {sp} END")
    if kind in _INTEGER_KINDS and spark_type in _SPARK_INTEGERS:
        return ColumnEncoding(name, kind, f"{c}::text", f"CAST({s} AS STRING)")
    if kind in _TEXT_KINDS and spark_type == "string":
        # concat() renders by the type's output function: a cast of bpchar to text would cut its padding.
        return ColumnEncoding(name, kind, f"CASE WHEN {c} IS NULL THEN NULL ELSE concat({c}) END", s)
    if kind == "numeric" and spark_type.startswith("decimal"):
        # trim_scale: PostgreSQL prints a numeric with its own scale, Spark a decimal with the column's.
        # Trailing zeros, then a bare point, cut only from a text with a point (two rtrims: a third of the
        # regular expressions' cost).
        text = f"CAST({s} AS STRING)"
        trimmed = f"CASE WHEN instr({text}, '.') > 0 THEN rtrim('.', rtrim('0', {text})) ELSE {text} END"
        return ColumnEncoding(name, kind, f"trim_scale({c})::text", trimmed)
    if kind == "date" and spark_type == "date":
        pg = (f"CASE WHEN {c} = 'infinity'::date THEN '{INT32_MAX}' WHEN {c} = '-infinity'::date THEN '{INT32_MIN}' "
              f"ELSE ({c} - DATE '1970-01-01')::text END")
        return ColumnEncoding(name, kind, pg, f"CAST(unix_date({s}) AS STRING)")
    if (kind, spark_type) in (("timestamp", "timestamp_ntz"), ("timestamptz", "timestamp")):
        cast = "timestamp" if kind == "timestamp" else "timestamptz"
        pg = (f"CASE WHEN {c} = 'infinity'::{cast} THEN '{INT64_MAX}' WHEN {c} = '-infinity'::{cast} "
              f"THEN '{INT64_MIN}' ELSE (extract(epoch FROM {c}) * 1000000)::int8::text END")
        # A TIMESTAMP_NTZ has no zone: its microseconds are counted from the zone-less epoch, whatever
        # the session's time zone (unix_micros of a cast would shift it by that zone).
        sp = (f"CAST(unix_micros({s}) AS STRING)" if kind == "timestamptz" else
              f"CAST(timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {s}) AS STRING)")
        return ColumnEncoding(name, kind, pg, sp)
    if kind == "bytea" and spark_type == "binary":
        return ColumnEncoding(name, kind, f"encode({c}, 'hex')", f"lower(hex({s}))")
    return None


def pg_row_text(columns: list[ColumnEncoding]) -> str:
    """PostgreSQL SQL for a row's canonical text."""
    if not columns:
        return "''"
    return "concat(" + ", ".join(
        f"CASE WHEN ({e.pg}) IS NULL THEN 'N' ELSE 'V' || length({e.pg})::text || ':' || ({e.pg}) END"
        for e in columns) + ")"


def spark_row_text(columns: list[ColumnEncoding]) -> str:
    """Spark SQL for a row's canonical text (the same characters as :func:`pg_row_text`)."""
    if not columns:
        return "''"
    return "concat(" + ", ".join(
        f"CASE WHEN ({e.spark}) IS NULL THEN 'N' "
        f"ELSE concat('V', CAST(length({e.spark}) AS STRING), ':', {e.spark}) END"
        for e in columns) + ")"


def pg_row_hash(columns: list[ColumnEncoding]) -> str:
    """PostgreSQL SQL: the row's 64-bit hash as a signed BIGINT."""
    return f"('x' || left(md5({pg_row_text(columns)}), 16))::bit(64)::int8"


def spark_row_hash(columns: list[ColumnEncoding]) -> str:
    """Spark SQL: the row's 64-bit hash as a signed BIGINT (``conv`` to base -10 reads it signed)."""
    return f"CAST(conv(left(md5(CAST({spark_row_text(columns)} AS BINARY)), 16), 16, -10) AS BIGINT)"


def pg_key_text(column: str, kind: str) -> str:
    """PostgreSQL SQL: a key column's text, as it names the key in results and in exclusions."""
    return f"{pg_ident(column)}::text"


def spark_key_text(column: str) -> str:
    return f"CAST({spark_ident(column)} AS STRING)"


def range_kind(column_type: ColumnType) -> str | None:
    """How a key column is cut into ranges (``int``, ``uuid``, ``text``), or None when it cannot be."""
    if column_type.kind == "text" and column_type.pg_name.split("(")[0] in ("text", "varchar"):
        return "text"
    return RANGE_KINDS.get(column_type.kind) if column_type.kind != "text" else None


def pg_range_predicate(column: str, kind: str | None, low, high) -> tuple[str, list]:
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


def spark_value(kind: str, value) -> str:
    return str(int(value)) if kind == "int" else spark_literal(str(value))


def spark_range_index(column: str, kind: str, bounds: list) -> str:
    """Spark SQL: the index of the range a row's key falls in, ranges cut at ``bounds`` (sorted): index i
    holds ``bounds[i-1] <= key < bounds[i]``. A balanced CASE tree: log2(ranges) comparisons a row."""
    s = spark_ident(column)

    def tree(lo: int, hi: int) -> str:   # the ranges lo..hi (inclusive), split by bounds[lo..hi-1]
        if lo == hi:
            return str(lo)
        mid = (lo + hi) // 2
        return f"CASE WHEN {s} < {spark_value(kind, bounds[mid])} THEN {tree(lo, mid)} ELSE {tree(mid + 1, hi)} END"

    return tree(0, len(bounds))


def sort_key(kind: str):
    """How Python orders a range column's values the way both sides do (ints as numbers, text by code
    point — UTF-8 byte order —, uuids by their lower-case text)."""
    return int if kind == "int" else (lambda v: str(v).lower() if kind == "uuid" else str(v))


def cut_bounds(kind: str, sample: list, parts: int) -> list:
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
