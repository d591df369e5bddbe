"""The table properties ``silver.readers`` chooses, and the column names a table without column mapping takes."""

from __future__ import annotations

import pytest

from cdc_apply.config import parse_config
from cdc_apply.delta.ddl import check_plain_names, is_mapped, silver_properties
from cdc_apply.errors import SchemaError

MINIMAL = {"bronze": {"path": "b"}, "state": {"path": "st"}}


def _config(**silver):
    return parse_config({**MINIMAL, "silver": {"path": "s", **silver}})


def test_spark_readers_make_silver_with_column_mapping_type_widening_and_deletion_vectors():
    props = silver_properties(_config())
    assert (props["delta.columnMapping.mode"], props["delta.enableTypeWidening"],
            props["delta.enableDeletionVectors"]) == ("name", "true", "true")
    assert is_mapped(props)


def test_delta_rs_readers_make_silver_without_any_reader_feature_whatever_deletion_vectors_says():
    props = silver_properties(_config(readers="delta-rs", deletion_vectors=True))
    assert props == {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "false"}
    assert not is_mapped(props)


@pytest.mark.parametrize("name", ["unit price", "a,b", "a;b", "a{b}", "f(x)", "a\nb", "a\tb", "a=b"])
def test_a_name_delta_cannot_hold_without_column_mapping_is_a_schema_error_naming_column_table_and_setting(name):
    with pytest.raises(SchemaError) as raised:
        check_plain_names(["id", name], "public.t", mapped=False, source="src")
    assert repr(name) in str(raised.value)
    assert raised.value.context == {"table": "public.t", "source": "src", "key": "silver.readers"}


def test_names_with_other_characters_or_on_a_mapped_table_pass():
    check_plain_names(["id", "we`ird", "naïve", "a.b", "a-b"], "public.t", mapped=False)
    check_plain_names(["unit price"], "public.t", mapped=True)
