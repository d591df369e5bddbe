"""Delta tables through SQL text alone, for a Spark Connect session.

A Spark Connect client has no JVM, and Delta's Python ``DeltaTable`` sends Delta's own Connect plan
extensions, which a server answers only with Delta's Connect server plugin (not published for every
Delta release: docs/CONNECT.md). Every Delta operation cdc_apply needs has a SQL statement, so on a
Connect session :meth:`cdc_apply.delta.engine.ConnectTables.delta_table` returns a
:class:`SqlDeltaTable`: the part of ``DeltaTable``'s interface cdc_apply calls (``alias``, ``history``,
``delete``, ``update``, ``merge`` with its ``whenMatched...``/``whenNotMatched...`` clauses), each run
as one statement. Conditions and assignments are SQL text here; a ``Column`` is refused, since a
Connect ``Column`` cannot be turned back into SQL text. A MERGE's source DataFrame is registered as a
global temporary view for the statement (global: the MERGE may run in a cloned session other than the
one the DataFrame was built in) and dropped after it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Mapping

from cdc_apply.delta.names import quote_ident
from cdc_apply.errors import SetupError

if TYPE_CHECKING:
    from py4j.java_gateway import JVMView
    from pyspark.sql import SparkSession

# What Delta says (its error class, or the message of an older path) when there is no Delta table to describe.
# (DESCRIBE HISTORY of a path without one: DELTA_TABLE_ONLY_OPERATION; DESCRIBE DETAIL: DELTA_MISSING_DELTA_TABLE.)
_NO_TABLE = ("DELTA_MISSING_DELTA_TABLE", "DELTA_TABLE_ONLY_OPERATION", "DELTA_TABLE_NOT_FOUND",
             "TABLE_OR_VIEW_NOT_FOUND", "PATH_NOT_FOUND", "is not a Delta table", "doesn't exist")


def session_jvm(spark: SparkSession) -> JVMView:
    """py4j's view of a classic session's JVM (``spark._jvm``); a :class:`SetupError` where there is none."""
    jvm = spark._jvm
    if jvm is None:
        raise SetupError("the Spark session has no JVM to reach (a stopped or a Spark Connect session)")
    return jvm


def no_table(exc: Exception) -> bool:
    """Whether ``exc`` is Delta's (or Spark's) "there is no Delta table there"."""
    return any(marker in str(exc) for marker in _NO_TABLE)


def sql_exists(spark: SparkSession, ref) -> bool:
    """Whether ``ref`` is a Delta table: a path's ``DESCRIBE DETAIL`` says format ``delta``; a name is
    asked of the catalog."""
    if ref.path is None:
        return bool(spark.catalog.tableExists(ref.name))
    try:
        row = spark.sql(f"DESCRIBE DETAIL {ref.sql}").select("format").first()
    except Exception as exc:  # noqa: BLE001 - only "no table" is an answer; anything else is raised
        if no_table(exc):
            return False
        raise
    return row is not None and row[0] == "delta"


def _history_sql(ref, limit: int | None) -> str:
    return f"DESCRIBE HISTORY {ref.sql}" + (f" LIMIT {int(limit)}" if limit else "")


def sql_newest_version(spark: SparkSession, ref) -> int | None:
    """The table's newest version, ``DESCRIBE HISTORY``'s newest row (one small job over the newest commit
    files); None: no Delta table there."""
    try:
        row = spark.sql(_history_sql(ref, 1)).select("version").first()
    except Exception as exc:  # noqa: BLE001 - only "no table" is an answer; anything else is raised
        if no_table(exc):
            return None
        raise
    return None if row is None else int(row[0])


def sql_files_bytes(spark: SparkSession, ref) -> int | None:
    """The bytes of the table's current data files, ``DESCRIBE DETAIL``'s ``sizeInBytes``; None: no Delta
    table there."""
    try:
        row = spark.sql(f"DESCRIBE DETAIL {ref.sql}").select("format", "sizeInBytes").first()
    except Exception as exc:  # noqa: BLE001 - only "no table" is an answer
        if no_table(exc):
            return None
        raise
    if row is None or row[0] != "delta":
        return None
    return int(row[1])


def sql_commit_user_metadata(spark: SparkSession, ref, limit: int | None = None) -> list[tuple[int, str | None]]:
    """``(version, userMetadata)`` of the newest ``limit`` commits (all: None), newest first, by
    ``DESCRIBE HISTORY``."""
    rows = spark.sql(_history_sql(ref, limit)).select("version", "userMetadata").collect()
    return [(int(r[0]), r[1]) for r in rows]


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    raise SetupError(f"over Spark Connect a Delta {what} must be SQL text, not {type(value).__name__}")


def _assignments(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(column, _text(expr, "assignment")) for column, expr in values.items()]


class _Rows:
    """A statement's result rows, already fetched (the view it read is gone): ``collect`` and ``first``."""

    def __init__(self, rows: list) -> None:
        self._rows = rows

    def collect(self) -> list:
        return list(self._rows)

    def first(self):
        return self._rows[0] if self._rows else None


