"""Reads of a table's Delta log through the JVM of a classic session: its versions, its commits' actions, its
recorded transactions.

This module, :mod:`cdc_apply.delta.commit` (commits through Delta's ``OptimisticTransaction``) and
:mod:`cdc_apply.delta.table_create` (listings of ``_delta_log/``) are the only places that reach
through py4j into Delta's and Hadoop's JVM classes (``session_jvm(spark)``). Everything above them holds a
``DeltaLog`` only as an opaque handle passed back here. They serve the classic engine
(:class:`cdc_apply.delta.engine.ClassicTables`); a Spark Connect session asks the same facts through SQL
(:mod:`cdc_apply.delta.sql_table`) or goes without them. docs/CONNECT.md says which fact comes from where.
Where the JVM is out of reach or the log cannot say, a read returns None and its caller asks the table.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cdc_apply.delta.refs import TableRef
from cdc_apply.delta.sql_table import session_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def log_at(spark: SparkSession, location: str):
    """Delta's ``DeltaLog`` of the table at ``location``, or None where the JVM is out of reach."""
    try:
        return session_jvm(spark).org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
    except Exception:  # noqa: BLE001 - no JVM access
        return None


def delta_log(spark: SparkSession, ref: TableRef):
    """Delta's ``DeltaLog`` of the table, or None where the JVM is out of reach or the catalog does not
    describe its tables."""
    try:
        if ref.path:
            location = ref.path
        else:
            detail = spark.sql(f"DESCRIBE DETAIL {ref.sql}").first()
            assert detail is not None  # DESCRIBE DETAIL of a table answers one row
            location = detail.location
    except Exception:  # noqa: BLE001 - no location to ask for
        return None
    return log_at(spark, location)


def newest_snapshot(log):
    """The table's newest snapshot (``DeltaLog.update`` with its default arguments, from Python)."""
    return log.update(*(getattr(log, f"update$default${i}")() for i in (1, 2, 3)))


def log_changes(spark: SparkSession, log, start: int) -> list[tuple[int, list[dict]]]:
    """``(version, actions)`` of each commit of ``log`` from ``start`` on, each action as its JSON dict:
    the commit files only, no Spark job. Raises where those commits were cleaned up."""
    jvm = session_jvm(spark)
    changes = log.getChanges(start, jvm.scala.Option.empty(), True)
    out = []
    while changes.hasNext():
        commit = changes.next()
        out.append((int(commit._1()), [json.loads(action.json()) for action in
                                       jvm.scala.jdk.javaapi.CollectionConverters.asJava(commit._2())]))
    return out


def newest_added_max(spark: SparkSession, ref: TableRef, column: str, commits: int = 4) -> int | None:
    """The largest ``column`` value in the rows that the newest commit adding rows added, from its files'
    statistics (the commit files only, no Spark job); -1 when no commit ever added rows. Equals the
    column's maximum in a table whose appends carry non-decreasing values (the bookkeeping tables'
    ``apply_version``). None when only a query can tell: no JVM to ask, a file without statistics of
    ``column``, or no commit among the newest ``commits`` added rows (compactions and empty files add
    none)."""
    log = delta_log(spark, ref)
    if log is None:
        return None
    try:
        start = max(0, int(newest_snapshot(log).version()) - commits + 1)
        found = None
        for _, actions in log_changes(spark, log, start):
            stats = [json.loads(a["add"]["stats"]) for a in actions if "add" in a and a["add"].get("dataChange", True)]
            added = [int(s["maxValues"][column]) for s in stats if int(s["numRecords"])]
            if added:
                found = max(added)
    except (KeyError, TypeError, ValueError):
        return None      # a file without statistics of the column
    except Exception:  # noqa: BLE001 - commits cleaned up, a JVM error: ask the table
        return None
    if found is None:
        return -1 if start == 0 else None
    return found


def files_bytes(spark: SparkSession, ref: TableRef) -> int | None:
    """The bytes of the table's current data files, from its newest snapshot: the one its next read or
    MERGE plans with, so a state reconstruction it starts is one that read would have run. None where
    the JVM is out of reach."""
    log = delta_log(spark, ref)
    if log is None:
        return None
    try:
        return int(newest_snapshot(log).sizeInBytes())
    except Exception:  # noqa: BLE001 - not known: the caller decides without it
        return None


