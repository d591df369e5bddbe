"""Property tests: reference renderers that follow PostgreSQL's output rules, parsed back."""

from __future__ import annotations

import math
import struct
from decimal import Decimal, localcontext

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from value_vectors import numeric_send  # noqa: E402  (tests/pgoutput is on sys.path)

from cdc_apply.pgoutput.gregorian import civil_from_days, days_from_civil
from cdc_apply.pgoutput.types import resolve_column_type
from cdc_apply.pgoutput.values import convert_binary, convert_text
from cdc_apply.pgoutput.values.array_text import parse_array_text

pytestmark = pytest.mark.usefixtures("conversion_path")
SETTINGS = settings(print_blob=True, deadline=None, max_examples=200,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EPOCH_SHIFT_US = 946_684_800_000_000
ARRAY_SPACE = " \t\n\r\v\f"


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


# -- arrays ------------------------------------------------------------------------------------
def render_array(elements: list[str | None], delimiter: str = ",") -> str:
    """array_out's quoting: quote empty, NULL-like, and strings with braces, quotes, backslashes,
    the delimiter or whitespace; escape '"' and '\\' inside quotes."""
    parts = []
    for element in elements:
        if element is None:
            parts.append("NULL")
        elif element == "" or element.upper() == "NULL" or any(
                c in '{}"\\' or c == delimiter or c in ARRAY_SPACE for c in element):
            parts.append('"' + element.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            parts.append(element)
    return "{" + delimiter.join(parts) + "}"


tricky_text = st.text(st.sampled_from(list('ab,{}"\\ NUL\tnulé😀;')) | st.characters(blacklist_categories=("Cs",),
                                                                                      blacklist_characters="\x00"),
                      max_size=8)


@SETTINGS
@given(st.lists(st.one_of(st.none(), tricky_text, st.sampled_from(["NULL", "null", "", " ", "\\", '"'])), max_size=8))
def test_text_arrays_rendered_by_postgresql_rules_parse_back(elements):
    assert parse_array_text(render_array(elements)) == elements
    column = resolve_column_type(1009, -1)
    converted = convert_text(column, pa.array([render_array(elements).encode()], pa.binary()))
    assert converted.to_pylist() == [elements]


@SETTINGS
@given(st.lists(st.one_of(st.none(), tricky_text), max_size=6))
def test_box_style_semicolon_delimited_arrays_parse_back(elements):
    assert parse_array_text(render_array(elements, ";"), ";") == elements


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=10),
       st.integers(-100, 100))
def test_int_arrays_in_text_and_binary_agree_and_drop_lower_bounds(numbers, lower):
    column = resolve_column_type(1007, -1)
    text = render_array([None if n is None else str(n) for n in numbers])
    if numbers and lower != 1:
        text = f"[{lower}:{lower + len(numbers) - 1}]={text}"
    if numbers:
        binary = struct.pack(">iiIii", 1, int(None in numbers), 23, len(numbers), lower) + b"".join(
            struct.pack(">i", -1) if n is None else struct.pack(">ii", 4, n) for n in numbers)
    else:
        binary = struct.pack(">iiI", 0, 0, 23)
    from_text = convert_text(column, pa.array([text.encode()], pa.binary()))
    from_binary = convert_binary(column, pa.array([binary], pa.binary()))
    assert from_text.to_pylist() == from_binary.to_pylist() == [numbers]


# -- integers and floats -------------------------------------------------------------------------
@SETTINGS
@given(st.lists(st.one_of(st.none(), st.integers(INT64_MIN, INT64_MAX)), max_size=20))
def test_int8_binary_and_text_round_trip(numbers):
    column = resolve_column_type(20, -1)
    binary = pa.array([None if n is None else struct.pack(">q", n) for n in numbers], pa.binary())
    text = pa.array([None if n is None else str(n).encode() for n in numbers], pa.binary())
    assert convert_binary(column, binary).to_pylist() == numbers
    assert convert_text(column, text).to_pylist() == numbers


