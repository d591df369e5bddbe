"""The type map: OID + typmod (+ Type messages) -> Arrow and Spark types."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdc_apply.errors import ConfigError
from cdc_apply.pgoutput.types import (
    ARRAY_ELEMENT,
    INTERVAL_ARROW,
    ColumnType,
    TypeOptions,
    numeric_typmod,
    resolve_column_type,
)


def numeric_typmod_of(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


@pytest.mark.parametrize("oid, arrow_type, spark", [
    (16, pa.bool_(), "BOOLEAN"), (21, pa.int16(), "SMALLINT"), (23, pa.int32(), "INT"), (20, pa.int64(), "BIGINT"),
    (26, pa.int64(), "BIGINT"), (700, pa.float32(), "FLOAT"), (701, pa.float64(), "DOUBLE"),
    (25, pa.string(), "STRING"), (1043, pa.string(), "STRING"), (1042, pa.string(), "STRING"),
    (19, pa.string(), "STRING"), (18, pa.string(), "STRING"), (17, pa.binary(), "BINARY"),
    (1082, pa.date32(), "DATE"), (1083, pa.string(), "STRING"), (1266, pa.string(), "STRING"),
    (1114, pa.timestamp("us"), "TIMESTAMP_NTZ"), (1184, pa.timestamp("us", "UTC"), "TIMESTAMP"),
    (1186, INTERVAL_ARROW, "STRUCT<months: INT, days: INT, microseconds: BIGINT>"),
    (2950, pa.string(), "STRING"), (114, pa.string(), "STRING"), (3802, pa.string(), "STRING"),
    (142, pa.string(), "STRING"), (869, pa.string(), "STRING"), (650, pa.string(), "STRING"),
    (829, pa.string(), "STRING"), (774, pa.string(), "STRING"), (790, pa.decimal128(19, 2), "DECIMAL(19,2)"),
    (1560, pa.string(), "STRING"), (1562, pa.string(), "STRING"), (1700, pa.string(), "STRING"),
    (5069, pa.decimal128(20, 0), "DECIMAL(20,0)"), (3220, pa.string(), "STRING"), (600, pa.string(), "STRING"),
])
def test_built_in_types_map_to_the_documented_arrow_and_spark_types(oid, arrow_type, spark):
    column = resolve_column_type(oid, -1)
    assert (column.type_oid, column.arrow_type, column.spark_ddl) == (oid, arrow_type, spark)


def test_numeric_with_precision_up_to_38_is_a_decimal_of_that_shape():
    column = resolve_column_type(1700, numeric_typmod_of(10, 2))
    assert (column.pg_name, column.arrow_type, column.spark_ddl) == ("numeric(10,2)", pa.decimal128(10, 2),
                                                                     "DECIMAL(10,2)")
    assert resolve_column_type(1700, numeric_typmod_of(38, 0)).arrow_type == pa.decimal128(38, 0)


def test_unconstrained_or_wider_than_38_numeric_is_canonical_text():
    assert resolve_column_type(1700, -1).arrow_type == pa.string()
    wide = resolve_column_type(1700, numeric_typmod_of(39, 2))
    assert (wide.pg_name, wide.arrow_type, wide.spark_ddl) == ("numeric(39,2)", pa.string(), "STRING")


def test_the_string_numeric_option_makes_every_numeric_text():
    column = resolve_column_type(1700, numeric_typmod_of(10, 2), options=TypeOptions(numeric="string"))
    assert column.arrow_type == pa.string()


def test_an_unknown_numeric_option_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match="numeric"):
        TypeOptions(numeric="float")


def test_negative_and_oversized_numeric_scales_widen_to_a_decimal_spark_accepts():
    assert numeric_typmod(numeric_typmod_of(3, -2)) == (3, -2)
    assert resolve_column_type(1700, numeric_typmod_of(3, -2)).arrow_type == pa.decimal128(5, 0)
    assert resolve_column_type(1700, numeric_typmod_of(2, 5)).arrow_type == pa.decimal128(5, 5)
    assert resolve_column_type(1700, numeric_typmod_of(3, -2)).pg_name == "numeric(3,-2)"


def test_type_modifiers_show_in_postgresql_names():
    assert resolve_column_type(1043, 24).pg_name == "varchar(20)"
    assert resolve_column_type(1042, 9).pg_name == "bpchar(5)"
    assert resolve_column_type(1114, 3).pg_name == "timestamp(3)"
    assert resolve_column_type(1560, 8).pg_name == "bit(8)"


def test_arrays_are_lists_of_their_element_type_with_the_columns_typmod():
    column = resolve_column_type(1231, numeric_typmod_of(10, 2))
    assert column.pg_name == "numeric(10,2)[]"
    assert column.arrow_type == pa.list_(pa.decimal128(10, 2))
    assert column.spark_ddl == "ARRAY<DECIMAL(10,2)>"
    assert resolve_column_type(1009, -1).spark_ddl == "ARRAY<STRING>"
    assert resolve_column_type(1187, -1).spark_ddl == "ARRAY<STRUCT<months: INT, days: INT, microseconds: BIGINT>>"


def test_every_built_in_array_resolves_to_a_list_of_its_element():
    for array_oid, element_oid in ARRAY_ELEMENT.items():
        column = resolve_column_type(array_oid, -1)
        assert column.arrow_type == pa.list_(resolve_column_type(element_oid, -1).arrow_type)


def test_a_domain_resolves_to_the_base_type_its_type_message_names():
    # proto.c logicalrep_write_typ sends getBaseType's namespace ("" for pg_catalog) and name
    column = resolve_column_type(16391, -1, {16391: ("", "int4")})
    assert (column.type_oid, column.pg_name, column.arrow_type) == (16391, "int4", pa.int32())
    assert resolve_column_type(16400, -1, {16400: ("", "_int4")}).arrow_type == pa.list_(pa.int32())
    assert resolve_column_type(16401, -1, {16401: ("pg_catalog", "timestamptz")}).spark_ddl == "TIMESTAMP"


def test_a_domain_over_a_constrained_numeric_is_text_because_its_typmod_is_not_sent():
    assert resolve_column_type(16389, -1, {16389: ("", "numeric")}).arrow_type == pa.string()


def test_enums_composites_and_extension_types_are_strings():
    for entry in (("public", "mood"), ("public", "pair"), ("public", "citext"), ("", "no_such_builtin")):
        column = resolve_column_type(16500, -1, {16500: entry})
        assert (column.arrow_type, column.spark_ddl, column.kind) == (pa.string(), "STRING", "user")
    assert resolve_column_type(16500, -1, {16500: ("public", "mood")}).pg_name == "public.mood"


def test_arrays_of_user_types_are_lists_of_strings():
    column = resolve_column_type(16501, -1, {16501: ("public", "_mood")})
    assert (column.pg_name, column.arrow_type) == ("public.mood[]", pa.list_(pa.string()))


def test_an_oid_no_type_message_named_is_a_string_not_an_error():
    column = resolve_column_type(99999, -1)
    assert (column.arrow_type, column.kind, column.pg_name) == (pa.string(), "user", "unknown(99999)")
    assert resolve_column_type(99999, -1, {}).arrow_type == pa.string()


def test_column_types_are_frozen_and_hashable():
    column = resolve_column_type(23, -1)
    with pytest.raises(AttributeError):
        column.pg_name = "x"  # type: ignore[misc]
    assert hash(column) == hash(resolve_column_type(23, -1))
    assert isinstance(column, ColumnType)
