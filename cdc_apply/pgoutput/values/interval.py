"""interval -> struct<months: int32, days: int32, microseconds: int64>, PostgreSQL's own three fields.

interval_send is int64 microseconds, int32 days, int32 months. interval_out prints one of
four IntervalStyles; all four are read:

* postgres (the default): '1 year 2 mons -3 days +04:05:06.789', '-00:00:01.5', '00:00:00'
* postgres_verbose: '@ 1 year 2 mons 3 days 4 hours 5 mins 6.5 secs ago', '@ 0'
* sql_standard: '1-2', '3 4:05:06.5', '+1-2 -3 +4:05:06', '-1-2 -3 -4:05:06', '0'
* iso_8601: 'P1Y2M3DT4H5M6.5S', 'P-1Y-2M', 'PT0S'

'infinity' and '-infinity' (PostgreSQL 17+) are every field at its maximum / minimum, as in
the binary form.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..types import INTERVAL_ARROW, ColumnType
from .common import Malformed, big_endian, fixed_width, per_value, valid_mask
from .dates import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

_US = {"hour": 3_600_000_000, "min": 60_000_000, "sec": 1_000_000}
_MONTHS = {"year": 12, "mon": 1}
_NUMBER = re.compile(r"([+-]?)(\d+)(?:\.(\d{1,6}))?")
_CLOCK = re.compile(r"([+-]?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?")
_YEAR_MONTH = re.compile(r"([+-]?)(\d+)-(\d+)")
_ISO = re.compile(r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)W)?(?:(-?\d+)D)?"
                  r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?)(\d+)(?:\.(\d{1,6}))?S)?)?")


def interval_from_text(text: str) -> tuple[int, int, int]:
    """(months, days, microseconds) of interval_out's text in any IntervalStyle."""
    if text == "infinity":
        return INT32_MAX, INT32_MAX, INT64_MAX
    if text == "-infinity":
        return INT32_MIN, INT32_MIN, INT64_MIN
    match = _POSTGRES_SCALAR.fullmatch(text)
    if match is not None and text:
        fields = _postgres_match(match)
    elif text.startswith("@"):
        fields = _verbose(text)
    elif text.startswith("P"):
        fields = _iso(text)
    elif any(c.isalpha() for c in text):
        fields = _postgres(text)
    else:
        fields = _sql_standard(text)
    months, days, micros = fields
    if not (INT32_MIN <= months <= INT32_MAX and INT32_MIN <= days <= INT32_MAX
            and INT64_MIN <= micros <= INT64_MAX):
        raise Malformed("interval field out of range")
    return fields


def _postgres_match(match: re.Match) -> tuple[int, int, int]:
    years, mons, days, sign, hours, minutes, seconds, fraction = match.groups()
    micros = 0
    if hours is not None:
        micros = _micros(sign, str((int(hours) * 60 + int(minutes)) * 60 + int(seconds)), fraction)
    return int(years or 0) * 12 + int(mons or 0), int(days or 0), micros


def _micros(sign: str, whole: str, fraction: str | None) -> int:
    value = int(whole) * 1_000_000 + (int(fraction.ljust(6, "0")) if fraction else 0)
    return -value if sign == "-" else value


def _clock(token: str) -> int:
    match = _CLOCK.fullmatch(token)
    if not match or int(match[3]) > 59 or int(match[4]) > 59:
        raise Malformed(f"bad time field {token!r}")
    sign, hours, minutes, seconds, fraction = match.groups()
    return _micros(sign, str((int(hours) * 60 + int(minutes)) * 60 + int(seconds)), fraction)


def _unit(word: str) -> str:
    base = word[:-1] if word.endswith("s") else word
    if base not in _MONTHS and base not in _US and base != "day":
        raise Malformed(f"unknown interval unit {word!r}")
    return base


def _postgres(text: str) -> tuple[int, int, int]:
    """'N year(s) N mon(s) N day(s) [+-]HH:MM:SS[.f]', each field signed on its own."""
    months = days = micros = 0
    tokens = text.split(" ")
    i = 0
    while i < len(tokens):
        if ":" in tokens[i]:
            micros += _clock(tokens[i])
            i += 1
            continue
        if i + 1 >= len(tokens) or not re.fullmatch(r"[+-]?\d+", tokens[i]):
            raise Malformed(f"bad interval field {tokens[i]!r}")
        number, unit = int(tokens[i]), _unit(tokens[i + 1])
        if unit == "day":
            days += number
        elif unit in _MONTHS:
            months += number * _MONTHS[unit]
        else:
            raise Malformed(f"unexpected unit {tokens[i + 1]!r}")
        i += 2
    return months, days, micros


