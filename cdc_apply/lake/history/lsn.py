"""LSNs for people: PostgreSQL's ``X/Y`` text next to the BIGINT every cdc_apply table holds.

Silver's ``_cdc_commit_lsn``, the history tables' ``_cdc_valid_from_lsn`` / ``_cdc_valid_to_lsn`` and
every LSN column of the bookkeeping tables are BIGINT (they sort and compare as numbers); commit
``userMetadata`` carries both forms (``last_commit_lsn`` as text, ``last_commit_lsn_bigint``).
:func:`register_lsn_functions` gives SQL the two conversions::

    SELECT cdc_lsn_text(_cdc_commit_lsn), * FROM silver WHERE _cdc_commit_lsn >= cdc_lsn('16/B374D848')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_apply.pgoutput.messages import format_lsn, parse_lsn

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The same conversions as SQL expressions over a column or literal ``{x}`` (for views, or where no
# function can be registered). hex() of a BIGINT is upper-case without leading zeros, as PostgreSQL prints.
LSN_TEXT_SQL = "concat(hex(shiftright({x}, 32)), '/', hex({x} & 4294967295))"
LSN_VALUE_SQL = ("CAST(conv(split_part({x}, '/', 1), 16, 10) AS BIGINT) * 4294967296 "
                 "+ CAST(conv(split_part({x}, '/', 2), 16, 10) AS BIGINT)")


def lsn_text(lsn: int | None) -> str | None:
    """``0x16B374D848`` -> ``'16/B374D848'`` (None stays None)."""
    return None if lsn is None else format_lsn(int(lsn))


def lsn_value(lsn: int | str) -> int:
    """An LSN given as a number or as PostgreSQL's ``X/Y`` text, as the BIGINT the tables hold."""
    if isinstance(lsn, bool):
        raise ValueError(f"not an LSN: {lsn!r}")
    if isinstance(lsn, int):
        if lsn < 0:
            raise ValueError(f"not an LSN: {lsn!r}")
        return lsn
    text = str(lsn).strip()
    if text.isdigit():
        return int(text)
    return parse_lsn(text)


def register_lsn_functions(spark: SparkSession, schema: str | None = None) -> None:
    """SQL functions ``cdc_lsn_text(BIGINT) -> STRING`` and ``cdc_lsn(STRING) -> BIGINT``.

    Temporary (this session) by default; with ``schema`` (e.g. ``"main.cdc"``) permanent functions in it,
    where the catalog keeps SQL functions (Unity Catalog, a Hive metastore).
    """
    kind, prefix = ("TEMPORARY FUNCTION", "") if schema is None else ("FUNCTION", schema + ".")
    spark.sql(f"CREATE OR REPLACE {kind} {prefix}cdc_lsn_text(lsn BIGINT) RETURNS STRING "
              f"RETURN {LSN_TEXT_SQL.format(x='lsn')}")
    spark.sql(f"CREATE OR REPLACE {kind} {prefix}cdc_lsn(lsn_text STRING) RETURNS BIGINT "
              f"RETURN {LSN_VALUE_SQL.format(x='lsn_text')}")


__all__ = ["LSN_TEXT_SQL", "LSN_VALUE_SQL", "lsn_text", "lsn_value", "register_lsn_functions"]
