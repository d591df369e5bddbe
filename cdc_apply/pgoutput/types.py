"""The type map: a column's PostgreSQL type (OID + typmod) -> an Arrow type and a Spark SQL type.

The Relation message carries each column's type OID and typmod; Type ('Y') messages name
the non-built-in ones. Built-in OIDs are stable across PostgreSQL versions (they are fixed
in pg_type.dat), so the table below is hard-coded and nothing is asked of the server.
docs/TYPES.md documents the map and every policy decided here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Mapping

import pyarrow as pa

from cdc_apply.errors import ConfigError

INTERVAL_ARROW = pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())])
INTERVAL_SPARK = "STRUCT<months: INT, days: INT, microseconds: BIGINT>"
# Decimal128 holds 38 digits; wider numerics become text (lossless).
MAX_DECIMAL_PRECISION = 38
# PostgreSQL's VARHDRSZ: character and numeric typmods are offset by it.
_VARHDRSZ = 4


@dataclass(frozen=True, slots=True)
class ColumnType:
    """How one column is typed: the PostgreSQL type and the Arrow / Spark type its values become.

    ``kind`` names the converter (one per wire format family, e.g. ``"int4"``, ``"timestamptz"``,
    ``"array"``); ``element`` is the element type of an array; ``precision``/``scale`` are the
    decimal shape of a ``numeric`` column converted to decimal; ``dimensions`` is an array column's
    number of dimensions (its Arrow/Spark type nests that many lists: :func:`with_dimensions`).
    These are internal to :mod:`cdc_apply.pgoutput`; the public contract is the first five fields.
    """

    type_oid: int
    type_modifier: int
    pg_name: str
    arrow_type: pa.DataType
    spark_ddl: str
    kind: str = "text"
    element: "ColumnType | None" = None
    precision: int = 0
    scale: int = 0
    delimiter: str = ","
    dimensions: int = 1

    @property
    def element_type(self) -> "ColumnType":
        """An array's element type (every ``"array"`` column type is built with one)."""
        assert self.element is not None, f"{self.pg_name} is not an array type"
        return self.element


# PostgreSQL's MAXDIM: an array has at most 6 dimensions.
MAX_ARRAY_DIMENSIONS = 6