class SqlDeltaTable:
    """The part of ``delta.tables.DeltaTable`` cdc_apply uses, as SQL statements on ``spark``."""

    def __init__(self, spark: SparkSession, ref, alias: str | None = None) -> None:
        self.spark, self.ref, self._alias = spark, ref, alias

    def _target(self) -> str:
        return self.ref.sql + (f" AS {quote_ident(self._alias)}" if self._alias else "")

    def alias(self, name: str) -> "SqlDeltaTable":
        return SqlDeltaTable(self.spark, self.ref, name)

    def toDF(self):
        return self.ref.read(self.spark)

    def history(self, limit: int | None = None):
        """``DESCRIBE HISTORY`` (its newest ``limit`` commits), newest first."""
        return self.spark.sql(f"DESCRIBE HISTORY {self.ref.sql}" + (f" LIMIT {int(limit)}" if limit else ""))

    def delete(self, condition: str | None = None) -> None:
        where = "" if condition is None else f" WHERE {_text(condition, 'condition')}"
        self.spark.sql(f"DELETE FROM {self._target()}{where}").collect()

    def update(self, condition: str | None = None, set: Mapping[str, Any] | None = None) -> None:  # noqa: A002 - DeltaTable's name
        pairs = ", ".join(f"{c} = {e}" for c, e in _assignments(set or {}))
        where = "" if condition is None else f" WHERE {_text(condition, 'condition')}"
        self.spark.sql(f"UPDATE {self._target()} SET {pairs}{where}").collect()

    def merge(self, source, condition: str) -> "SqlMerge":
        """A MERGE of ``source`` into the table on ``condition``; the source is named ``s`` in the
        statement (cdc_apply's callers all alias it so)."""
        return SqlMerge(self, source, _text(condition, "merge condition"))


class SqlMerge:
    """``MERGE INTO`` built clause by clause, as ``DeltaMergeBuilder`` is."""

    SOURCE_ALIAS = "s"

    def __init__(self, table: SqlDeltaTable, source, condition: str) -> None:
        self.table, self.source, self.condition = table, source, condition
        self.clauses: list[str] = []

    @staticmethod
    def _when(kind: str, condition: str | None) -> str:
        return kind + ("" if condition is None else f" AND {_text(condition, 'clause condition')}")

    def whenMatchedDelete(self, condition: str | None = None) -> "SqlMerge":
        self.clauses.append(f"{self._when('WHEN MATCHED', condition)} THEN DELETE")
        return self

    def whenMatchedUpdate(self, condition: str | None = None, set: Mapping[str, Any] | None = None) -> "SqlMerge":  # noqa: A002
        pairs = ", ".join(f"{c} = {e}" for c, e in _assignments(set or {}))
        self.clauses.append(f"{self._when('WHEN MATCHED', condition)} THEN UPDATE SET {pairs}")
        return self

    def whenNotMatchedInsert(self, condition: str | None = None, values: Mapping[str, Any] | None = None) -> "SqlMerge":
        pairs = _assignments(values or {})
        self.clauses.append(f"{self._when('WHEN NOT MATCHED', condition)} THEN INSERT "
                            f"({', '.join(c for c, _ in pairs)}) VALUES ({', '.join(e for _, e in pairs)})")
        return self

    def whenNotMatchedBySourceUpdate(self, condition: str | None = None,
                                     set: Mapping[str, Any] | None = None) -> "SqlMerge":  # noqa: A002
        pairs = ", ".join(f"{c} = {e}" for c, e in _assignments(set or {}))
        self.clauses.append(f"{self._when('WHEN NOT MATCHED BY SOURCE', condition)} THEN UPDATE SET {pairs}")
        return self

    def statement(self, view: str) -> str:
        return (f"MERGE INTO {self.table._target()} USING global_temp.{quote_ident(view)} AS {self.SOURCE_ALIAS} "
                f"ON {self.condition} " + " ".join(self.clauses))

    def execute(self) -> _Rows:
        """Run the MERGE; its result row (``num_affected_rows``, ``num_updated_rows``, ``num_deleted_rows``,
        ``num_inserted_rows``) as ``collect()`` gives it."""
        view = f"cdc_apply_merge_{uuid.uuid4().hex}"
        self.source.createOrReplaceGlobalTempView(view)
        try:
            return _Rows(self.table.spark.sql(self.statement(view)).collect())
        finally:
            self.table.spark.catalog.dropGlobalTempView(view)