def file_column_names(spark: SparkSession, ref: TableRef) -> dict[str, str] | None:
    """Each top-level column's name in the table's Parquet files (its column-mapping physical name, or
    its own name without column mapping), from the snapshot this JVM holds: no log read. None where the
    JVM is out of reach (Spark Connect) or the table is not known."""
    log = delta_log(spark, ref)
    if log is None:
        return None
    try:
        fields = json.loads(log.unsafeVolatileSnapshot().metadata().schemaString())["fields"]
    except Exception:  # noqa: BLE001 - not known: the caller goes without it
        return None
    return {f["name"]: str((f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"]))
            for f in fields}


def files_with_stats(spark: SparkSession, ref: TableRef, version: int):
    """The table's live files at ``version`` as a DataFrame of Delta's ``AddFile`` columns with ``stats``
    parsed (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``): its queries run over the snapshot's
    state, one row a file, not over the table's rows. None where the JVM is out of reach (Spark Connect) or
    the snapshot this JVM holds is not at ``version`` (the caller asks the table instead)."""
    log = delta_log(spark, ref)
    if log is None:
        return None
    try:
        snapshot = log.unsafeVolatileSnapshot()
        if int(snapshot.version()) != version:
            return None
        from pyspark.sql.classic.dataframe import DataFrame

        return DataFrame(snapshot.withStats(), spark)
    except Exception:  # noqa: BLE001 - not known: the caller asks the table
        return None


def cached_version(spark: SparkSession, ref: TableRef) -> int | None:
    """The table's newest Delta version this JVM knows (its own commits included), without reading the
    log again: the cached snapshot Delta keeps per table. None where the JVM cannot say (the caller asks
    the table: ``DESCRIBE HISTORY``) or no table is there."""
    log = delta_log(spark, ref)
    if log is not None:
        try:
            version = int(log.unsafeVolatileSnapshot().version())
            return version if version >= 0 else None
        except Exception:  # noqa: BLE001 - ask the table
            pass
    return None


def updated_version(spark: SparkSession, ref: TableRef) -> int | None:
    """The table's newest version as its log says now (not a snapshot this JVM cached: the table may have
    been replaced under it); None where the JVM cannot say or no table is there."""
    log = delta_log(spark, ref)
    if log is not None:
        try:
            version = int(newest_snapshot(log).version())
            return version if version >= 0 else None
        except Exception:  # noqa: BLE001 - ask the table
            pass
    return None


def recorded_txn_version(spark: SparkSession, ref: TableRef, app_id: str) -> int | None:
    """The newest ``txnVersion`` Delta recorded for ``app_id`` in the table (None: none, or no JVM to ask,
    as under Spark Connect). Rebuilds the table's state once: call it once per table, not per write."""
    log = delta_log(spark, ref)
    if log is None:
        return None
    found = newest_snapshot(log).transactions().get(app_id)
    return int(found.get()) if found.isDefined() else None


def app_version(spark: SparkSession, snapshot, app_id: str, txn=None) -> int | None:
    """The ``txnVersion`` ``app_id`` last committed as of ``snapshot`` (None: none), from the version
    checksum where Delta keeps one (it lists the ``SetTransaction`` of at most 100 app ids), else from
    the snapshot's state. With ``txn`` (an ``OptimisticTransaction``), the app id is registered as read
    by it, so that a commit of the same app id by anyone else conflicts with it."""
    if txn is not None:
        txn.readTxn().addOne(app_id)
    checksum = snapshot.checksumOpt()
    known = checksum.get().setTransactions() if checksum.isDefined() else None
    if known is not None and known.isDefined():
        jvm_list = session_jvm(spark).scala.jdk.javaapi.CollectionConverters.asJava(known.get())
        found = [int(t.version()) for t in jvm_list if t.appId() == app_id]
        return max(found) if found else None
    found = snapshot.transactions().get(app_id)
    return int(found.get()) if found.isDefined() else None


def plain_columns(log) -> list[str] | None:
    """The column names of the table's newest snapshot when Parquet files written outside Delta may be added
    to it as they are — reader protocol 1, writer protocol 2 at most (``delta.appendOnly``, NOT NULL
    columns), no partition columns, no column mapping — else None."""
    snapshot = newest_snapshot(log)
    protocol, metadata = snapshot.protocol(), snapshot.metadata()
    mapping = metadata.configuration().get("delta.columnMapping.mode")
    plain = (protocol.minReaderVersion() == 1 and protocol.minWriterVersion() <= 2
             and metadata.partitionColumns().isEmpty()
             and (not mapping.isDefined() or mapping.get() == "none"))
    return list(metadata.schema().fieldNames()) if plain else None
