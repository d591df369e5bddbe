"""Dates and times: date, time, timetz, timestamp, timestamptz — text (DateStyle ISO) and binary.

Binary forms count from PostgreSQL's epoch 2000-01-01 (date_send: int32 days; time_send:
int64 microseconds since midnight; timetz_send: that plus int32 zone seconds *west* of UTC;
timestamp_send: int64 microseconds), with int32/int64 max/min meaning +/-infinity.
Arrow counts from 1970-01-01. Dates before 1 AD and after 9999 AD are computed
arithmetically on the proleptic Gregorian calendar (as PostgreSQL does), never through
Python's datetime, which cannot hold them.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..gregorian import days_from_civil
from ..types import ColumnType
from .common import (
    Malformed,
    big_endian,
    check_regex,
    fail,
    fixed_width,
    per_value,
    strings_from_rows,
    utf8,
    valid_mask,
    with_nulls_of,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EPOCH_SHIFT_DAYS = 10957  # 2000-01-01 minus 1970-01-01
EPOCH_SHIFT_US = EPOCH_SHIFT_DAYS * 86_400_000_000
USECS_PER_DAY = 86_400_000_000

_DATE = re.compile(r"(\d{4,})-(\d\d)-(\d\d)( BC)?")
_TIMESTAMP = re.compile(r"(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
                        r"(?:([+-])(\d\d)(?::(\d\d)(?::(\d\d))?)?)?( BC)?")
_TIME_TEXT = r"^(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?|24:00:00(\.0{1,6})?)$"
_TIMETZ = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?([+-])(\d\d)(?::(\d\d)(?::(\d\d))?)?")
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _checked_days(year_text: str, month_text: str, day_text: str, bc: str | None) -> int:
    year, month, day = int(year_text), int(month_text), int(day_text)
    if year < 1:
        raise Malformed("year 0 does not exist")
    if bc:
        year = 1 - year
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= month <= 12 or not 1 <= day <= _DAYS_IN_MONTH[month - 1] + (leap and month == 2):
        raise Malformed("no such date")
    return days_from_civil(year, month, day)


def _fraction(text: str | None) -> int:
    return int(text.ljust(6, "0")) if text else 0


def _merge(ct: ColumnType, values: pa.Array, fast_rows: np.ndarray, fast, slow, dtype) -> np.ndarray:
    """Numbers for every row: ``fast`` (vectorised, on the rows of the common shape, may fail)
    and ``slow`` (per distinct value) for the rest; zeros where null."""
    valid = valid_mask(values)
    out = np.zeros(len(values), dtype=dtype)
    fast_rows = fast_rows & valid
    if fast_rows.any():
        subset = values if fast_rows.all() else values.filter(pa.array(fast_rows))
        try:
            out[fast_rows] = fast(subset)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            fast_rows = np.zeros_like(fast_rows)  # some row is unusual or wrong: the careful path decides
    slow_rows = np.flatnonzero(valid & ~fast_rows)
    if slow_rows.size:
        subset = values.take(pa.array(slow_rows))
        parsed = per_value(ct, subset, slow, lambda items: pa.array(items, pa.int64()), rows=slow_rows)
        out[slow_rows] = parsed.to_numpy(zero_copy_only=False)
    return out


# -- date ----------------------------------------------------------------------------------
def date_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """date_out (ISO): 'YYYY-MM-DD', 'YYYY-MM-DD BC', years past 9999, 'infinity', '-infinity'."""
    common = pc.fill_null(pc.equal(pc.binary_length(values), 10), False).to_numpy(zero_copy_only=False)
    days = _merge(ct, values, common,
                  lambda subset: pc.cast(subset.cast(pa.string()), pa.date32()).cast(pa.int32())
                  .to_numpy(zero_copy_only=False),
                  _date_from_text, np.int32)
    return with_nulls_of(values, pa.date32(), days)


def _date_from_text(raw: bytes) -> int:
    text = raw.decode("ascii")
    if text == "infinity":
        return INT32_MAX
    if text == "-infinity":
        return INT32_MIN
    match = _DATE.fullmatch(text)
    if not match:
        raise Malformed("not an ISO date")
    days = _checked_days(*match.groups())
    if not INT32_MIN < days < INT32_MAX:
        raise Malformed("date out of range")
    return days


def date_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """date_send: int32 days since 2000-01-01; int32 max/min are +/-infinity and stay so."""
    days = big_endian(fixed_width(ct, values, 4), ">i4").astype(np.int64)
    finite = (days != INT32_MAX) & (days != INT32_MIN)
    shifted = np.where(finite, days + EPOCH_SHIFT_DAYS, days)
    bad = np.flatnonzero(valid_mask(values) & finite & (shifted >= INT32_MAX))
    if bad.size:
        raise fail(ct, values, int(bad[0]), "date out of range")
    return with_nulls_of(values, pa.date32(), shifted.astype(np.int32))


# -- timestamp / timestamptz ------------------------------------------------------------------
def timestamp_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """timestamp_out / timestamptz_out (DateStyle ISO): 'YYYY-MM-DD HH:MM:SS[.ffffff]', with an
    offset '+HH[:MM[:SS]]' for timestamptz, ' BC', years past 9999, 'infinity', '-infinity'."""
    with_zone = ct.kind == "timestamptz"
    lengths = pc.binary_length(values)
    common = pc.and_(pc.and_(pc.greater_equal(lengths, 19), pc.less_equal(lengths, 32 if with_zone else 26)),
                     pc.equal(pc.binary_slice(values, 4, 5), pa.scalar(b"-", pa.binary())))
    common = pc.and_(common, pc.invert(pc.equal(pc.binary_slice(values, -1), pa.scalar(b"C", pa.binary()))))
    target = ct.arrow_type

    def fast(subset: pa.Array) -> np.ndarray:
        return pc.cast(subset.cast(pa.string()), target).cast(pa.int64()).to_numpy(zero_copy_only=False)

    micros = _merge(ct, values, pc.fill_null(common, False).to_numpy(zero_copy_only=False), fast,
                    lambda raw: _timestamp_from_text(raw, with_zone), np.int64)
    return with_nulls_of(values, target, micros)


def _timestamp_from_text(raw: bytes, with_zone: bool) -> int:
    text = raw.decode("ascii")
    if text == "infinity":
        return INT64_MAX
    if text == "-infinity":
        return INT64_MIN
    match = _TIMESTAMP.fullmatch(text)
    if not match:
        raise Malformed("not an ISO timestamp")
    year, month, day, hour, minute, second, fraction, sign, zh, zm, zs, bc = match.groups()
    if (sign is not None) != with_zone:
        raise Malformed("time zone offset expected" if with_zone else "unexpected time zone offset")
    if int(hour) > 23 or int(minute) > 59 or int(second) > 59:
        raise Malformed("no such time of day")
    seconds = (_checked_days(year, month, day, bc) * 24 + int(hour)) * 3600 + int(minute) * 60 + int(second)
    if sign is not None:
        offset = int(zh) * 3600 + int(zm or 0) * 60 + int(zs or 0)
        seconds -= offset if sign == "+" else -offset
    micros = seconds * 1_000_000 + _fraction(fraction)
    # PostgreSQL's last 29 years (294247-01-10 .. 294276-12-31) do not fit int64 microseconds since
    # 1970: they clamp to the last finite value Arrow can hold (documented in docs/TYPES.md).
    return min(max(micros, INT64_MIN + 1), INT64_MAX - 1)


def timestamp_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """timestamp_send / timestamptz_send: int64 microseconds since 2000-01-01 (UTC for timestamptz)."""
    micros = big_endian(fixed_width(ct, values, 8), ">i8")
    finite = (micros != INT64_MAX) & (micros != INT64_MIN)
    too_late = finite & (micros >= INT64_MAX - EPOCH_SHIFT_US)  # clamp, as the text path does
    shifted = np.where(too_late, INT64_MAX - 1, micros + np.where(finite, EPOCH_SHIFT_US, 0))
    return with_nulls_of(values, ct.arrow_type, shifted)


# -- time / timetz -------------------------------------------------------------------------
def time_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """time_out: 'HH:MM:SS[.f...]' -> 'HH:MM:SS.ffffff' (six fraction digits, so text order is time order)."""
    strings = utf8(ct, values)
    check_regex(ct, values, strings, _TIME_TEXT, "a time of day")
    dotted = pc.if_else(pc.equal(pc.utf8_length(strings), 8), pc.binary_join_element_wise(strings, ".", ""),
                        strings)
    return pc.utf8_rpad(dotted, 15, "0")


def _digits(numbers: np.ndarray, width: int) -> np.ndarray:
    """(n, width) ASCII digits of non-negative numbers, zero-padded."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return ((numbers[:, None] // powers) % 10 + 48).astype(np.uint8)