def _pg_float_text(number: float) -> str:
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return repr(number)


def _bits(values: list) -> list:
    return [None if v is None else "nan" if math.isnan(v) else struct.pack(">d", v).hex() for v in values]


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), max_size=20))
def test_float8_binary_and_shortest_text_give_the_same_bits(numbers):
    column = resolve_column_type(701, -1)
    binary = pa.array([None if n is None else struct.pack(">d", n) for n in numbers], pa.binary())
    text = pa.array([None if n is None else _pg_float_text(n).encode() for n in numbers], pa.binary())
    assert _bits(convert_binary(column, binary).to_pylist()) == _bits(numbers)
    assert _bits(convert_text(column, text).to_pylist()) == _bits(numbers)


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.floats(width=32)), max_size=20))
def test_float4_binary_and_text_give_the_same_bits(numbers):
    column = resolve_column_type(700, -1)
    binary = pa.array([None if n is None else struct.pack(">f", n) for n in numbers], pa.binary())
    # '%.9g' is what extra_float_digits=3 prints: enough digits to round-trip a float4
    text = pa.array([None if n is None else (_pg_float_text(n) if not math.isfinite(n) else f"{n:.9g}").encode()
                     for n in numbers], pa.binary())
    assert _bits(convert_binary(column, binary).to_pylist()) == _bits(convert_text(column, text).to_pylist())


# -- numeric -------------------------------------------------------------------------------------
@SETTINGS
@given(st.data())
def test_numeric_binary_and_text_agree_for_every_precision_and_scale(data):
    precision = data.draw(st.integers(1, 38), label="precision")
    scale = data.draw(st.integers(0, precision), label="scale")
    unscaled = data.draw(st.lists(st.integers(-(10**precision - 1), 10**precision - 1), min_size=1, max_size=8))
    with localcontext() as context:
        context.prec = 60
        values = [Decimal(u).scaleb(-scale) for u in unscaled]
        expected = [v.quantize(Decimal(1).scaleb(-scale)) for v in values]
        binary = pa.array([numeric_send(v, scale) for v in values], pa.binary())
    column = resolve_column_type(1700, numeric_typmod(precision, scale))
    text = pa.array([f"{v:.{scale}f}".encode() for v in values], pa.binary())
    assert convert_text(column, text).to_pylist() == expected
    assert convert_binary(column, binary).to_pylist() == expected
    as_text = resolve_column_type(1700, -1)
    assert convert_binary(as_text, binary).to_pylist() == [f"{v:.{scale}f}" for v in values]


