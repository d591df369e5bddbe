"""Masked values, in Spark SQL text for the projection and in Python for the rest (column defaults, the
reference applier): the two must agree, so they are spelled here side by side.

``"sha256"``: the lowercase hex SHA-256 of the salt's UTF-8 bytes followed by the value's text (as Spark
casts it to STRING) in UTF-8 — the same value gives the same hash in every batch, so joins on it work.
``"redact"``: the text ``REDACTED``. NULL stays NULL under both (a NULL says nothing to hide).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from decimal import Decimal

from cdc_apply.config.columns import REDACTED, SHA256


def mask_sql(kind: str, salt: str, expr: str) -> str:
    """SQL text masking the STRING expression ``expr``. The salt enters as hex bytes: no quoting to get
    wrong, and not its clear text in a query plan."""
    if kind == SHA256:
        return f"sha2(concat(unhex('{salt.encode().hex()}'), CAST({expr} AS BINARY)), 256)"
    return f"CASE WHEN ({expr}) IS NULL THEN CAST(NULL AS STRING) ELSE '{REDACTED}' END"


def spark_text(value: object) -> str:
    """A Python value's text as Spark's CAST(... AS STRING) writes it, for the types where the two are
    known to agree (text, integers, booleans, decimals, dates, timestamps without a fraction)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dt.datetime, dt.date, Decimal, int)):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def mask_value(kind: str, salt: str, value: object) -> str | None:
    """``value`` masked as :func:`mask_sql` masks it in Spark."""
    if value is None:
        return None
    if kind == SHA256:
        return hashlib.sha256(salt.encode() + spark_text(value).encode()).hexdigest()
    return REDACTED


__all__ = ["mask_sql", "mask_value", "spark_text"]
