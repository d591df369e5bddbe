"""``sql_literal``: Python values as Spark SQL text, for the statements a Spark Connect session runs (pure)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from cdc_apply.delta.names import sql_literal


@pytest.mark.parametrize("value, ddl, text", [
    (None, "bigint", "CAST(NULL AS bigint)"),
    (True, None, "TRUE"),
    (42, "int", "CAST(42 AS int)"),
    (1.5, "double", "CAST(1.5D AS double)"),
    (float("nan"), "double", "CAST('nan' AS double)"),
    (Decimal("12.340"), "decimal(10,3)", "CAST('12.340' AS decimal(10,3))"),
    (b"\x00\xff", "binary", "CAST(X'00ff' AS binary)"),
    (dt.date(2026, 11, 28), "date", "CAST('2026-11-28' AS date)"),
    (dt.datetime(2026, 11, 28, 19, 5, tzinfo=dt.timezone.utc), "timestamp",
     "CAST('2026-11-28T19:05:00+00:00' AS timestamp)"),
    (dt.datetime(2026, 11, 28, 19, 5), "timestamp_ntz", "CAST('2026-11-28T19:05:00' AS timestamp_ntz)"),
])
def test_a_value_becomes_the_sql_literal_that_casts_to_it(value, ddl, text):
    assert sql_literal(value, ddl) == text


def test_a_string_literal_escapes_quotes_and_backslashes():
    assert sql_literal("it's \\ here") == "'it\\'s \\\\ here'"


def test_a_value_without_a_literal_form_is_a_type_error():
    with pytest.raises(TypeError, match="no SQL literal for a list"):
        sql_literal([1, 2], "array<int>")
