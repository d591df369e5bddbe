"""Delta DDL in SQL text: creating a table, its properties, and the session key a commit's metadata rides on.

Every identifier and literal in the text is quoted (:mod:`cdc_apply.delta.names`): column names and
comments come from the source database.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable, Sequence

from cdc_apply.config import Config
from cdc_apply.config.choices import Readers
from cdc_apply.delta.names import quote_ident, quote_literal
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import SchemaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables


def column_list(columns: Iterable[tuple[str, str]]) -> str:
    """``(name, type)`` pairs as the column list of a CREATE TABLE or an ADD COLUMNS, each name quoted."""
    return ", ".join(f"{quote_ident(name)} {ddl}" for name, ddl in columns)


def property_list(properties: dict[str, str]) -> str:
    """Table properties as ``'key' = 'value'`` pairs, both quoted as literals."""
    return ", ".join(f"{quote_literal(k)} = {quote_literal(str(v))}" for k, v in properties.items())


def create_statement(ref: TableRef, columns: Sequence[tuple[str, str]], properties: dict[str, str],
                     comment: str | None = None, replace: bool = False) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` (or ``REPLACE TABLE``) text for the columns, properties and comment."""
    verb = "REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
    text = f"{verb} {ref.sql} ({column_list(columns)}) USING delta"
    if comment:
        text += f" COMMENT {quote_literal(comment)}"
    if properties:
        text += f" TBLPROPERTIES ({property_list(properties)})"
    return text


def create_table(tables: SparkTables, ref: TableRef, columns: Sequence[tuple[str, str]], properties: dict[str, str],
                 comment: str | None = None, replace: bool = False) -> bool:
    """Run :func:`create_statement`; a creation killed before its first commit is cleared first
    (:mod:`cdc_apply.delta.table_create`). True when this call made the table (a replaced one included);
    False when it was there, or another process made it meanwhile."""
    text = create_statement(ref, columns, properties, comment, replace)
    if replace:
        tables.spark.sql(text)
        return True
    return tables.ensure_table(ref, lambda: tables.spark.sql(text))


# What Delta cannot hold in a column name without column mapping (its "invalid characters" check).
PLAIN_NAME_FORBIDDEN = " ,;{}()\n\t="


def reader_properties(config: Config) -> dict[str, str]:
    """The reader features a silver or history table is created with, per ``silver.readers``.

    ``"spark"``: column mapping (renames and drops are metadata commits), type widening (int to bigint
    in place) and deletion vectors (``silver.deletion_vectors``). ``"delta-rs"``: none of them, which
    delta-rs and polars refuse; schema changes then rewrite the table
    (:mod:`cdc_apply.lake.silver.schema_changes`).
    """
    if config.silver.readers == Readers.DELTA_RS:
        # Explicitly off: a session may turn them on for new tables by default.
        return {"delta.enableDeletionVectors": "false"}
    return {"delta.columnMapping.mode": "name", "delta.enableTypeWidening": "true",
            "delta.enableDeletionVectors": str(config.silver.deletion_vectors).lower()}


def silver_properties(config: Config) -> dict[str, str]:
    """The table properties every silver table is created with."""
    return {"delta.enableChangeDataFeed": str(config.silver.change_data_feed).lower(), **reader_properties(config)}


def is_mapped(properties: dict[str, str]) -> bool:
    """Whether a table with these properties has column mapping: renames and drops are then metadata
    commits; without it they rewrite the table."""
    return properties.get("delta.columnMapping.mode", "none").lower() != "none"


def check_plain_names(columns: Iterable[str], table: str, mapped: bool, source: str | None = None) -> None:
    """For a table without column mapping (``mapped`` false), a :class:`SchemaError` for the first column name
    Delta cannot hold without it: never a silent rename, which readers would not find by the source's name."""
    if mapped:
        return
    for name in columns:
        bad = sorted({c for c in name if c in PLAIN_NAME_FORBIDDEN})
        if bad:
            raise SchemaError(f"column {name!r} of {table} holds {', '.join(repr(c) for c in bad)}, which a Delta "
                              "table without column mapping cannot name (silver.readers = \"delta-rs\" creates "
                              "tables without it): rename the column in PostgreSQL, exclude it "
                              "(silver.exclude_columns) or set silver.readers = \"spark\" for new tables",
                              table=table, source=source, key="silver.readers")


LOG = logging.getLogger("cdc_apply.apply")
# Table properties that give a table a reader feature delta-rs (deltalake) and polars refuse.
READER_FEATURES = {"delta.columnMapping.mode": "columnMapping", "delta.enableTypeWidening": "typeWidening",
                   "delta.enableDeletionVectors": "deletionVectors"}


def warn_reader_features(config: Config, ref: TableRef, properties: dict[str, str], table: str) -> None:
    """Under ``silver.readers = "delta-rs"``, a warning naming an existing table that was created with reader
    features: the setting applies to the tables it creates; this one keeps working, through Spark."""
    if config.silver.readers != Readers.DELTA_RS:
        return
    found = [feature for key, feature in READER_FEATURES.items()
             if properties.get(key, "false").lower() not in ("false", "none")]
    if found:
        LOG.warning("%s (%s) was created with the reader features %s, which delta-rs and polars cannot open; "
                    "silver.readers = \"delta-rs\" applies to the tables it creates: this one keeps its features "
                    "and is written as before", ref, table, ", ".join(found))


def set_properties(spark: SparkSession, ref: TableRef, properties: dict[str, str]) -> None:
    """``ALTER TABLE … SET TBLPROPERTIES`` (one commit)."""
    spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({property_list(properties)})")


def table_properties(spark: SparkSession, ref: TableRef) -> dict[str, str]:
    """The table's properties as ``SHOW TBLPROPERTIES`` lists them."""
    return {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql}").collect()}


# The session setting whose value Delta writes into the next commit's ``userMetadata``: how a SQL statement
# (ALTER, UPDATE, MERGE through the DeltaTable API) tags its commit, where a writer has no option for it.
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