@dataclass(frozen=True, slots=True)
class TypeOptions:
    """Configurable policies of the type map.

    ``numeric``: ``"decimal"`` maps ``numeric(p,s)`` with p <= 38 to ``DECIMAL`` (a NaN value is
    then an error); ``"string"`` maps every ``numeric`` to PostgreSQL's canonical text (lossless).
    ``array_dimensions``: ``(qualified table, column, dimensions)`` of the array columns that are not
    one-dimensional (``[tables."ns.t"] array_dimensions``): a Relation message says only the array
    type, never the dimensions, and PostgreSQL does not enforce declared ones.
    """

    numeric: str = "decimal"
    array_dimensions: tuple[tuple[str, str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.numeric not in ("decimal", "string"):
            raise ConfigError(f"numeric must be 'decimal' or 'string', not {self.numeric!r}", key="numeric")
        for table, column, dimensions in self.array_dimensions:
            if not 1 <= dimensions <= MAX_ARRAY_DIMENSIONS:
                raise ConfigError(f"column {column!r}: dimensions must be 1 to {MAX_ARRAY_DIMENSIONS}, "
                                  f"not {dimensions}", key=f"tables.{table}.array_dimensions")

    def dimensions_of(self, table: str, column: str) -> int:
        """The configured dimensions of column ``column`` of ``table`` (qualified name): 1 unless set."""
        return next((d for t, c, d in self.array_dimensions if t == table and c == column), 1)


# kind -> (arrow type, spark type); numeric, array and money are shaped per column.
_KIND_TYPES: dict[str, tuple[pa.DataType, str]] = {
    "bool": (pa.bool_(), "BOOLEAN"),
    "int2": (pa.int16(), "SMALLINT"),
    "int4": (pa.int32(), "INT"),
    "int8": (pa.int64(), "BIGINT"),
    "uint4": (pa.int64(), "BIGINT"),
    "xid8": (pa.decimal128(20, 0), "DECIMAL(20,0)"),
    "float4": (pa.float32(), "FLOAT"),
    "float8": (pa.float64(), "DOUBLE"),
    "money": (pa.decimal128(19, 2), "DECIMAL(19,2)"),
    "bytea": (pa.binary(), "BINARY"),
    "date": (pa.date32(), "DATE"),
    "timestamp": (pa.timestamp("us"), "TIMESTAMP_NTZ"),
    "timestamptz": (pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    "interval": (INTERVAL_ARROW, INTERVAL_SPARK),
}
_STRING = (pa.string(), "STRING")

# Built-in base types: oid -> (typname, kind). Kinds not in _KIND_TYPES are strings.
# "opaque" = a built-in type with no dedicated converter: its text form is kept as is
# and its binary send form is stored as '\x' + hex.
_BASE: dict[int, tuple[str, str]] = {
    16: ("bool", "bool"), 17: ("bytea", "bytea"), 18: ("char", "char"), 19: ("name", "text"),
    20: ("int8", "int8"), 21: ("int2", "int2"), 22: ("int2vector", "opaque"), 23: ("int4", "int4"),
    24: ("regproc", "opaque"), 25: ("text", "text"), 26: ("oid", "uint4"), 27: ("tid", "tid"),
    28: ("xid", "uint4"), 29: ("cid", "uint4"), 30: ("oidvector", "opaque"), 114: ("json", "json"),
    142: ("xml", "json"), 194: ("pg_node_tree", "opaque"), 600: ("point", "opaque"),
    601: ("lseg", "opaque"), 602: ("path", "opaque"), 603: ("box", "opaque"), 604: ("polygon", "opaque"),
    628: ("line", "opaque"), 650: ("cidr", "cidr"), 700: ("float4", "float4"), 701: ("float8", "float8"),
    718: ("circle", "opaque"), 774: ("macaddr8", "macaddr8"), 790: ("money", "money"),
    829: ("macaddr", "macaddr"), 869: ("inet", "inet"), 1033: ("aclitem", "opaque"),
    1042: ("bpchar", "text"), 1043: ("varchar", "text"), 1082: ("date", "date"), 1083: ("time", "time"),
    1114: ("timestamp", "timestamp"), 1184: ("timestamptz", "timestamptz"), 1186: ("interval", "interval"),
    1266: ("timetz", "timetz"), 1560: ("bit", "bit"), 1562: ("varbit", "bit"), 1700: ("numeric", "numeric"),
    1790: ("refcursor", "text"), 2202: ("regprocedure", "opaque"), 2203: ("regoper", "opaque"),
    2204: ("regoperator", "opaque"), 2205: ("regclass", "opaque"), 2206: ("regtype", "opaque"),
    2249: ("record", "opaque"), 2950: ("uuid", "uuid"), 2970: ("txid_snapshot", "opaque"),
    3220: ("pg_lsn", "pg_lsn"), 3614: ("tsvector", "opaque"), 3615: ("tsquery", "opaque"),
    3734: ("regconfig", "opaque"), 3769: ("regdictionary", "opaque"), 3802: ("jsonb", "jsonb"),
    3904: ("int4range", "opaque"), 3906: ("numrange", "opaque"), 3908: ("tsrange", "opaque"),
    3910: ("tstzrange", "opaque"), 3912: ("daterange", "opaque"), 3926: ("int8range", "opaque"),
    4072: ("jsonpath", "jsonb"), 4089: ("regnamespace", "opaque"), 4096: ("regrole", "opaque"),
    4191: ("regcollation", "opaque"), 4451: ("int4multirange", "opaque"),
    4532: ("nummultirange", "opaque"), 4533: ("tsmultirange", "opaque"),
    4534: ("tstzmultirange", "opaque"), 4535: ("datemultirange", "opaque"),
    4536: ("int8multirange", "opaque"), 5038: ("pg_snapshot", "opaque"), 5069: ("xid8", "xid8"),
}

# Built-in array types: array oid -> element oid (pg_type.typarray / typelem).
ARRAY_ELEMENT: dict[int, int] = {
    143: 142, 199: 114, 271: 5069, 629: 628, 651: 650, 719: 718, 775: 774, 791: 790, 1000: 16,
    1001: 17, 1002: 18, 1003: 19, 1005: 21, 1006: 22, 1007: 23, 1008: 24, 1009: 25, 1010: 27,
    1011: 28, 1012: 29, 1013: 30, 1014: 1042, 1015: 1043, 1016: 20, 1017: 600, 1018: 601, 1019: 602,
    1020: 603, 1021: 700, 1022: 701, 1027: 604, 1028: 26, 1034: 1033, 1040: 829, 1041: 869,
    1115: 1114, 1182: 1082, 1183: 1083, 1185: 1184, 1187: 1186, 1231: 1700, 1270: 1266, 1561: 1560,
    1563: 1562, 2201: 1790, 2207: 2202, 2208: 2203, 2209: 2204, 2210: 2205, 2211: 2206, 2287: 2249,
    2949: 2970, 2951: 2950, 3221: 3220, 3643: 3614, 3645: 3615, 3735: 3734, 3770: 3769, 3807: 3802,
    3905: 3904, 3907: 3906, 3909: 3908, 3911: 3910, 3913: 3912, 3927: 3926, 4073: 4072, 4090: 4089,
    4097: 4096, 4192: 4191, 5039: 5038, 6150: 4451, 6151: 4532, 6152: 4533, 6153: 4534, 6155: 4535,
    6157: 4536,
}

# Type messages name a domain's base type, so built-ins are also found by name.
BUILTIN_BY_NAME: dict[str, int] = {name: oid for oid, (name, _) in _BASE.items()}
BUILTIN_BY_NAME.update({"_" + _BASE[elem][0]: arr for arr, elem in ARRAY_ELEMENT.items()})

_CATALOG_NAMESPACES = ("", "pg_catalog")


def resolve_column_type(type_oid: int, type_modifier: int,
                        user_types: Mapping[int, tuple[str, str]] | None = None,
                        options: TypeOptions = TypeOptions()) -> ColumnType:
    """The :class:`ColumnType` of a Relation column (``atttypid``, ``atttypmod``).

    ``user_types`` maps non-built-in OIDs to ``(namespace, name)`` from Type messages. For a
    domain PostgreSQL sends the base type's namespace and name (``""`` for pg_catalog), so a
    domain over a built-in resolves to that built-in (its typmod is not sent: the column's
    typmod is -1). Enums, composites and extension types become strings, as does an OID no
    Type message named. Never raises for an unknown type.
    """
    if type_oid in _BASE or type_oid in ARRAY_ELEMENT:
        return _builtin(type_oid, type_modifier, options)
    entry = user_types.get(type_oid) if user_types else None
    return _user(type_oid, type_modifier, tuple(entry) if entry else None, options)


@lru_cache(maxsize=4096)
def _user(type_oid: int, type_modifier: int, entry: tuple[str, str] | None,
          options: TypeOptions) -> ColumnType:
    if entry is None:
        return ColumnType(type_oid, type_modifier, f"unknown({type_oid})", *_STRING, kind="user")
    namespace, name = entry
    if namespace in _CATALOG_NAMESPACES and name in BUILTIN_BY_NAME:
        return replace(_builtin(BUILTIN_BY_NAME[name], type_modifier, options), type_oid=type_oid)
    qualified = f"{namespace}.{name}" if namespace else name
    if name.startswith("_") and len(name) > 1:
        # PostgreSQL names an array type '_' + its element's name. Its elements are user
        # values too (enum labels, composites): strings.
        element = ColumnType(0, type_modifier, qualified[: -len(name)] + name[1:], *_STRING, kind="user")
        return _array_of(element, type_oid, type_modifier, element.pg_name + "[]")
    return ColumnType(type_oid, type_modifier, qualified, *_STRING, kind="user")


@lru_cache(maxsize=4096)
def _builtin(type_oid: int, type_modifier: int, options: TypeOptions) -> ColumnType:
    element_oid = ARRAY_ELEMENT.get(type_oid)
    if element_oid is not None:
        # An array column's typmod is its element's (numeric(10,2)[] carries (10,2)).
        element = _builtin(element_oid, type_modifier, options)
        column = _array_of(element, type_oid, type_modifier, element.pg_name + "[]")
        if element_oid == 603:  # box arrays separate elements with ';' (pg_type.typdelim)
            column = replace(column, delimiter=";")
        return column
    name, kind = _BASE[type_oid]
    if kind == "numeric":
        return _numeric(type_oid, type_modifier, options)
    pg_name = name + _modifier_suffix(name, type_modifier)
    arrow_type, spark = _KIND_TYPES.get(kind, _STRING)
    return ColumnType(type_oid, type_modifier, pg_name, arrow_type, spark, kind=kind)


def resolve_relation_column(type_oid: int, type_modifier: int, user_types: Mapping[int, tuple[str, str]] | None,
                            options: TypeOptions, table: str, column: str) -> ColumnType:
    """The :class:`ColumnType` of column ``column`` of relation ``table`` (its qualified name): the type
    :func:`resolve_column_type` gives, with the array dimensions ``options`` set for the column.

    A column given dimensions other than 1 that is not an array is a ConfigError naming the key.
    """
    column_type = resolve_column_type(type_oid, type_modifier, user_types, options)
    dimensions = options.dimensions_of(table, column) if options.array_dimensions else 1
    if dimensions == 1:
        return column_type
    if column_type.kind != "array":
        raise ConfigError(f"column {column!r} of {table} is {column_type.pg_name}, not an array: it has no "
                          f"dimensions to set", key=f"tables.{table}.array_dimensions")
    return with_dimensions(column_type, dimensions)


def with_dimensions(column_type: ColumnType, dimensions: int) -> ColumnType:
    """An array column type whose values have ``dimensions`` dimensions: its Arrow and Spark types nest
    that many lists of the element type (``int4[]`` of 2 dimensions: ``list<list<int32>>``,
    ``ARRAY<ARRAY<INT>>``)."""
    element = column_type.element_type
    arrow_type, spark = element.arrow_type, element.spark_ddl
    for _ in range(dimensions):
        arrow_type, spark = pa.list_(arrow_type), f"ARRAY<{spark}>"
    return replace(column_type, arrow_type=arrow_type, spark_ddl=spark, dimensions=dimensions)


def _array_of(element: ColumnType, type_oid: int, type_modifier: int, pg_name: str) -> ColumnType:
    return ColumnType(type_oid, type_modifier, pg_name, pa.list_(element.arrow_type),
                      f"ARRAY<{element.spark_ddl}>", kind="array", element=element)


def numeric_typmod(type_modifier: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of a numeric typmod, or None when unconstrained.

    Since PostgreSQL 15 the scale may be negative or larger than the precision; it is an
    11-bit signed field (numeric.c NUMERIC_TYPMOD_SCALE).
    """
    if type_modifier < _VARHDRSZ:
        return None
    packed = type_modifier - _VARHDRSZ
    scale = ((packed & 0x7FF) ^ 1024) - 1024
    return (packed >> 16) & 0xFFFF, scale


def _numeric(type_oid: int, type_modifier: int, options: TypeOptions) -> ColumnType:
    shape = numeric_typmod(type_modifier)
    pg_name = f"numeric({shape[0]},{shape[1]})" if shape else "numeric"
    if shape is None or options.numeric == "string":
        return ColumnType(type_oid, type_modifier, pg_name, *_STRING, kind="numeric_text")
    declared_precision, declared_scale = shape
    # numeric(3,-2) holds up to 99900: 5 digits, none fractional. numeric(2,5) holds
    # 0.00099: 5 digits, all fractional. Spark allows neither shape, so widen to one it does.
    scale = max(declared_scale, 0)
    precision = max(declared_precision, declared_scale) + max(-declared_scale, 0)
    if precision > MAX_DECIMAL_PRECISION:
        return ColumnType(type_oid, type_modifier, pg_name, *_STRING, kind="numeric_text")
    return ColumnType(type_oid, type_modifier, pg_name, pa.decimal128(precision, scale),
                      f"DECIMAL({precision},{scale})", kind="numeric", precision=precision, scale=scale)


def _modifier_suffix(name: str, type_modifier: int) -> str:
    if type_modifier < 0:
        return ""
    if name in ("varchar", "bpchar") and type_modifier >= _VARHDRSZ:
        return f"({type_modifier - _VARHDRSZ})"
    if name in ("bit", "varbit", "time", "timetz", "timestamp", "timestamptz"):
        return f"({type_modifier})"
    return ""
