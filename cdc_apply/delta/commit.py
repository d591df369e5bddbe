"""Commits of Parquet files already written into a table's folder, through Delta's ``OptimisticTransaction``.

One commit lists the files as ``add`` actions, optionally with a ``SetTransaction`` (app id, version)
and ``userMetadata``, and records the operation and metrics Spark's writer records for an append, so
``DESCRIBE HISTORY`` cannot tell the two apart. Like :mod:`cdc_apply.delta.log`, it reaches through
py4j into Delta's JVM classes; nothing above this package does.

:func:`append_arrow` is an append of an Arrow table made that way: the bookkeeping tables' rows are built
on the driver, and Spark's writer took ~2 s to append a 100,000-row transactions log (a DataFrame made
from the Arrow table, a write job, Delta's statistics job) where pyarrow's file and this commit take a
fraction of it.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Callable, Sequence

from cdc_apply.delta.arrow_files import AddedFile, parquet_file
from cdc_apply.delta.log import app_version, delta_log
from cdc_apply.delta.refs import TableRef
from cdc_apply.delta.sql_table import session_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Bytes per py4j call when a file goes to a table's folder through Hadoop's file system (object storage).
_CHUNK_BYTES = 4 << 20


def add_files(spark: SparkSession, log, files: Sequence[AddedFile], app: tuple[str, int] | None = None,
              user_metadata: str | None = None, check: Callable[[int | None], None] | None = None) -> int:
    """One Delta commit adding ``files``; its version. With ``app`` = (app id, version), the commit records
    that ``SetTransaction`` and registers the app id as read, so a commit of the same app id by anyone else
    in between fails this one (``ConcurrentTransactionException``); ``check`` is first given the version the
    app id last committed (None: none) and may raise to stop the commit."""
    jvm = session_jvm(spark)
    now = int(time.time() * 1000)
    actions = _add_actions(jvm, files, now)
    if app is not None:
        actions.add(jvm.org.apache.spark.sql.delta.actions.SetTransaction(app[0], app[1],
                                                                          jvm.scala.Some(jvm.java.lang.Long(now))))
    metadata = jvm.scala.Some(user_metadata) if user_metadata is not None else jvm.scala.Option.empty()
    operation = _append_operation(jvm, metadata)
    txn = log.startTransaction()
    if app is not None:
        written = app_version(spark, txn.snapshot(), app[0], txn)
        if check is not None:
            check(written)
    _register_metrics(spark, txn, files)
    return int(txn.commit(jvm.scala.jdk.javaapi.CollectionConverters.asScala(actions).toSeq(), operation))


def _add_actions(jvm, files: Sequence[AddedFile], now: int):
    """A Java list of the files' ``add`` actions (data changed, no partition values, no tags)."""
    none = jvm.scala.Option.empty()
    actions = jvm.java.util.ArrayList()
    for f in files:
        actions.add(jvm.org.apache.spark.sql.delta.actions.AddFile(
            f.name, jvm.scala.collection.immutable.HashMap(), f.size, now, True, f.stats, None, None,
            none, none, none, none, none))
    return actions


def _append_operation(jvm, user_metadata):
    """The commit's operation as Spark's writer records an append (DESCRIBE HISTORY: WRITE, Append)."""
    none = jvm.scala.Option.empty()
    return jvm.org.apache.spark.sql.delta.DeltaOperations.Write(jvm.org.apache.spark.sql.SaveMode.Append, none,
                                                                none, user_metadata, none, none, none, none, none)


def _register_metrics(spark: SparkSession, txn, files: Sequence[AddedFile]) -> None:
    """The operation metrics Spark's writer would record (DESCRIBE HISTORY's numFiles, numOutputRows, ...)."""
    jvm = session_jvm(spark)
    metrics = jvm.scala.collection.immutable.HashMap()
    for name, value in (("numFiles", len(files)), ("numOutputRows", sum(f.rows for f in files)),
                        ("numOutputBytes", sum(f.size for f in files))):
        metric = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric(spark._jsc.sc(), name)
        metric.set(value)
        metrics = metrics.updated(name, metric)
    txn.registerSQLMetrics(spark._jsparkSession, metrics)