def time_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """time_send: int64 microseconds since midnight (0 .. 24:00:00 inclusive)."""
    micros = big_endian(fixed_width(ct, values, 8), ">i8")
    bad = np.flatnonzero(valid_mask(values) & ((micros < 0) | (micros > USECS_PER_DAY)))
    if bad.size:
        raise fail(ct, values, int(bad[0]), "time of day out of range")
    micros = np.where(valid_mask(values), micros, 0)
    seconds, fraction = np.divmod(micros, 1_000_000)
    colon = np.full((len(micros), 1), ord(":"), np.uint8)
    rows = np.concatenate([_digits(seconds // 3600, 2), colon, _digits(seconds // 60 % 60, 2), colon,
                           _digits(seconds % 60, 2), np.full((len(micros), 1), ord("."), np.uint8),
                           _digits(fraction, 6)], axis=1)
    return strings_from_rows(rows, values)


def _timetz(local_micros: int, east_seconds: int) -> str:
    seconds, fraction = divmod(local_micros, 1_000_000)
    sign = "+" if east_seconds >= 0 else "-"
    zone_minutes, zone_seconds = divmod(abs(east_seconds), 60)
    text = (f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"
            f"{sign}{zone_minutes // 60:02d}:{zone_minutes % 60:02d}")
    return text + f":{zone_seconds:02d}" if zone_seconds else text


def timetz_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """timetz_out: 'HH:MM:SS[.f...]+HH[:MM[:SS]]' -> 'HH:MM:SS.ffffff+HH:MM' (':SS' only when not 0)."""
    def parse(raw: bytes) -> str:
        match = _TIMETZ.fullmatch(raw.decode("ascii"))
        if not match:
            raise Malformed("not a time with time zone")
        hour, minute, second, fraction, sign, zh, zm, zs = match.groups()
        micros = ((int(hour) * 60 + int(minute)) * 60 + int(second)) * 1_000_000 + _fraction(fraction)
        east = int(zh) * 3600 + int(zm or 0) * 60 + int(zs or 0)
        if micros > USECS_PER_DAY or int(minute) > 59 or int(second) > 59 or int(zm or 0) > 59 \
                or int(zs or 0) > 59:
            raise Malformed("time of day or offset out of range")
        return _timetz(micros, east if sign == "+" else -east)

    return per_value(ct, values, parse, lambda items: pa.array(items, pa.string()))


def timetz_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """timetz_send: int64 microseconds since midnight (local), int32 zone in seconds west of UTC."""
    def parse(raw: bytes) -> str:
        if len(raw) != 12:
            raise Malformed(f"expected 12 bytes, got {len(raw)}")
        micros, west = int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:], "big", signed=True)
        if not 0 <= micros <= USECS_PER_DAY or abs(west) >= 16 * 3600:
            raise Malformed("time of day or offset out of range")
        return _timetz(micros, -west)

    return per_value(ct, values, parse, lambda items: pa.array(items, pa.string()))


