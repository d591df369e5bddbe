"""A large micro-batch's bounds — each source's first and last seq and its rows — from its files' Delta
statistics, instead of a query over the micro-batch.

``foreachBatch`` hands the job its micro-batch as a scan of an RDD of whole bronze rows: a query of it
reads every column of every row, payloads included, and no column can be pruned (the bounds of a
10M-row snapshot: ~4 s of its plan). The files that RDD reads are in its lineage (Spark's
``FileScanRDD``), and bronze's log holds each file's statistics: its rows and the bounds of ``source``
and ``seq``. Where every file is live in bronze's snapshot with those statistics, holds one source
(equal bounds of ``source``, as in :func:`~cdc_apply.lake.sources.bronze_tail.newest_in_stats`) and
has no deletion vector (its statistics count deleted rows), they give the query's answer without a job
over rows. Anything else — Spark Connect (no lineage to read), a file compacted away since, a file of
several sources, no statistics — is None, and the caller runs the query.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import quote, unquote

from cdc_apply.delta.log import newest_snapshot
from cdc_apply.delta.refs import TableRef

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables

FILE_SCAN_RDD = "org.apache.spark.sql.execution.datasources.FileScanRDD"


class Bounds(NamedTuple):
    """A source's rows in the micro-batch (the bounds query's row)."""

    source: str
    last: int
    first: int
    n: int
    bytes: int | None


def scanned_files(df) -> set[str] | None:
    """The names of the files ``df``'s plan reads (the ``FileScanRDD``s in its lineage; no job runs),
    or None where the lineage cannot be read (Spark Connect) or holds no file scan."""
    try:   # a Spark Connect DataFrame has no _jdf: None
        todo, names, scans = [df._jdf.queryExecution().executedPlan().execute()], set(), 0
        while todo:
            rdd = todo.pop()
            if rdd.getClass().getName() == FILE_SCAN_RDD:
                scans += 1
                partitions = rdd.filePartitions()
                for i in range(partitions.size()):
                    for file in partitions.apply(i).files():
                        names.add(unquote(file.filePath().toString().rsplit("/", 1)[-1]))
                continue
            dependencies = rdd.dependencies()
            todo.extend(dependencies.apply(i).rdd() for i in range(dependencies.size()))
    except Exception:  # noqa: BLE001 - no lineage to read: the caller queries the micro-batch
        return None
    return names if scans else None


def bounds_in_stats(tables: SparkTables, bronze: TableRef, names: set[str], sources: set[str] | None) -> dict[str,
                    Bounds] | None:
    """Per source (of ``sources``; None: every one), the bounds of the rows of bronze's files ``names``
    from their statistics in bronze's newest snapshot; None when the statistics cannot say (see the
    module's docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql.classic.dataframe import DataFrame

    log = tables.delta_log(bronze)
    if log is None:
        return None
    try:
        snapshot = newest_snapshot(log)
        files = DataFrame(snapshot.withStats(), tables.spark)
        spelled = sorted(names | {quote(n) for n in names})   # the log's paths are URL-encoded
        rows = files.where(F.element_at(F.split("path", "/"), -1).isin(spelled)).select(
            "path", F.col("deletionVector").isNull().alias("whole"), "stats.numRecords",
            F.col("stats.minValues.source").alias("low_source"), F.col("stats.maxValues.source").alias("high_source"),
            F.col("stats.minValues.seq").alias("low_seq"), F.col("stats.maxValues.seq").alias("high_seq")).collect()
    except Exception:  # noqa: BLE001 - no such statistics (a partitioned bronze, say): the caller queries
        return None
    if len(rows) != len(names) or len({unquote(r.path.rsplit("/", 1)[-1]) for r in rows}) != len(names):
        return None   # a file compacted away since (or a name twice): only the rows can say
    bounds: dict[str, Bounds] = {}
    for r in rows:
        if r.numRecords is None:
            return None
        if r.numRecords == 0:
            continue
        # Delta keeps a 32-character prefix of strings: equal bounds are the one source's whole name.
        if not r.whole or r.low_source is None or r.low_source != r.high_source or r.low_seq is None \
                or r.high_seq is None:
            return None
        if sources is not None and r.low_source not in sources:
            continue
        was = bounds.get(r.low_source)
        bounds[r.low_source] = (Bounds(r.low_source, int(r.high_seq), int(r.low_seq), int(r.numRecords), None)
                                if was is None else
                                Bounds(r.low_source, max(was.last, int(r.high_seq)), min(was.first, int(r.low_seq)),
                                       was.n + int(r.numRecords), None))
    return bounds


def micro_batch_bounds(tables: SparkTables, df, bronze: TableRef, sources: set[str] | None) -> dict[str, Bounds] | None:
    """The bounds query's answer for the micro-batch ``df`` of ``bronze`` (no payload bytes), from its
    files' statistics; None where only the query can answer."""
    names = scanned_files(df)
    if not names:
        return None
    return bounds_in_stats(tables, bronze, names, sources)
