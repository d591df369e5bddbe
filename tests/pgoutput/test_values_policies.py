"""The documented policies of the value converters (docs/TYPES.md), one by one."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from cdc_apply.pgoutput.types import resolve_column_type
from cdc_apply.pgoutput.values import convert_binary, convert_binary_value, convert_text, convert_text_value

pytestmark = pytest.mark.usefixtures("conversion_path")
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def text(oid: int, *raw: bytes | None, typmod: int = -1, user_types=None) -> list:
    return convert_text(resolve_column_type(oid, typmod, user_types), pa.array(list(raw), pa.binary())).to_pylist()


def binary(oid: int, *raw: bytes | None, typmod: int = -1, user_types=None) -> list:
    return convert_binary(resolve_column_type(oid, typmod, user_types), pa.array(list(raw), pa.binary())).to_pylist()


@pytest.mark.parametrize("raw, cents", [
    (b"$1,234.56", 123456), (b"-$1,234.56", -123456), (b"($1.00)", -100), (b"1.234,56 \xe2\x82\xac", 123456),
    (b"-1\xe2\x80\xaf234,56 \xe2\x82\xac", -123456), (b"$0.05", 5), (b"USD 12.30", 1230),
    (b"-$92,233,720,368,547,758.08", -(2**63)), (b"$92,233,720,368,547,758.07", 2**63 - 1),
])
def test_money_text_in_any_two_fraction_digit_locale_is_read_as_cents(raw, cents):
    assert text(790, raw) == [Decimal(cents).scaleb(-2)]


def test_money_binary_is_int64_cents():
    assert binary(790, (-150).to_bytes(8, "big", signed=True)) == [Decimal("-1.50")]


def test_bytea_text_is_read_in_hex_and_escape_formats():
    assert text(17, b"\\x00ff5c", b"\\x", None, b"a\\\\b\\000\\377") == [b"\x00\xff\\", b"", None, b"a\\b\x00\xff"]


def test_time_is_canonical_text_with_six_fraction_digits_so_it_sorts():
    assert text(1083, b"01:02:03", b"01:02:03.5", b"24:00:00") == ["01:02:03.000000", "01:02:03.500000",
                                                                   "24:00:00.000000"]
    assert binary(1083, (3_723_500_000).to_bytes(8, "big")) == ["01:02:03.500000"]


def test_timetz_is_canonical_text_with_its_offset():
    assert text(1266, b"01:02:03+05:30", b"01:02:03.25-08", b"00:00:00+05:30:15") == [
        "01:02:03.000000+05:30", "01:02:03.250000-08:00", "00:00:00.000000+05:30:15"]


def test_infinite_dates_and_timestamps_are_the_extreme_arrow_values():
    date = resolve_column_type(1082, -1)
    assert convert_text_value(date, "infinity") == INT32_MAX
    assert convert_text_value(date, "-infinity") == -(2**31)
    stamp = resolve_column_type(1184, -1)
    assert convert_text_value(stamp, "infinity") == INT64_MAX
    assert convert_binary_value(stamp, b"\x80" + bytes(7)) == -(2**63)


def test_bc_dates_keep_their_proleptic_day_number():
    # 1 BC is astronomical year 0, a leap year on the proleptic Gregorian calendar
    column = resolve_column_type(1082, -1)
    days = convert_text(column, pa.array([b"0001-12-31 BC", b"0001-02-29 BC", b"0001-01-01"], pa.binary()))
    assert days.cast(pa.int32()).to_pylist() == [-719163, -719528 + 59, -719162]


def test_the_char_type_prints_high_bytes_as_octal_escapes_like_charout():
    assert binary(18, b"a", b"\x00", b"\xc3") == ["a", "", "\\303"]
    assert text(18, b"a", b"", b"\\303") == ["a", "", "\\303"]


def test_enum_binary_is_its_label_and_other_user_binary_is_hex():
    mood = {16400: ("public", "mood")}
    assert binary(16400, "très".encode(), user_types=mood) == ["très"]
    composite = bytes.fromhex("0000000200000017000000040000000100000019ffffffff")
    assert binary(16400, composite, user_types=mood) == ["\\x" + composite.hex()]
    assert binary(16400, b"\x01top.sub", user_types=mood) == ["\\x01746f702e737562"]  # ltree's version byte
    assert text(16400, b"(1,x)", user_types=mood) == ["(1,x)"]


def test_an_unknown_oid_without_a_type_message_is_kept_as_text():
    assert text(99999, b"anything") == ["anything"]
    assert binary(99999, b"label", b"\x00\x01") == ["label", "\\x0001"]


def test_inet_hides_a_full_mask_and_cidr_always_shows_it():
    host = bytes.fromhex("02200004") + bytes([10, 0, 0, 1])
    assert binary(869, host) == ["10.0.0.1"]
    assert binary(650, bytes.fromhex("02200104") + bytes([10, 0, 0, 1])) == ["10.0.0.1/32"]


def test_array_lower_bounds_are_dropped_and_the_elements_kept():
    assert text(1007, b"[0:2]={1,2,3}", b"[-1:-1]={9}") == [[1, 2, 3], [9]]


def test_quoted_null_is_a_string_and_bare_null_is_null():
    assert text(1009, b'{NULL,"NULL",null,"",a}') == [[None, "NULL", None, "", "a"]]


def test_array_text_tolerates_whitespace_around_elements():
    assert text(1009, b'{ a , "b" ,c d }') == [["a", "b", "c d"]]


@pytest.mark.parametrize("make", [
    lambda raw: pa.array(raw, pa.large_binary()),
    lambda raw: pa.array([None if r is None else r.decode() for r in raw], pa.string()),
    lambda raw: pa.chunked_array([pa.array(raw[:1], pa.binary()), pa.array(raw[1:], pa.binary())]),
    lambda raw: pa.array([b"junk"] + raw, pa.binary()).slice(1),
])
def test_large_string_chunked_and_sliced_inputs_convert_alike(make):
    raw = [b"1", None, b"-3", None, b"4"]
    for oid in (23, 1082, 1700):
        column = resolve_column_type(oid, -1 if oid != 1700 else (10 << 16 | 2) + 4)
        values = [b"2024-01-0" + r[-1:] if r is not None and oid == 1082 else r for r in raw]
        expected = convert_text(column, pa.array(values, pa.binary()))
        assert convert_text(column, make(values)).equals(expected)


def test_sliced_binary_inputs_keep_their_nulls():
    column = resolve_column_type(1184, -1)
    raw = pa.array([b"x", None, (0).to_bytes(8, "big"), None], pa.binary()).slice(1)
    assert convert_binary(column, raw).cast(pa.int64()).to_pylist() == [None, 946_684_800_000_000, None]


def test_empty_and_all_null_columns_keep_their_type():
    for oid in (23, 1186, 1007, 1700, 25):
        column = resolve_column_type(oid, -1)
        assert convert_text(column, pa.array([], pa.binary())).type == column.arrow_type
        nulls = convert_binary(column, pa.array([None, None], pa.binary()))
        assert nulls.type == column.arrow_type and nulls.null_count == 2


def test_numeric_text_from_binary_cuts_digits_at_the_display_scale_like_numeric_out():
    # digits [1, 2345] weight 0 (1.2345) at display scale 2 print as 1.23
    assert binary(1700, bytes.fromhex("0002" "0000" "0000" "0002" "0001" "0929")) == ["1.23"]


def test_long_arrays_convert_alike_from_text_and_binary():
    import struct

    numbers = [None if i % 7 == 3 else i * 31 - 5000 for i in range(1000)]
    text_form = "{" + ",".join("NULL" if n is None else str(n) for n in numbers) + "}"
    binary_form = struct.pack(">iiIii", 1, 1, 23, len(numbers), 1) + b"".join(
        struct.pack(">i", -1) if n is None else struct.pack(">ii", 4, n) for n in numbers)
    short = struct.pack(">iiIii", 1, 0, 23, 1, 1) + struct.pack(">ii", 4, 7)
    assert binary(1007, binary_form, None, short) == [numbers, None, [7]]
    assert text(1007, text_form.encode(), None, b"{7}") == [numbers, None, [7]]