TEXT = {"date": date_text, "timestamp": timestamp_text, "timestamptz": timestamp_text,
        "time": time_text, "timetz": timetz_text}
_TIME_SCALAR = re.compile(_TIME_TEXT.encode())


def _time_from_text(raw: bytes) -> str:
    if not _TIME_SCALAR.fullmatch(raw):
        raise Malformed("not a time of day")
    return (raw.decode() + ("." if len(raw) == 8 else "")).ljust(15, "0")


def _time_from_binary(raw: bytes) -> str:
    micros = int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else -1
    if not 0 <= micros <= USECS_PER_DAY:
        raise Malformed("expected 8 bytes of microseconds within a day")
    seconds, fraction = divmod(micros, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"


SCALAR_TEXT = {"date": (lambda ct, raw: _date_from_text(raw), 64),
               "timestamp": (lambda ct, raw: _timestamp_from_text(raw, False), 64),
               "timestamptz": (lambda ct, raw: _timestamp_from_text(raw, True), 64),
               "time": (lambda ct, raw: _time_from_text(raw), 128)}
SCALAR_BINARY = {"time": (lambda ct, raw: _time_from_binary(raw), 64)}
BINARY = {"date": date_binary, "timestamp": timestamp_binary, "timestamptz": timestamp_binary,
          "time": time_binary, "timetz": timetz_binary}
