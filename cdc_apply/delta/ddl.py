"""Delta DDL in SQL text: creating a table, its properties, and the session key a commit's metadata rides on.

Every identifier and literal in the text is quoted (:mod:`cdc_apply.delta.names`): column names and
comments come from the source database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

from cdc_apply.config import Config
from cdc_apply.delta.names import quote_ident, quote_literal
from cdc_apply.delta.refs import TableRef

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


def silver_properties(config: Config) -> dict[str, str]:
    """The table properties every silver table is created with."""
    props = {
        "delta.columnMapping.mode": "name",
        "delta.enableChangeDataFeed": str(config.silver.change_data_feed).lower(),
        "delta.enableDeletionVectors": str(config.silver.deletion_vectors).lower(),
        "delta.enableTypeWidening": "true",
    }
    return props


def set_properties(spark: SparkSession, ref: TableRef, properties: dict[str, str]) -> None:
    """``ALTER TABLE … SET TBLPROPERTIES`` (one commit)."""
    spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({property_list(properties)})")


def table_properties(spark: SparkSession, ref: TableRef) -> dict[str, str]:
    """The table's properties as ``SHOW TBLPROPERTIES`` lists them."""
    return {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql}").collect()}


# The session setting whose value Delta writes into the next commit's ``userMetadata``: how a SQL statement
# (ALTER, UPDATE, MERGE through the DeltaTable API) tags its commit, where a writer has no option for it.
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