# -- timestamps ----------------------------------------------------------------------------------
def render_timestamp(micros: int, offset_seconds: int | None) -> str:
    """timestamp_out / timestamptz_out (DateStyle ISO) of microseconds since 1970 (UTC)."""
    local = micros + (offset_seconds or 0) * 1_000_000
    days, rest = divmod(local, 86_400_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    year, month, day = civil_from_days(days)
    text = f"{year if year > 0 else 1 - year:04d}-{month:02d}-{day:02d} " \
           f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if fraction:
        text += f".{fraction:06d}".rstrip("0")
    if offset_seconds is not None:
        sign = "+" if offset_seconds >= 0 else "-"
        minutes, secs = divmod(abs(offset_seconds), 60)
        text += f"{sign}{minutes // 60:02d}"
        if minutes % 60 or secs:
            text += f":{minutes % 60:02d}"
        if secs:
            text += f":{secs:02d}"
    return text + (" BC" if year <= 0 else "")


def render_date(days: int) -> str:
    """date_out (DateStyle ISO)."""
    year, month, day = civil_from_days(days)
    return f"{year if year > 0 else 1 - year:04d}-{month:02d}-{day:02d}" + (" BC" if year <= 0 else "")


PG_MIN_US = days_from_civil(-4713, 11, 24) * 86_400_000_000
ARROW_MAX_US = INT64_MAX - 1


@SETTINGS
@given(st.lists(st.integers(PG_MIN_US + 86_400_000_000, ARROW_MAX_US - 86_400_000_000), min_size=1, max_size=10),
       st.integers(-(15 * 3600 + 59 * 60), 15 * 3600 + 59 * 60))
def test_timestamptz_text_in_any_offset_and_era_matches_the_binary_form(micros, offset):
    column = resolve_column_type(1184, -1)
    text = pa.array([render_timestamp(m, offset).encode() for m in micros], pa.binary())
    binary = pa.array([struct.pack(">q", m - EPOCH_SHIFT_US) for m in micros], pa.binary())
    assert convert_text(column, text).cast(pa.int64()).to_pylist() == micros
    assert convert_binary(column, binary).cast(pa.int64()).to_pylist() == micros


@SETTINGS
@given(st.lists(st.integers(PG_MIN_US, ARROW_MAX_US), min_size=1, max_size=10))
def test_timestamp_text_matches_the_binary_form(micros):
    column = resolve_column_type(1114, -1)
    text = pa.array([render_timestamp(m, None).encode() for m in micros], pa.binary())
    binary = pa.array([struct.pack(">q", m - EPOCH_SHIFT_US) for m in micros], pa.binary())
    assert convert_text(column, text).cast(pa.int64()).to_pylist() == micros
    assert convert_binary(column, binary).cast(pa.int64()).to_pylist() == micros


@SETTINGS
@given(st.lists(st.integers(-2440588 + 1, 2147483494 - 2440588 - 1), min_size=1, max_size=10))
def test_dates_of_any_era_match_between_text_and_binary(days):
    column = resolve_column_type(1082, -1)
    text = pa.array([render_date(d).encode() for d in days], pa.binary())
    binary = pa.array([struct.pack(">i", d - 10957) for d in days], pa.binary())
    assert convert_text(column, text).cast(pa.int32()).to_pylist() == days
    assert convert_binary(column, binary).cast(pa.int32()).to_pylist() == days


# -- intervals -----------------------------------------------------------------------------------
def _trunc_divmod(a: int, b: int) -> tuple[int, int]:
    q = abs(a) // b * (1 if a >= 0 else -1)
    return q, a - q * b


def render_interval(months: int, days: int, micros: int) -> str:
    """interval_out in IntervalStyle postgres (datetime.c EncodeInterval's rules)."""
    years, mons = _trunc_divmod(months, 12)
    out, is_zero, is_before = [], True, False
    for value, unit in ((years, "year"), (mons, "mon"), (days, "day")):
        if value:
            out.append(f"{'+' if is_before and value > 0 else ''}{value} {unit}{'s' if value != 1 else ''}")
            is_before, is_zero = value < 0, False
    if is_zero or micros:
        seconds, fraction = _trunc_divmod(micros, 1_000_000)
        hours, rest = _trunc_divmod(seconds, 3600)
        minutes, secs = _trunc_divmod(rest, 60)
        sign = "-" if micros < 0 else ("+" if is_before else "")
        clock = f"{sign}{abs(hours):02d}:{abs(minutes):02d}:{abs(secs):02d}"
        if fraction:
            clock += f".{abs(fraction):06d}".rstrip("0")
        out.append(clock)
    return " ".join(out)


@SETTINGS
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 2), st.integers(-(2**31), 2**31 - 2),
                          st.integers(INT64_MIN + 1, INT64_MAX - 1)), min_size=1, max_size=8))
def test_intervals_in_postgres_style_match_the_binary_form(fields):
    column = resolve_column_type(1186, -1)
    text = pa.array([render_interval(*f).encode() for f in fields], pa.binary())
    binary = pa.array([struct.pack(">qii", micros, days, months) for months, days, micros in fields], pa.binary())
    expected = [{"months": m, "days": d, "microseconds": u} for m, d, u in fields]
    assert convert_text(column, text).to_pylist() == expected
    assert convert_binary(column, binary).to_pylist() == expected
