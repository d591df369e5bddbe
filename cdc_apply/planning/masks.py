"""Masked values, in Spark SQL text for the projection and in Python for the rest (column defaults, the
reference applier): the two must agree, so they are spelled here side by side.

``"sha256"``: the lowercase hex SHA-256 of the salt's UTF-8 bytes followed by the value's text (as Spark
casts it to STRING, under the session time zone for timestamps) in UTF-8 — the same value gives the same
hash in every batch, so joins on it work.
``"redact"``: the text ``REDACTED``. NULL stays NULL under both (a NULL says nothing to hide).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from decimal import Decimal

from cdc_apply.config.columns import REDACTED, SHA256, Mask


def mask_sql(kind: Mask, salt: str, expr: str) -> str:
    """SQL text masking the STRING expression ``expr``. The salt enters as hex bytes: no quoting to get
    wrong, and not its clear text in a query plan."""
    if kind == SHA256:
        return f"sha2(concat(unhex('{salt.encode().hex()}'), CAST({expr} AS BINARY)), 256)"
    return f"CASE WHEN ({expr}) IS NULL THEN CAST(NULL AS STRING) ELSE '{REDACTED}' END"


def spark_text(value: object) -> str:
    """A Python value's text as Spark's ``CAST(... AS STRING)`` writes it under the job's session time zone
    (``spark.sql.session.timeZone = "UTC"``, the job's default): timestamps in UTC without a zone and
    with the fraction's trailing zeros cut, doubles as Java prints them, a struct (an interval) as
    ``{v1, v2, ...}``. Bytes are not text: see :func:`spark_bytes`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        fraction = ("." + f"{value.microsecond:06d}".rstrip("0")) if value.microsecond else ""
        return f"{spark_text(value.date())} {value.hour:02d}:{value.minute:02d}:{value.second:02d}{fraction}"
    if isinstance(value, dt.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, dict):
        return "{" + ", ".join("null" if v is None else spark_text(v) for v in value.values()) + "}"
    return str(value)


def spark_bytes(value: object) -> bytes:
    """The bytes the projection's hash reads for ``value`` (``CAST(CAST(v AS STRING) AS BINARY)``): a binary
    value's own bytes, which the two casts leave as they are; any other value's text in UTF-8."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return spark_text(value).encode()


def _java_double(value: float) -> str:
    """Java's ``Double.toString`` layout of Python's shortest digits: plain from 1e-3 to below 1e7 with at
    least one digit after the point, else ``d.dddE<exponent>``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)  # a finite value's ("n", "N", "F" are NaN's and infinity's, returned above)
    text = "".join(map(str, digits))
    point = len(text) + exponent          # digits before the decimal point
    minus = "-" if sign else ""
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{text}"
        whole, fraction = (text + "0" * max(0, point - len(text)))[:point], text[point:]
        return f"{minus}{whole}.{fraction or '0'}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{point - 1}"


def mask_value(kind: Mask, salt: str, value: object) -> str | None:
    """``value`` masked as :func:`mask_sql` masks it in Spark."""
    if value is None:
        return None
    if kind == SHA256:
        return hashlib.sha256(salt.encode() + spark_bytes(value)).hexdigest()
    return REDACTED


__all__ = ["mask_sql", "mask_value", "spark_bytes", "spark_text"]
