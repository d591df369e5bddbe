"""Multi-dimensional arrays, as a real PostgreSQL 18 sent them through pgoutput (text and binary) in
tests/pgoutput/data/nested_arrays.json (written by gen_nested_arrays.py), against the server's oracle."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pytest
from test_values_vectors import comparable, expected_value  # noqa: E402  (tests/pgoutput is on sys.path)

from cdc_apply.errors import ConfigError, DecodeError
from cdc_apply.pgoutput.types import TypeOptions, resolve_column_type, resolve_relation_column
from cdc_apply.pgoutput.values import convert_binary, convert_text

HERE = Path(__file__).parent
CAPTURE = json.loads((HERE / "data" / "nested_arrays.json").read_text(encoding="utf-8"))
COLUMNS = CAPTURE["columns"]


def _column_type(column: dict):
    options = TypeOptions(array_dimensions=(("nested.t", column["column"], column["dimensions"]),))
    return resolve_relation_column(column["type_oid"], column["type_modifier"], None, options, "nested.t",
                                   column["column"])


def _int4_2d():
    return _column_type({"column": "a", "type_oid": 1007, "type_modifier": -1, "dimensions": 2})


def _nest(items: list, shape: list[int]) -> list:
    if len(shape) == 1:
        return items
    step = len(items) // shape[0]
    return [_nest(items[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _expected(ct, value: dict):
    if value["text"] is None:
        return None
    if value.get("shape") is None:
        return []   # '{}': no dimensions, fits any column
    return _nest([expected_value(ct.element_type, e) for e in value["elements"]], value["shape"])


def _raw(value: dict, form: str) -> bytes | None:
    if form == "text":
        return None if value["text"] is None else value["text"].encode()
    return None if value["binary"] is None else bytes.fromhex(value["binary"])


CONVERT = {"text": convert_text, "binary": convert_binary}


@pytest.mark.parametrize("form", ["text", "binary"])
@pytest.mark.parametrize("column", COLUMNS, ids=lambda c: c["column"])
def test_every_captured_value_of_the_columns_dimensions_converts_to_the_servers_nested_oracle(column, form):
    ct = _column_type(column)
    good = [v for v in column["values"] if "error" not in v]
    converted = CONVERT[form](ct, pa.array([_raw(v, form) for v in good], pa.binary()))
    assert converted.type == ct.arrow_type
    assert comparable(converted) == [_expected(ct, v) for v in good]


@pytest.mark.parametrize("form", ["text", "binary"])
def test_a_captured_value_of_other_dimensions_than_its_columns_is_a_decode_error_saying_both(form):
    bad = [(c, v) for c in COLUMNS for v in c["values"] if "error" in v]
    assert len(bad) >= 5
    for column, value in bad:
        with pytest.raises(DecodeError, match=value["error"]) as info:
            CONVERT[form](_column_type(column), pa.array([_raw(value, form)], pa.binary()))
        assert "array_dimensions" in str(info.value)


def test_a_two_dimensional_column_has_nested_arrow_and_spark_types():
    ct = _int4_2d()
    assert ct.arrow_type == pa.list_(pa.list_(pa.int32()))
    assert ct.spark_ddl == "ARRAY<ARRAY<INT>>"
    assert ct.pg_name == "int4[]" and ct.dimensions == 2


def test_a_column_the_options_do_not_name_is_one_dimensional():
    options = TypeOptions(array_dimensions=(("nested.t", "a", 2),))
    assert resolve_relation_column(1007, -1, None, options, "nested.t", "b") == resolve_column_type(1007, -1)


def test_dimensions_given_to_a_column_that_is_not_an_array_are_a_config_error_naming_the_key():
    options = TypeOptions(array_dimensions=(("nested.t", "a", 2),))
    with pytest.raises(ConfigError, match="not an array") as info:
        resolve_relation_column(23, -1, None, options, "nested.t", "a")
    assert info.value.context["key"] == "tables.nested.t.array_dimensions"


def test_lower_bounds_other_than_one_are_dropped_and_the_elements_kept():
    values = [b"[0:1][-1:0]={{5,6},{7,8}}", b"{{5,6},{7,8}}"]
    assert convert_text(_int4_2d(), pa.array(values, pa.binary())).to_pylist() == [[[5, 6], [7, 8]]] * 2


def test_bounds_that_disagree_with_the_braces_are_a_decode_error():
    with pytest.raises(DecodeError, match="bounds say 2x3 elements, found 2x2"):
        convert_text(_int4_2d(), pa.array([b"[1:2][1:3]={{5,6},{7,8}}"], pa.binary()))


@pytest.mark.parametrize("ragged", [b"{{1,2},{3}}", b"{{1,2},3}", b"{1,{2,3}}", b"{{}}"])
def test_a_ragged_text_array_postgresql_cannot_produce_is_a_decode_error(ragged):
    with pytest.raises(DecodeError, match="different lengths|mixed|empty sub-array"):
        convert_text(_int4_2d(), pa.array([ragged], pa.binary()))


def _captured_binary(column: str, row: int) -> bytes:
    value = next(c for c in COLUMNS if c["column"] == column)["values"][row]
    return bytes.fromhex(value["binary"])


def test_trailing_bytes_after_a_binary_nested_array_are_a_decode_error():
    with pytest.raises(DecodeError, match="junk after the last array element"):
        convert_binary(_int4_2d(), pa.array([_captured_binary("i2", 0) + b"\x00"], pa.binary()))


@pytest.mark.parametrize("cut", [11, 20, 27, 40])
def test_a_truncated_binary_nested_array_is_a_decode_error(cut):
    with pytest.raises(DecodeError, match="array header|truncated|invalid"):
        convert_binary(_int4_2d(), pa.array([_captured_binary("i2", 0)[:cut]], pa.binary()))


def test_binary_dimensions_claiming_more_elements_than_the_bytes_hold_are_a_decode_error():
    raw = bytearray(_captured_binary("i2", 0))
    raw[12:16] = (1 << 20).to_bytes(4, "big")   # the first dimension's length
    with pytest.raises(DecodeError, match="invalid array dimensions"):
        convert_binary(_int4_2d(), pa.array([bytes(raw)], pa.binary()))


def test_a_bad_element_names_the_row_and_the_element():
    with pytest.raises(DecodeError, match="element 3") as info:
        convert_text(_int4_2d(), pa.array([b"{{1}}", b"{{1,2},{x,4}}"], pa.binary()))
    assert info.value.context["row"] == 1


def test_sql_null_rows_and_empty_arrays_stay_in_place_between_values():
    ct = _int4_2d()
    values = pa.array([None, b"{}", b"{{1,NULL}}", None], pa.binary())
    assert convert_text(ct, values).to_pylist() == [None, [], [[1, None]], None]


@pytest.mark.postgres
def test_the_capture_still_matches_the_server(postgres):
    spec = importlib.util.spec_from_file_location("gen_nested_arrays", HERE / "gen_nested_arrays.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    conn = postgres.connect()
    try:
        fresh = gen.capture(conn)
    finally:
        conn.close()
    assert {**fresh, "server_version": None} == {**CAPTURE, "server_version": None}
