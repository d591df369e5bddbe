"""Commits of Parquet files already written into a table's folder, through Delta's ``OptimisticTransaction``.

One commit lists the files as ``add`` actions, optionally with a ``SetTransaction`` (app id, version)
and ``userMetadata``, and records the operation and metrics Spark's writer records for an append, so
``DESCRIBE HISTORY`` cannot tell the two apart. Like :mod:`cdc_apply.delta.log`, it reaches through
py4j into Delta's JVM classes; nothing above this package does.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol, Sequence

from cdc_apply.delta.log import app_version


class AddedFile(Protocol):
    """A Parquet file in the table's folder, not yet committed."""

    name: str         # relative to the table's folder
    size: int         # bytes
    rows: int
    stats: str        # Delta's per-file statistics (JSON)


def add_files(spark, log, files: Sequence[AddedFile], app: tuple[str, int] | None = None,
              user_metadata: str | None = None, check: Callable[[int | None], None] | None = None) -> int:
    """One Delta commit adding ``files``; its version. With ``app`` = (app id, version), the commit records
    that ``SetTransaction`` and registers the app id as read, so a commit of the same app id by anyone else
    in between fails this one (``ConcurrentTransactionException``); ``check`` is first given the version the
    app id last committed (None: none) and may raise to stop the commit."""
    jvm = spark._jvm
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


def _register_metrics(spark, txn, files: Sequence[AddedFile]) -> None:
    """The operation metrics Spark's writer would record (DESCRIBE HISTORY's numFiles, numOutputRows, ...)."""
    jvm = spark._jvm
    metrics = jvm.scala.collection.immutable.HashMap()
    for name, value in (("numFiles", len(files)), ("numOutputRows", sum(f.rows for f in files)),
                        ("numOutputBytes", sum(f.size for f in files))):
        metric = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric(spark._jsc.sc(), name)
        metric.set(value)
        metrics = metrics.updated(name, metric)
    txn.registerSQLMetrics(spark._jsparkSession, metrics)
