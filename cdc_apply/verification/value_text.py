"""One value's canonical text per PostgreSQL type, as PostgreSQL SQL and as Spark SQL over silver's type.

Each encoding is a pair of expressions, NULL exactly when the value is NULL, whose texts are equal exactly when
the values are (:mod:`cdc_apply.verification.encoding` builds a row's text from them). Where silver holds
PostgreSQL's output text (``text``, ``inet``, enums, geometric types...), the PostgreSQL side is that output
text, rendered in the verify session under the lander's own settings (``SESSION_SETTINGS``: DateStyle,
IntervalStyle, extra_float_digits, TimeZone, lc_monetary), and Spark's is silver's string itself. Where
silver holds a typed value, both sides render a text of their own:

==========================  ==============================================  ===========================
PostgreSQL type (kind)       PostgreSQL                                      Spark (silver type)
==========================  ==============================================  ===========================
float4, float8              Java's ``%a`` (exact hex: ``0x1.8p1``,           ``format_string('%a', c)``
                            ``-0x0.0p0``, ``NaN``, ``Infinity``) built        (FLOAT, DOUBLE)
                            from ``float8send``'s bits
interval                    ``months:days:microseconds`` from                 the struct's three fields
                            ``interval_send``
money                       cents, from ``cash_send``                        ``c * 100`` (DECIMAL(19,2))
xid8                        ``c::text``                                      the DECIMAL(20,0)'s text
time                        the output text, six fraction digits             the STRING
timetz                      the same, then the offset ``+HH:MM[:SS]``       the STRING
arrays (any dimensions)     ``<count>:`` then each element's ``N`` or        ``transform`` of each
                            ``V<length>:<text>`` by its own encoding; of      element (of each sub-array,
                            more dimensions, each sub-array's text in turn    nested), the same way
==========================  ==============================================  ===========================

A source streaming binary pgoutput (``source.binary``) holds a built-in type without a converter (geometric,
ranges, ``reg*``...) as ``\\x`` and the hex of its send form, which the PostgreSQL side renders through the
type's send function; a user type sent as text (an enum) as its label, any other as that hex. Pure: no Spark,
no PostgreSQL connection.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_apply.pgoutput.types import ColumnType

# Kinds whose silver STRING is the type's output text: concat() renders a value by its output function
# (a cast of bpchar to text would cut its padding; of "char" it would not print charout's escapes). A value is
# NULL when num_nulls() says so: a composite whose fields are all NULL "IS NULL", yet is the value '(,)'.
OUTPUT_TEXT_KINDS = {"text", "uuid", "json", "jsonb", "numeric_text", "char", "inet", "cidr", "macaddr", "macaddr8",
                     "bit", "pg_lsn", "tid"}
INTEGER_KINDS = {"int2", "int4", "int8", "uint4"}
SPARK_INTEGERS = {"tinyint", "smallint", "int", "bigint"}
INTERVAL_SPARK = "struct<months:int,days:int,microseconds:bigint>"
# Send functions whose bytes are the output text (the decoder keeps them as text): enum labels, citext.
TEXT_SEND = {"enum_send", "textsend", "citextsend", "varcharsend", "bpcharsend", "namesend"}
INT32_MAX, INT32_MIN = 2 ** 31 - 1, -(2 ** 31)
INT64_MAX, INT64_MIN = 2 ** 63 - 1, -(2 ** 63)
ELEMENT = "verify_e"   # Spark's lambda variable for an array element (PostgreSQL's is u.e)
SUB_ARRAY = "verify_a"  # ... and for a sub-array of an n-dimensional array, n appended (verify_a2: a 1-D one)


def pg_value_item(text: str) -> str:
    """PostgreSQL SQL: one value's part of a row's or an array's text — ``V<length>:<text>``, or ``N`` for NULL.
    ``||`` is strict, so a NULL makes the part NULL and ``coalesce`` turns it into ``N``: ``text`` is evaluated
    twice, not three times as a ``CASE`` testing it first would (15–18 % less of the source's hashing on a
    five-column table)."""
    return f"coalesce('V' || length({text})::text || ':' || ({text}), 'N')"


def spark_value_item(text: str) -> str:
    """Spark SQL: :func:`pg_value_item`'s characters (Spark's ``concat`` is NULL when a part is)."""
    return f"coalesce(concat('V', CAST(length({text}) AS STRING), ':', {text}), 'N')"


@dataclass(frozen=True)
class SourceFormat:
    """How the source sent a column's values: ``binary`` pgoutput or text, and the send function of the
    column's type (of an array's element type), qualified, for the types silver keeps as send bytes."""

    binary: bool = False
    send: str | None = None


def value_text(column_type: ColumnType, pg: str, spark: str, spark_type: str,
               form: SourceFormat = SourceFormat()) -> tuple[str, str] | str:
    """``(PostgreSQL SQL, Spark SQL)``: the canonical text of the value ``pg`` / ``spark`` (expressions) of a
    column of ``column_type`` held in silver as ``spark_type`` (Spark's simple string, lower case) — or, when
    no encoding compares it, why not."""
    kind = column_type.kind
    if kind == "array":
        return _array(column_type, pg, spark, spark_type, form)
    if kind == "bool" and spark_type == "boolean":
        return (f"CASE WHEN {pg} THEN 't' WHEN NOT {pg} THEN 'f' END",
                f"CASE WHEN {spark} THEN 't' WHEN NOT {spark} THEN 'f' END")
    if kind in INTEGER_KINDS and spark_type in SPARK_INTEGERS or kind == "xid8" and spark_type == "decimal(20,0)":
        return f"{pg}::text", f"CAST({spark} AS STRING)"
    if kind in OUTPUT_TEXT_KINDS and spark_type == "string":
        return f"CASE WHEN num_nulls({pg}) = 0 THEN concat({pg}) END", spark
    if kind in ("opaque", "user") and spark_type == "string":
        return _sent_as_text(column_type, pg, spark, form)
    if kind == "numeric" and spark_type.startswith("decimal"):
        # trim_scale: PostgreSQL prints a numeric with its own scale, Spark a decimal with the column's.
        # Trailing zeros, then a bare point, cut only from a text with a point (two rtrims: a third of the
        # regular expressions' cost).
        text = f"CAST({spark} AS STRING)"
        return (f"trim_scale({pg})::text",
                f"CASE WHEN instr({text}, '.') > 0 THEN rtrim('.', rtrim('0', {text})) ELSE {text} END")
    if kind in ("float4", "float8") and spark_type == ("float" if kind == "float4" else "double"):
        return _float(pg), f"CASE WHEN {spark} IS NULL THEN NULL ELSE format_string('%a', {spark}) END"
    if kind == "interval" and spark_type == INTERVAL_SPARK:
        return _interval(pg), (f"CASE WHEN {spark} IS NULL THEN NULL ELSE concat(CAST({spark}.months AS STRING), "
                               f"':', CAST({spark}.days AS STRING), ':', CAST({spark}.microseconds AS STRING)) END")
    if kind == "money" and spark_type == "decimal(19,2)":
        # cash_send's int64 cents: the lc_monetary the decoder read the text under does not matter.
        return _int8_of(f"cash_send({pg})", 1, 8), f"CAST(CAST({spark} * 100 AS BIGINT) AS STRING)"
    if kind == "time" and spark_type == "string":
        return _time(f"{pg}::text"), spark
    if kind == "timetz" and spark_type == "string":
        return f"CASE WHEN {pg} IS NULL THEN NULL ELSE {_time(f'{pg}::time::text')} || {_offset(pg)} END", spark
    if kind == "date" and spark_type == "date":
        return (f"CASE WHEN {pg} = 'infinity'::date THEN '{INT32_MAX}' WHEN {pg} = '-infinity'::date "
                f"THEN '{INT32_MIN}' ELSE ({pg} - DATE '1970-01-01')::text END",
                f"CAST(unix_date({spark}) AS STRING)")
    if (kind, spark_type) in (("timestamp", "timestamp_ntz"), ("timestamptz", "timestamp")):
        pg_text = (f"CASE WHEN {pg} = 'infinity'::{kind} THEN '{INT64_MAX}' WHEN {pg} = '-infinity'::{kind} "
                   f"THEN '{INT64_MIN}' ELSE (extract(epoch FROM {pg}) * 1000000)::int8::text END")
        # A TIMESTAMP_NTZ has no zone: its microseconds are counted from the zone-less epoch, whatever
        # the session's time zone (unix_micros of a cast would shift it by that zone).
        return pg_text, (f"CAST(unix_micros({spark}) AS STRING)" if kind == "timestamptz" else
                         f"CAST(timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {spark}) AS STRING)")
    if kind == "bytea" and spark_type == "binary":
        return f"encode({pg}, 'hex')", f"lower(hex({spark}))"
    return f"silver holds {spark_type}, not what {column_type.pg_name} maps to ({column_type.spark_ddl.lower()})"


def _sent_as_text(column_type: ColumnType, pg: str, spark: str, form: SourceFormat) -> tuple[str, str] | str:
    """A type the decoder has no converter for: its output text from a text stream; from a binary one,
    its send form (as ``\\x`` + hex, or the text itself when that is what the type sends)."""
    name = column_type.pg_name
    if not form.binary:
        if column_type.kind == "opaque" and name.startswith("reg"):
            return (f"{name} holds an object's OID, which silver keeps as the object's name when it was "
                    "decoded: a name that may have changed since")
        return f"CASE WHEN num_nulls({pg}) = 0 THEN concat({pg}) END", spark
    if form.send is None:
        return f"{name}: binary pgoutput holds its send form, and the source names no send function"
    if form.send.rsplit(".", 1)[-1] in TEXT_SEND:
        return f"CASE WHEN num_nulls({pg}) = 0 THEN concat({pg}) END", spark
    return f"'\\x' || encode({form.send}({pg}), 'hex')", spark


def _int8_of(data: str, start: int, width: int) -> str:
    """PostgreSQL SQL: the big-endian signed integer of ``width`` (4 or 8) bytes of bytea ``data`` at ``start``."""
    bits = 8 * width
    return f"('x' || encode(substring({data} FROM {start} FOR {width}), 'hex'))::bit({bits})::int{width}::text"


def _float(pg: str) -> str:
    """PostgreSQL SQL: Java's ``%a`` text (``Double.toHexString``) of a float4 or float8, from its IEEE bits:
    ``[-]0x1.<fraction>p<exponent>``, subnormals ``[-]0x0.<fraction>p-1022``, zeros ``[-]0x0.0p0``, the
    fraction's hex digits without trailing zeros (one at least). A float4 widens to float8 exactly, as
    Java's Formatter widens a Float. Every NaN is ``NaN``, as Java prints it."""
    b = f"float8send({pg}::float8)"
    exponent = f"((get_byte({b}, 0) & 127) * 16 + (get_byte({b}, 1) >> 4))"
    fraction = f"COALESCE(NULLIF(rtrim(substr(encode({b}, 'hex'), 4), '0'), ''), '0')"
    return (f"CASE WHEN {pg} IS NULL THEN NULL WHEN {pg} = 'NaN' THEN 'NaN' "
            f"WHEN {pg} = 'Infinity' THEN 'Infinity' WHEN {pg} = '-Infinity' THEN '-Infinity' "
            f"ELSE concat(CASE WHEN get_byte({b}, 0) >= 128 THEN '-' END, "
            f"CASE WHEN {exponent} = 0 THEN '0x0.' ELSE '0x1.' END, {fraction}, 'p', "
            f"CASE WHEN {exponent} <> 0 THEN ({exponent} - 1023)::text WHEN {pg} = 0 THEN '0' ELSE '-1022' END) END")


def _interval(pg: str) -> str:
    """PostgreSQL SQL: ``months:days:microseconds`` of an interval, from interval_send (int64 microseconds,
    int32 days, int32 months): the fields silver's struct holds, infinities included."""
    b = f"interval_send({pg})"
    return (f"CASE WHEN {pg} IS NULL THEN NULL ELSE concat({_int8_of(b, 13, 4)}, ':', {_int8_of(b, 9, 4)}, ':', "
            f"{_int8_of(b, 1, 8)}) END")


def _time(text: str) -> str:
    """PostgreSQL SQL: time_out's text with six fraction digits, as silver holds a time."""
    return f"rpad(CASE WHEN length({text}) = 8 THEN {text} || '.' ELSE {text} END, 15, '0')"


def _offset(pg: str) -> str:
    """PostgreSQL SQL: a timetz's offset as silver holds it: ``+HH:MM``, ``:SS`` added when not 0. (``mod()``,
    not ``%``: the source's queries pass parameters, where ``%`` starts a placeholder.)"""
    east = f"extract(timezone FROM {pg})::int"
    return (f"(CASE WHEN {east} < 0 THEN '-' ELSE '+' END || lpad((abs({east}) / 3600)::text, 2, '0') || ':' || "
            f"lpad(mod(abs({east}) / 60, 60)::text, 2, '0') || "
            f"CASE WHEN mod(abs({east}), 60) <> 0 THEN ':' || lpad(mod(abs({east}), 60)::text, 2, '0') ELSE '' END)")


def _array(column_type: ColumnType, pg: str, spark: str, spark_type: str, form: SourceFormat) -> tuple[str, str] | str:
    """An array of ``column_type.dimensions`` dimensions (silver: as many nested ARRAYs), written as the
    grammar ``array = <count> ':' item*``: an item of the innermost level is an element as a row's columns
    are written (``N``, or ``V<length>:<text>``), of an outer level its sub-array's own text (``N`` for a
    NULL one, which only silver can hold). Each text ends where its grammar says, so a sub-array needs no
    length prefix and equal texts are equal values: every element, NULL and sub-array length counts. Lower
    bounds other than 1 are not kept by silver, nor here: positions are compared, not subscripts."""
    element, dimensions = column_type.element_type, column_type.dimensions
    inner = spark_type
    for _ in range(dimensions):
        if not (inner.startswith("array<") and inner.endswith(">")):
            return f"silver holds {spark_type}, not an array of {dimensions} dimensions"
        inner = inner[len("array<"):-1]
    got = value_text(element, "u.e", ELEMENT, inner, form)
    if isinstance(got, str):
        return f"an array of {element.pg_name}: {got}"
    pe, se = got
    return _pg_array(pg, pe, dimensions), _spark_array(spark, se, dimensions)


def _pg_array(pg: str, element: str, dimensions: int) -> str:
    """PostgreSQL SQL: the array's text in one pass over its elements in storage order (row-major), each
    element preceded by the ``<count>:`` of every sub-array it starts: a multi-dimensional array has no
    per-sub-array unnest, but it is rectangular, so an element at (1-based) position ``o`` starts a sub-array
    of level ``k`` when ``o - 1`` is a multiple of the elements such a sub-array holds. An empty array has
    0 dimensions and fits any column; a value of other dimensions (PostgreSQL does not enforce a column's)
    is ``D<dimensions>``, which no silver value's text is."""
    starts = []
    for level in range(2, dimensions + 1):
        size = " * ".join(f"array_length({pg}, {k})" for k in range(level, dimensions + 1))
        starts.append(f"CASE WHEN mod(u.o - 1, {size}) = 0 THEN array_length({pg}, {level})::text || ':' END")
    item = pg_value_item(element)
    items = (f"(SELECT string_agg(concat({', '.join(starts + [item])}), '' ORDER BY u.o) "
             f"FROM unnest({pg}) WITH ORDINALITY AS u(e, o))")
    return (f"CASE WHEN {pg} IS NULL THEN NULL WHEN cardinality({pg}) = 0 THEN '0:' "
            f"WHEN array_ndims({pg}) <> {dimensions} THEN 'D' || array_ndims({pg})::text "
            f"ELSE concat(array_length({pg}, 1), ':', {items}) END")


def _spark_array(spark: str, element: str, dimensions: int) -> str:
    """Spark SQL: the array's text, a ``transform`` per level (its lambda variable named by its depth,
    ``verify_a<depth>``; the innermost level's is ``verify_e``, which ``element`` reads)."""
    if dimensions == 1:
        item = f"{ELEMENT} -> {spark_value_item(element)}"
    else:
        variable = f"{SUB_ARRAY}{dimensions}"
        item = f"{variable} -> coalesce({_spark_array(variable, element, dimensions - 1)}, 'N')"
    return (f"CASE WHEN {spark} IS NULL THEN NULL ELSE concat(CAST(size({spark}) AS STRING), ':', "
            f"array_join(transform({spark}, {item}), '')) END")