def append_arrow(spark: SparkSession, ref: TableRef, table, user_metadata: str | None = None) -> bool:
    """Append the Arrow ``table`` to the Delta table at ``ref`` as one Parquet file written by pyarrow and one
    commit, without a Spark job, on a classic session; False, with nothing written, where that may not be done — a
    catalog table, Delta's classes out of reach, a table that takes no file written outside Delta as it is
    (``plain_columns``: column mapping, partitions, writer features), a column it lacks or holds as another
    type, or a NULL in a column it declares NOT NULL — and the caller appends through Spark instead.

    The table's layout is read from the transaction's own snapshot: a change of it by another writer before
    the commit makes the commit fail rather than add a file the table no longer reads as written."""
    if ref.path is None or table.num_rows == 0:
        return False
    log = delta_log(spark, ref)
    if log is None:
        return False
    try:
        txn = log.startTransaction()
        metadata = txn.snapshot().metadata()
        if not _takes(txn.snapshot(), metadata, table):
            return False
        folder, fs = _folder(spark, log)
    except Exception:  # noqa: BLE001 - Delta's classes differ or are out of reach: nothing written yet
        return False
    jvm = session_jvm(spark)
    written = parquet_file(table, stats=spark.conf.get("spark.databricks.delta.stats.collect", "true") != "false")
    if fs is None:
        with open(os.path.join(folder, written.name), "xb") as out:
            out.write(written.data)
    else:
        stream = fs.create(jvm.org.apache.hadoop.fs.Path(folder, written.name), False)
        try:
            for at in range(0, written.size, _CHUNK_BYTES):
                stream.write(written.data[at:at + _CHUNK_BYTES])
        finally:
            stream.close()
    option = jvm.scala.Some(user_metadata) if user_metadata is not None else jvm.scala.Option.empty()
    actions = _add_actions(jvm, [written], int(time.time() * 1000))
    _register_metrics(spark, txn, [written])
    txn.commit(jvm.scala.jdk.javaapi.CollectionConverters.asScala(actions).toSeq(), _append_operation(jvm, option))
    return True


def _takes(snapshot, metadata, table) -> bool:
    """Whether a Parquet file of ``table`` may be listed in the snapshot's table as pyarrow wrote it."""
    from pyspark.sql.pandas.types import from_arrow_schema

    protocol = snapshot.protocol()
    mapping = metadata.configuration().get("delta.columnMapping.mode")
    if (protocol.minReaderVersion() != 1 or protocol.minWriterVersion() > 2 or not metadata.partitionColumns().isEmpty()
            or (mapping.isDefined() and mapping.get() != "none")):
        return False
    fields = {f["name"]: f for f in json.loads(metadata.schemaString())["fields"]}
    for field, column in zip(from_arrow_schema(table.schema).jsonValue()["fields"], table.columns):
        have = fields.get(field["name"])
        if have is None or _shape(have["type"]) != _shape(field["type"]):
            return False
        if not have.get("nullable", True) and column.null_count:
            return False
    return True


def _shape(data_type):
    """A Spark type's JSON without nullability and metadata: the types the files must hold, not the flags."""
    if isinstance(data_type, dict):
        return {k: _shape(v) for k, v in data_type.items()
                if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")}
    if isinstance(data_type, list):
        return [_shape(v) for v in data_type]
    return data_type


def _folder(spark: SparkSession, log):
    """The table's folder: a local path (None for the file system), or a Hadoop path and its file system."""
    path = log.dataPath()
    uri = path.toUri()
    if uri.getScheme() in (None, "file"):
        return uri.getPath(), None
    try:
        conf = log.newDeltaHadoopConf()
    except Exception:  # noqa: BLE001 - an older DeltaLog: the session's own configuration
        conf = spark._jsparkSession.sessionState().newHadoopConf()
    return path, path.getFileSystem(conf)
