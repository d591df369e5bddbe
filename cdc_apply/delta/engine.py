"""The seam between the job and Delta: one object per engine, chosen once at each entry point and handed down.

Delta tables are reached three ways: a classic Spark session (Delta's JVM classes through py4j: its log,
``DeltaTable``, commits with an app transaction), a Spark Connect session (no JVM on the client: SQL
statements only, :mod:`cdc_apply.delta.sql_table`) and delta-rs (no JVM at all: the lander and the
no-Spark reads, :mod:`cdc_apply.delta.rs_tables`). :class:`Tables` is what all three answer; the Spark
engines add what a Spark job needs (:class:`SparkTables`: DataFrames, MERGEs, a column in a condition).

An entry point (``apply``, ``land``, ``status``, ``verify``, ``as-of``, ``optimize``) picks the engine from
its session with :func:`spark_tables` (or builds :class:`~cdc_apply.delta.rs_tables.RsTables`) and hands
the object down; nothing below it asks which engine it runs on. A table's own session (its settings and
commit metadata kept apart) is the same engine on another session: :meth:`SparkTables.on`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Protocol, TypeVar

from cdc_apply.delta import log as jvm_log
from cdc_apply.delta import sql_table
from cdc_apply.delta.commit import append_arrow
from cdc_apply.delta.log_files import FileStore, store_for
from cdc_apply.delta.names import sql_literal
from cdc_apply.delta.refs import TableRef
from cdc_apply.delta.table_create import ensure_path_table, ensure_sql_table
from cdc_apply.spark import connect as sessions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

EngineName = Literal["classic", "connect", "delta-rs"]
T = TypeVar("T")
U = TypeVar("U")


class Tables(Protocol):
    """What every engine answers of a Delta table (by path or catalog name)."""

    engine: EngineName

    def exists(self, ref: TableRef) -> bool:
        """Whether a Delta table is there."""
        ...

    def version(self, ref: TableRef) -> int | None:
        """The newest version this process knows (its own commits included); None: no table."""
        ...

    def newest_version(self, ref: TableRef) -> int | None:
        """The newest version as the log says now; None: no table."""
        ...

    def commit_user_metadata(self, ref: TableRef, limit: int | None = None) -> list[tuple[int, str | None]]:
        """``(version, userMetadata)`` of the newest ``limit`` commits (all: None), newest first."""
        ...

    def recorded_txn_version(self, ref: TableRef, app_id: str) -> int | None:
        """The newest ``txnVersion`` recorded for ``app_id``; None: none, or the engine cannot say."""
        ...


class SparkTables(ABC):
    """:class:`Tables` on a Spark session, with what a Spark job does to a table."""

    engine: EngineName

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def on(self, session: SparkSession) -> SparkTables:
        """The same engine on ``session`` (a table's own: its settings and commit metadata kept apart)."""
        return type(self)(session)

    # -- reading ------------------------------------------------------------------------------------
    def read(self, ref: TableRef) -> DataFrame:
        """The table's rows, as a DataFrame of this session."""
        return ref.read(self.spark)

    @abstractmethod
    def exists(self, ref: TableRef) -> bool: ...

    @abstractmethod
    def delta_table(self, ref: TableRef) -> Any:
        """Delta's ``DeltaTable`` (or the same calls as SQL statements, over Spark Connect)."""

    @abstractmethod
    def version(self, ref: TableRef) -> int | None: ...

    @abstractmethod
    def newest_version(self, ref: TableRef) -> int | None: ...

    @abstractmethod
    def commit_user_metadata(self, ref: TableRef, limit: int | None = None) -> list[tuple[int, str | None]]: ...

    @abstractmethod
    def files_bytes(self, ref: TableRef) -> int | None:
        """The bytes of the table's current data files; None: not known."""

    # The log's facts only a JVM answers without a query: None (not known) elsewhere, and the caller asks
    # the table instead (see cdc_apply.delta.log for each).
    def delta_log(self, ref: TableRef) -> Any:
        """Delta's ``DeltaLog`` of the table (an opaque handle for :mod:`cdc_apply.delta.log`), or None."""
        return None

    def recorded_txn_version(self, ref: TableRef, app_id: str) -> int | None:
        return None

    def newest_added_max(self, ref: TableRef, column: str) -> int | None:
        """See :func:`cdc_apply.delta.log.newest_added_max`; None: only a query can tell."""
        return None

    def file_column_names(self, ref: TableRef) -> dict[str, str] | None:
        """Each top-level column's name in the table's Parquet files; None: not known."""
        return None

    def files_with_stats(self, ref: TableRef, version: int) -> DataFrame | None:
        """The live files at ``version`` with their statistics, one row a file; None: ask the table."""
        return None

    def file_store(self, location: str) -> tuple[FileStore, str]:
        """The files under ``location`` (a table's folder) and how the store names it: a local folder only,
        without a JVM (:func:`cdc_apply.delta.log_files.store_for`)."""
        return store_for(location, None)

    # -- writing ------------------------------------------------------------------------------------
    def append_arrow(self, ref: TableRef, table: pa.Table, user_metadata: str | None = None) -> bool:
        """Append ``table`` as one Parquet file pyarrow writes and one commit, without a Spark job; False
        (nothing written) where that may not be done, and the caller appends through Spark."""
        return False

    @abstractmethod
    def ensure_table(self, ref: TableRef, create: Callable[[], object], what: str | None = None) -> bool:
        """Run ``create`` (idempotent) until ``ref`` is a Delta table; True when this call created it."""

    # -- what a statement is made of --------------------------------------------------------------
    @abstractmethod
    def column(self, name: str) -> Column | str:
        """A column by name in a MERGE's condition or assignment: a ``Column``, or SQL text where the
        statement is SQL text (Spark Connect)."""

    def between(self, condition: str, column: str, bounds: tuple, ddl: str) -> Column | str:
        """``condition`` and ``column`` between the two ``bounds`` (as ``ddl``) where the bounds have no SQL
        literal (:func:`cdc_apply.delta.names.sql_literal`): a ``Column`` holds them; SQL text cannot, and
        the condition stays as it is (no file skipping)."""
        return condition

    @abstractmethod
    def in_form(self, text: Callable[[], T], column: Callable[[], U]) -> T | U:
        """A statement's part (a condition, assignments) in the form the engine's statements take:
        ``column()``, built of ``Column`` objects (any value fits one), or ``text()``, SQL text (Spark
        Connect's statements: a Connect ``Column`` cannot be turned back into text)."""

    @abstractmethod
    def value(self, value: Any, ddl: str) -> Column | str:
        """``value`` cast to ``ddl`` in an UPDATE's assignment: a ``Column``, or SQL text where the statement
        is SQL text (a value SQL text cannot hold here, an array, stays a Column: the statement refuses it
        with a named error)."""

    @abstractmethod
    def session_of(self, df: DataFrame) -> SparkSession:
        """The session a write of ``df`` runs on: this one, or ``df``'s own where a statement must see the
        DataFrame's temporary view (Spark Connect)."""

    # -- the session's facts ----------------------------------------------------------------------
    @abstractmethod
    def child(self, reset: tuple[str, ...] = ()) -> AbstractContextManager[SparkTables]:
        """The engine on a session of its own for the block: settings and commit metadata that must not reach
        this session's (each silver table's), ``reset`` unset in a session handed out again."""

    @abstractmethod
    def default_parallelism(self) -> int:
        """The task slots a stage should at least use."""

    def partition_count(self, df: DataFrame) -> int | None:
        """How many partitions ``df`` has; None where the engine cannot say."""
        return None

    def planned_bytes(self, df: DataFrame) -> int | None:
        """The bytes Spark's optimised plan says ``df`` reads; None where the engine cannot say."""
        return None

    @property
    @abstractmethod
    def streams_in_driver(self) -> bool:
        """Whether a streaming query's ``foreachBatch`` runs in this process (classic), so the job may be a
        streaming query; else the job loops over micro-batches itself (Spark Connect)."""


class ClassicTables(SparkTables):
    """A classic session: Delta's JVM classes through py4j."""

    engine: EngineName = "classic"

    def exists(self, ref: TableRef) -> bool:
        from delta.tables import DeltaTable

        if ref.path is not None:
            return bool(DeltaTable.isDeltaTable(self.spark, ref.path))
        return bool(self.spark.catalog.tableExists(ref.catalog_name))

    def delta_table(self, ref: TableRef) -> Any:
        from delta.tables import DeltaTable

        if ref.path:
            return DeltaTable.forPath(self.spark, ref.path)
        return DeltaTable.forName(self.spark, ref.catalog_name)

    def version(self, ref: TableRef) -> int | None:
        found = jvm_log.cached_version(self.spark, ref)
        if found is not None or not self.exists(ref):
            return found
        return int(self.delta_table(ref).history(1).select("version").first()[0])

    def newest_version(self, ref: TableRef) -> int | None:
        found = jvm_log.updated_version(self.spark, ref)
        return found if found is not None else self.version(ref)

    def commit_user_metadata(self, ref: TableRef, limit: int | None = None) -> list[tuple[int, str | None]]:
        table = self.delta_table(ref)
        history = table.history(limit) if limit else table.history()
        return [(int(r.version), r.userMetadata) for r in history.select("version", "userMetadata").collect()]

    def files_bytes(self, ref: TableRef) -> int | None:
        return jvm_log.files_bytes(self.spark, ref)

    def delta_log(self, ref: TableRef) -> Any:
        return jvm_log.delta_log(self.spark, ref)

    def recorded_txn_version(self, ref: TableRef, app_id: str) -> int | None:
        return jvm_log.recorded_txn_version(self.spark, ref, app_id)

    def newest_added_max(self, ref: TableRef, column: str) -> int | None:
        return jvm_log.newest_added_max(self.spark, ref, column)

    def file_column_names(self, ref: TableRef) -> dict[str, str] | None:
        return jvm_log.file_column_names(self.spark, ref)

    def file_store(self, location: str) -> tuple[FileStore, str]:
        return store_for(location, self.spark)   # any Hadoop file system, through the JVM

    def files_with_stats(self, ref: TableRef, version: int) -> DataFrame | None:
        return jvm_log.files_with_stats(self.spark, ref, version)

    def append_arrow(self, ref: TableRef, table: pa.Table, user_metadata: str | None = None) -> bool:
        return append_arrow(self.spark, ref, table, user_metadata)

    def ensure_table(self, ref: TableRef, create: Callable[[], object], what: str | None = None) -> bool:
        if ref.path is None:   # a catalog's tables are its own to create
            return ensure_sql_table(self.exists, ref, create, what)
        return ensure_path_table(self.spark, ref, create, what)

    def column(self, name: str) -> Column | str:
        from pyspark.sql import functions as F

        return F.col(name)

    def between(self, condition: str, column: str, bounds: tuple, ddl: str) -> Column | str:
        from pyspark.sql import functions as F

        return F.expr(condition) & F.col(column).between(F.lit(bounds[0]).cast(ddl), F.lit(bounds[1]).cast(ddl))

    def in_form(self, text: Callable[[], T], column: Callable[[], U]) -> T | U:
        return column()

    def value(self, value: Any, ddl: str) -> Column | str:
        from pyspark.sql import functions as F

        return F.lit(value).cast(ddl)

    def session_of(self, df: DataFrame) -> SparkSession:
        return self.spark

    @contextmanager
    def child(self, reset: tuple[str, ...] = ()) -> Iterator[SparkTables]:
        yield self.on(self.spark.newSession())   # a new session starts without the settings to reset

    def default_parallelism(self) -> int:
        return int(self.spark.sparkContext.defaultParallelism)

    def partition_count(self, df: DataFrame) -> int | None:
        return int(df.rdd.getNumPartitions())

    def planned_bytes(self, df: DataFrame) -> int | None:
        try:
            return int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
        except Exception:  # noqa: BLE001 - not known: the caller measures instead
            return None

    @property
    def streams_in_driver(self) -> bool:
        return True


class ConnectTables(SparkTables):
    """A Spark Connect session: SQL statements only (``DESCRIBE HISTORY``/``DETAIL``, MERGE as text)."""

    engine: EngineName = "connect"

    def exists(self, ref: TableRef) -> bool:
        return sql_table.sql_exists(self.spark, ref)

    def delta_table(self, ref: TableRef) -> Any:
        return sql_table.SqlDeltaTable(self.spark, ref)

    def version(self, ref: TableRef) -> int | None:
        return sql_table.sql_newest_version(self.spark, ref)

    def newest_version(self, ref: TableRef) -> int | None:
        return sql_table.sql_newest_version(self.spark, ref)

    def commit_user_metadata(self, ref: TableRef, limit: int | None = None) -> list[tuple[int, str | None]]:
        return sql_table.sql_commit_user_metadata(self.spark, ref, limit)

    def files_bytes(self, ref: TableRef) -> int | None:
        return sql_table.sql_files_bytes(self.spark, ref)

    def ensure_table(self, ref: TableRef, create: Callable[[], object], what: str | None = None) -> bool:
        # The client cannot list the server's storage: a path is asked through SQL (DESCRIBE DETAIL) and a
        # killed creation's empty _delta_log/ is not cleared (docs/CONNECT.md).
        return ensure_sql_table(self.exists, ref, create, what)

    def column(self, name: str) -> Column | str:
        return name

    def in_form(self, text: Callable[[], T], column: Callable[[], U]) -> T | U:
        return text()

    def value(self, value: Any, ddl: str) -> Column | str:
        try:
            return sql_literal(value, ddl)
        except TypeError:
            from pyspark.sql import functions as F

            return F.lit(value).cast(ddl)

    def session_of(self, df: DataFrame) -> SparkSession:
        return df.sparkSession

    @contextmanager
    def child(self, reset: tuple[str, ...] = ()) -> Iterator[SparkTables]:
        with sessions.connect_clone(self.spark, reset) as session:
            yield self.on(session)

    def default_parallelism(self) -> int:
        return sessions.connect_parallelism(self.spark)

    @property
    def streams_in_driver(self) -> bool:
        return False   # foreachBatch would run in the server's Python


def spark_tables(spark: SparkSession) -> SparkTables:
    """The engine of ``spark``: the one place that asks whether a session is Spark Connect. Entry points
    call it once and hand the object down."""
    return ConnectTables(spark) if sessions.is_connect_session(spark) else ClassicTables(spark)
