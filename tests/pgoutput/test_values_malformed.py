"""Malformed values raise DecodeError (naming type, row and bytes) — never another exception."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from value_vectors import column_type_of, load_groups  # noqa: E402  (tests/pgoutput is on sys.path)

from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput.types import resolve_column_type
from cdc_apply.pgoutput.values import convert_binary, convert_text

pytestmark = pytest.mark.usefixtures("conversion_path")
SETTINGS = settings(print_blob=True, deadline=None, max_examples=25,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
GROUPS = load_groups()


def _seeds(group: dict) -> list[bytes]:
    seeds = [bytes.fromhex(v["binary"]) for v in group["vectors"]]
    seeds += [t.encode() for v in group["vectors"] for t in v["text"].values()]
    return seeds or [b""]


@st.composite
def mutated(draw, seeds: list[bytes]) -> bytes:
    raw = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["cut", "flip", "insert", "random"]))
        position = draw(st.integers(0, len(raw)))
        if action == "cut":
            del raw[position:]
        elif action == "flip" and raw:
            raw[min(position, len(raw) - 1)] ^= draw(st.integers(1, 255))
        elif action == "insert":
            raw[position:position] = draw(st.binary(min_size=1, max_size=4))
        else:
            raw = bytearray(draw(st.binary(max_size=24)))
    return bytes(raw)


def _accepts_or_decode_error(convert, column, raw: list[bytes | None]) -> None:
    try:
        result = convert(column, pa.array(raw, pa.binary()))
    except DecodeError:
        return
    assert result.type == column.arrow_type
    assert len(result) == len(raw)
    assert [v is None for v in raw] == [not v.is_valid for v in result]


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g["name"])
def test_mutated_and_random_bytes_give_a_value_or_a_decode_error(group):
    column = column_type_of(group)
    seeds = _seeds(group)

    @SETTINGS
    @given(st.lists(st.one_of(st.none(), mutated(seeds), st.binary(max_size=30)), min_size=1, max_size=4))
    def check(raw):
        _accepts_or_decode_error(convert_text, column, raw)
        _accepts_or_decode_error(convert_binary, column, raw)

    check()


def test_a_bad_value_is_named_by_type_row_and_bytes():
    column = resolve_column_type(23, -1)
    with pytest.raises(DecodeError) as info:
        convert_text(column, pa.array([b"1", None, b"12x"], pa.binary()))
    assert info.value.context["type"] == "int4"
    assert info.value.context["row"] == 2
    assert "12x" in info.value.context["value"]
    with pytest.raises(DecodeError, match="expected 4 bytes, got 3") as info:
        convert_binary(column, pa.array([None, b"\x00\x00\x01"], pa.binary()))
    assert info.value.context["row"] == 1


def test_long_bad_values_are_shown_as_a_short_excerpt():
    with pytest.raises(DecodeError) as info:
        convert_text(resolve_column_type(1082, -1), pa.array([b"x" * 5000], pa.binary()))
    assert len(info.value.context["value"]) < 80


def test_invalid_utf8_text_is_a_decode_error_naming_the_row():
    with pytest.raises(DecodeError, match="invalid UTF-8") as info:
        convert_text(resolve_column_type(25, -1), pa.array([b"ok", b"\xff\xfe"], pa.binary()))
    assert info.value.context["row"] == 1


def test_a_multi_dimensional_binary_array_in_a_one_dimensional_column_is_rejected_saying_its_dimensions():
    two_by_one = bytes.fromhex("00000002" "00000000" "00000017" "00000002" "00000001" "00000001" "00000001"
                               "00000004" "00000001" "00000004" "00000002")
    with pytest.raises(DecodeError, match="a 2-dimensional array in a column of 1 dimension"):
        convert_binary(resolve_column_type(1007, -1), pa.array([two_by_one], pa.binary()))


def test_an_array_element_error_names_the_array_row_and_the_element():
    with pytest.raises(DecodeError, match="element 2") as info:
        convert_text(resolve_column_type(1007, -1), pa.array([b"{1}", b"{2,x}"], pa.binary()))
    assert info.value.context["row"] == 1
    assert info.value.context["type"] == "int4[]"


def test_an_array_with_the_wrong_element_type_is_rejected():
    text_array = bytes.fromhex("00000001" "00000000" "00000019" "00000001" "00000001" "00000001" "61")
    with pytest.raises(DecodeError, match="element type OID 25, expected 23"):
        convert_binary(resolve_column_type(1007, -1), pa.array([text_array], pa.binary()))


@pytest.mark.parametrize("oid, raw", [
    (1114, b"2024-13-01 00:00:00"), (1114, b"2024-02-30 00:00:00"), (1114, b"2024-01-01 00:00:00+00"),
    (1184, b"2024-01-01 00:00:00"), (1082, b"0000-01-01 BC"), (1082, b"2023-02-29"), (1083, b"25:00:00"),
    (1186, b"1 fortnight"), (16, b"true"), (2950, b"not-a-uuid"), (790, b"$1.5"), (1700, b"1e5"),
    (1560, b"102"), (17, b"\\x0"), (869, b"1.2.3.4/x"),
])
def test_text_postgresql_never_prints_is_rejected(oid, raw):
    with pytest.raises(DecodeError):
        convert_text(resolve_column_type(oid, -1), pa.array([raw], pa.binary()))