def _verbose(text: str) -> tuple[int, int, int]:
    """'@ N unit ... [ago]': hours, minutes and (fractional) seconds as separate signed fields."""
    body = text[1:].strip()
    ago = body.endswith(" ago")
    if ago:
        body = body[:-4]
    if body == "0":
        return 0, 0, 0
    tokens = body.split(" ")
    if len(tokens) % 2:
        raise Malformed("unpaired interval field")
    months = days = micros = 0
    for number, word in zip(tokens[0::2], tokens[1::2]):
        match = _NUMBER.fullmatch(number)
        unit = _unit(word)
        if not match or (match[3] and unit != "sec"):
            raise Malformed(f"bad interval field {number!r}")
        if unit == "day":
            days += int(number)
        elif unit in _MONTHS:
            months += int(number) * _MONTHS[unit]
        else:
            micros += _micros(*match.groups()) * (_US[unit] // 1_000_000)
    return (-months, -days, -micros) if ago else (months, days, micros)


def _sql_standard(text: str) -> tuple[int, int, int]:
    """'[Y-M] [D] [H:MM:SS[.f]]'; a leading '-' with no other sign negates every field."""
    if text == "0":
        return 0, 0, 0
    tokens = text.split(" ")
    months = days = micros = 0
    for token in tokens:
        if ":" in token:
            micros = _clock(token)
        elif (match := _YEAR_MONTH.fullmatch(token)) is not None:
            if int(match[3]) > 11:
                raise Malformed(f"bad year-month field {token!r}")
            months = int(match[2]) * 12 + int(match[3])
            months = -months if match[1] == "-" else months
        elif re.fullmatch(r"[+-]?\d+", token):
            days = int(token)
        else:
            raise Malformed(f"bad interval field {token!r}")
    if tokens[0].startswith("-") and not any(t[:1] in "+-" for t in tokens[1:]):
        months, days, micros = -abs(months), -abs(days), -abs(micros)
    return months, days, micros


def _iso(text: str) -> tuple[int, int, int]:
    """ISO 8601 with designators: P[nY][nM][nW][nD][T[nH][nM][n[.f]S]]."""
    match = _ISO.fullmatch(text)
    if not match or text in ("P", "PT") or text.endswith("T"):
        raise Malformed("not an ISO 8601 interval")
    years, months, weeks, days, hours, minutes, second_sign, seconds, fraction = match.groups()
    whole = lambda part: int(part) if part else 0  # noqa: E731
    micros = whole(hours) * _US["hour"] + whole(minutes) * _US["min"]
    if seconds is not None:
        micros += _micros(second_sign, seconds, fraction)
    return whole(years) * 12 + whole(months), whole(weeks) * 7 + whole(days), micros


def _struct(months, days, micros, mask: pa.Array | None = None) -> pa.StructArray:
    return pa.StructArray.from_arrays(
        [pa.array(months, pa.int32()), pa.array(days, pa.int32()), pa.array(micros, pa.int64())],
        fields=list(INTERVAL_ARROW), mask=mask)


# IntervalStyle postgres, the default, read by Arrow (RE2) for the whole column at once.
_POSTGRES_STYLE = (r"^(?:(?P<y>[+-]?[0-9]+) years?)?(?: ?(?P<mo>[+-]?[0-9]+) mons?)?(?: ?(?P<d>[+-]?[0-9]+) days?)?"
                   r"(?: ?(?P<sign>[+-]?)(?P<h>[0-9]+):(?P<mi>[0-5][0-9]):(?P<s>[0-5][0-9])"
                   r"(?:\.(?P<f>[0-9]{1,6}))?)?$")


def interval_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """interval_out in any IntervalStyle -> (months, days, microseconds).

    The postgres style is read a column at a time; other styles, and values too large for the
    fast arithmetic, value by value.
    """
    n = len(values)
    months, days, micros = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    fast = np.zeros(n, dtype=bool)
    strings = values.cast(pa.string()) if values.null_count < n else None
    try:
        fields = pc.extract_regex(strings, _POSTGRES_STYLE) if strings is not None else None
    except pa.ArrowInvalid:  # invalid UTF-8 and the like: the careful path reports it
        fields = None
    if fields is not None:
        fast, months, days, micros = _postgres_columns(fields, valid_mask(values))
    slow_rows = np.flatnonzero(valid_mask(values) & ~fast)
    if slow_rows.size:
        parsed = per_value(ct, values.take(pa.array(slow_rows)),
                           lambda raw: interval_from_text(raw.decode("ascii")),
                           lambda items: pa.array(items, pa.list_(pa.int64(), 3)), rows=slow_rows)
        flat = parsed.flatten().to_numpy(zero_copy_only=False).reshape(-1, 3)
        months[slow_rows], days[slow_rows], micros[slow_rows] = flat[:, 0], flat[:, 1], flat[:, 2]
    return _struct(months.astype(np.int32), days.astype(np.int32), micros,
                   pa.array(~valid_mask(values)) if values.null_count else None)


def _postgres_columns(fields: pa.StructArray, valid: np.ndarray):
    """(rows read, months, days, microseconds) from the regex groups; rows out of range are not read."""
    def number(i: int, pad: bool = False) -> np.ndarray:
        text = pc.replace_substring(fields.field(i), "+", "")  # Arrow's integer cast refuses a '+'
        text = pc.if_else(pc.equal(text, ""), "0", pc.utf8_rpad(text, 6, "0") if pad else text)
        return pc.fill_null(pc.cast(text, pa.int64()), 0).to_numpy(zero_copy_only=False)

    matched = fields.is_valid().to_numpy(zero_copy_only=False) & valid
    # a lone '' matches every optional group: PostgreSQL never prints it
    something = pc.fill_null(pc.greater(pc.binary_length(pc.binary_join_element_wise(
        *[fields.field(i) for i in range(8)], "")), 0), False).to_numpy(zero_copy_only=False)
    matched &= something
    try:
        years, mons, days = number(0), number(1), number(2)
        hours, minutes, seconds, fraction = number(4), number(5), number(6), number(7, pad=True)
    except pa.ArrowInvalid:  # a field too long for int64: the careful path reports it
        nothing = np.zeros(len(valid), bool)
        return nothing, np.zeros(len(valid), np.int64), np.zeros(len(valid), np.int64), np.zeros(len(valid), np.int64)
    negative = pc.fill_null(pc.equal(fields.field(3), "-"), False).to_numpy(zero_copy_only=False)
    fits = (np.abs(years) <= 178956970) & (hours <= 2562047788)
    hours, minutes, seconds, fraction = (np.where(fits, x, 0).astype(np.uint64)
                                         for x in (hours, minutes, seconds, fraction))
    magnitude = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + fraction
    fits &= magnitude <= np.where(negative, 2**63, 2**63 - 1).astype(np.uint64)
    micros = magnitude.astype(np.int64)  # 2**63 wraps to the minimum, which negation keeps
    micros = np.where(negative, -micros, micros)
    months = np.where(fits, years, 0) * 12 + mons
    fits &= (np.abs(months) < 2**31) & (np.abs(days) < 2**31)
    fits &= (months >= -(2**31)) & (days >= -(2**31))
    read = matched & fits
    return read, np.where(read, months, 0), np.where(read, days, 0), np.where(read, micros, 0)


def interval_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """interval_send: int64 microseconds, int32 days, int32 months."""
    block = fixed_width(ct, values, 16)
    micros = big_endian(block[:, :8], ">i8")
    days = big_endian(block[:, 8:12], ">i4")
    months = big_endian(block[:, 12:], ">i4")
    return _struct(months, days, micros, pa.array(~valid_mask(values)) if values.null_count else None)


TEXT = {"interval": interval_text}
BINARY = {"interval": interval_binary}
_POSTGRES_SCALAR = re.compile(_POSTGRES_STYLE.replace("(?P<", "(?P<g_"))
SCALAR_TEXT = {"interval": (lambda ct, raw: interval_from_text(raw.decode("ascii")), 256)}
