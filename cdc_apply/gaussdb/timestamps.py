"""GaussDB timestamps to pgoutput's microseconds since 2000-01-01 UTC, and back.

Commit timestamps (the ``T`` parts of Begin and Commit) are *text*: openGauss
writes them with ``timestamptz_to_str``, which always uses the ISO style —
``2024-05-20 10:00:00.123456+08``: fractional seconds with trailing zeros
trimmed (absent when zero), the UTC offset as ``+HH``, ``+HH:MM`` or
``+HH:MM:SS``, `` BC`` after it for years before 1 AD, and ``infinity`` /
``-infinity``. A missing offset is read as UTC. Dates are proleptic Gregorian
(PostgreSQL's calendar), so the arithmetic here is plain integers, not
:mod:`datetime` (which stops at year 1 and 9999).

The heartbeat's timestamp is an int64 counted from 1970-01-01 whose unit the
specification does not state; :func:`heartbeat_micros` takes it explicitly or
infers it from the magnitude.
"""

from __future__ import annotations

import re

from cdc_apply.pgoutput.gregorian import civil_from_days, days_from_civil
from cdc_apply.pgoutput.messages import PG_EPOCH_UNIX_MICROS

INFINITY = 2**63 - 1  # PostgreSQL's DT_NOEND
NEG_INFINITY = -(2**63)  # DT_NOBEGIN
_DAY_MICROS = 86_400_000_000
_PG_EPOCH_DAYS = days_from_civil(2000, 1, 1)

_ISO = re.compile(
    r"(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
    r"(?:([+-])(\d\d)(?::(\d\d)(?::(\d\d))?)?)?( BC)?"
)
HEARTBEAT_UNITS = ("s", "ms", "us", "auto")


def _days_in_month(y: int, m: int) -> int:
    if m == 2:
        return 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28
    return 30 if m in (4, 6, 9, 11) else 31


def parse_timestamp(text: str) -> int:
    """Microseconds since 2000-01-01 UTC of a timestamp as ``timestamptz_to_str`` writes it.

    Raises ``ValueError`` for anything else (including ``(timestamp out of range)``).
    """
    if text == "infinity":
        return INFINITY
    if text == "-infinity":
        return NEG_INFINITY
    match = _ISO.fullmatch(text)
    if match is None:
        raise ValueError(f"not an ISO timestamp: {text!r}")
    year, month, day, hh, mi, ss = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
    frac, sign, oh, om, osec, bc = match.group(7, 8, 9, 10, 11, 12)
    if bc:
        if year == 0:
            raise ValueError(f"year 0 BC does not exist: {text!r}")
        year = 1 - year  # 1 BC is astronomical year 0
    if not 1 <= month <= 12 or not 1 <= day <= _days_in_month(year, month):
        raise ValueError(f"no such date: {text!r}")
    if hh > 23 or mi > 59 or ss > 59:
        raise ValueError(f"no such time of day: {text!r}")
    offset = 0
    if sign:
        oh_, om_, os_ = int(oh), int(om or 0), int(osec or 0)
        if oh_ > 23 or om_ > 59 or os_ > 59:
            raise ValueError(f"no such UTC offset: {text!r}")
        offset = (oh_ * 3600 + om_ * 60 + os_) * (1 if sign == "+" else -1)
    days = days_from_civil(year, month, day) - _PG_EPOCH_DAYS
    seconds = ((days * 24 + hh) * 60 + mi) * 60 + ss - offset
    micros = int((frac or "").ljust(6, "0")) if frac else 0
    return seconds * 1_000_000 + micros


def format_timestamp(micros: int, utc_offset_seconds: int = 0) -> str:
    """The text ``timestamptz_to_str`` would write for ``micros`` in a zone ``utc_offset_seconds`` east of UTC."""
    if micros == INFINITY:
        return "infinity"
    if micros == NEG_INFINITY:
        return "-infinity"
    local = micros + utc_offset_seconds * 1_000_000
    days, rest = divmod(local, _DAY_MICROS)
    year, month, day = civil_from_days(days + _PG_EPOCH_DAYS)
    secs, frac = divmod(rest, 1_000_000)
    hh, rem = divmod(secs, 3600)
    mi, ss = divmod(rem, 60)
    text = f"{year if year > 0 else 1 - year:04d}-{month:02d}-{day:02d} {hh:02d}:{mi:02d}:{ss:02d}"
    if frac:
        text += "." + f"{frac:06d}".rstrip("0")
    off = abs(utc_offset_seconds)
    oh, orem = divmod(off, 3600)
    om, osec = divmod(orem, 60)
    text += f"{'-' if utc_offset_seconds < 0 else '+'}{oh:02d}"
    if om or osec:
        text += f":{om:02d}"
    if osec:
        text += f":{osec:02d}"
    return text + (" BC" if year <= 0 else "")


def heartbeat_micros(raw: int, unit: str = "auto") -> int:
    """A heartbeat timestamp (counted from 1970-01-01) as microseconds since 2000-01-01 UTC.

    ``unit`` is ``"s"``, ``"ms"``, ``"us"`` or ``"auto"``: the specification says
    only "starting from January 1, 1970", so ``auto`` reads the magnitude — below
    1e11 seconds, below 1e14 milliseconds, else microseconds (unambiguous for
    dates between 1973 and 5138).
    """
    if unit not in HEARTBEAT_UNITS:
        raise ValueError(f"heartbeat unit must be one of {HEARTBEAT_UNITS}, not {unit!r}")
    if unit == "auto":
        size = abs(raw)
        unit = "s" if size < 10**11 else "ms" if size < 10**14 else "us"
    scale = {"s": 1_000_000, "ms": 1_000, "us": 1}[unit]
    return raw * scale - PG_EPOCH_UNIX_MICROS
