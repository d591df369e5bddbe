"""Bronze commits without Spark jobs: Parquet written by pyarrow, listed in one Delta transaction.

Spark's writer costs a bronze append four Spark jobs, and its ``txnAppId`` check rebuilds the
table's whole state (every file ever added) to read one number. Under a sustained load that made
an append of one second's changes take seconds. When the bronze table is a plain Delta table on a
local file system — the contract's columns only, no partitions, no column mapping, writer protocol
2 at most (``delta.appendOnly``, NOT NULL columns) — the lander writes the rows with pyarrow into the
table's folder and commits them as ``add`` actions through Delta's own ``OptimisticTransaction``,
with the same ``SetTransaction`` (app id, batch) and ``userMetadata`` as Spark's writer would.

The batch already in bronze is read from the version checksum (``.crc``), which Delta keeps with
every ``SetTransaction`` while there are at most 100 of them; without one, from the table's state
as Delta's writer does. Either way the app id is registered as read by the transaction, so a batch
committed by another process between the read and the commit fails this commit
(``ConcurrentTransactionException``) instead of landing twice.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime
from typing import Iterable, NamedTuple

import pyarrow as pa

from cdc_apply.delta.bronze_schema import ARROW_SCHEMA
from cdc_apply.errors import LandError
from cdc_apply.delta.spark_errors import error_text
from cdc_apply.delta.log import newest_snapshot
from cdc_apply.lander.state import ResumeState

STRING_STATS_CHARS = 32   # Delta's default prefix for string min/max: longer values get none here


class BronzeFile(NamedTuple):
    """A Parquet file written into the table's folder, not yet committed."""
    name: str
    size: int
    rows: int
    stats: str        # Delta's per-file statistics (JSON)


def direct_folder(location: str | None, log) -> str | None:
    """The bronze table's local folder when its files may be written by pyarrow (see the module), else
    None; ``location`` and ``log`` (its ``DeltaLog``) are None where they are not known."""
    if location is None or log is None:
        return None
    if location.startswith("file:"):
        location = "/" + location[len("file:"):].lstrip("/")
    if not os.path.isabs(location) or not os.path.isdir(location):
        return None
    snapshot = newest_snapshot(log)
    protocol, metadata = snapshot.protocol(), snapshot.metadata()
    mapping = metadata.configuration().get("delta.columnMapping.mode")
    plain = (protocol.minReaderVersion() == 1 and protocol.minWriterVersion() <= 2
             and metadata.partitionColumns().isEmpty()
             and (not mapping.isDefined() or mapping.get() == "none")
             # A column of the user's own would be null in these files, unchecked; Spark's writer checks
             # its NOT NULL.
             and sorted(metadata.schema().fieldNames()) == sorted(ARROW_SCHEMA.names))
    return location if plain else None


def write_file(folder: str, batches: Iterable[pa.RecordBatch]) -> BronzeFile:
    """Write ``batches`` (bronze rows in seq order) to one new Parquet file in ``folder``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    path = os.path.join(folder, name)
    rows, bounds = 0, {"seq": [], "lsn": []}
    sources: set[str] = set()
    with pq.ParquetWriter(path, ARROW_SCHEMA, compression="snappy") as out:
        for batch in batches:
            out.write_batch(batch)
            rows += batch.num_rows
            for column in bounds:
                low_high = pc.min_max(batch.column(column))
                bounds[column].append((low_high["min"].as_py(), low_high["max"].as_py()))
            sources.update(pc.unique(batch.column("source")).to_pylist())
    low = {c: min(b[0] for b in v) for c, v in bounds.items() if v}
    high = {c: max(b[1] for b in v) for c, v in bounds.items() if v}
    if len(sources) == 1 and len(next(iter(sources))) <= STRING_STATS_CHARS:
        low["source"] = high["source"] = next(iter(sources))
    stats = json.dumps({"numRecords": rows, "minValues": low, "maxValues": high,
                        "nullCount": dict.fromkeys(ARROW_SCHEMA.names, 0)})
    return BronzeFile(name, os.path.getsize(path), rows, stats)


def stream_batch(source: str, rows, landed_at: datetime) -> pa.RecordBatch:
    """Bronze rows for the lander's ``(seq, lsn, payload)`` tuples."""
    n = len(rows)
    seqs, lsns, payloads = zip(*rows) if n else ((), (), ())
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(source, pa.string()), n),
        pa.array(seqs, pa.int64()),
        pa.array(lsns, pa.int64()),
        pa.array(payloads, pa.binary()),
        pa.repeat(pa.scalar(landed_at, pa.timestamp("us", tz="UTC")), n),
    ], schema=ARROW_SCHEMA)


def recorded_batch(jvm, snapshot, app_id: str, txn=None) -> int | None:
    """The batch ``app_id`` last committed as of ``snapshot`` (None: none). With ``txn``, the app id is
    registered as read by it, so that a commit of the same app id by anyone else conflicts with it."""
    if txn is not None:
        txn.readTxn().addOne(app_id)
    checksum = snapshot.checksumOpt()
    known = checksum.get().setTransactions() if checksum.isDefined() else None
    if known is not None and known.isDefined():
        jvm_list = jvm.scala.jdk.javaapi.CollectionConverters.asJava(known.get())
        found = [int(t.version()) for t in jvm_list if t.appId() == app_id]
        return max(found) if found else None
    found = snapshot.transactions().get(app_id)
    return int(found.get()) if found.isDefined() else None


def commit_files(writer, files: list[BronzeFile], state: ResumeState) -> int:
    """One Delta commit adding ``files`` with ``state`` as userMetadata and batch ``state.batch``; its version.

    Raises :class:`LandError` when the batch is already in bronze or another commit of this source's
    app id landed first; the files then stay unreferenced (VACUUM removes them)."""
    jvm = writer.spark._jvm
    now = int(time.time() * 1000)
    actions = _add_actions(jvm, files, now)
    actions.add(jvm.org.apache.spark.sql.delta.actions.SetTransaction(writer.app_id, state.batch,
                                                                      jvm.scala.Some(jvm.java.lang.Long(now))))
    operation = _append_operation(jvm, jvm.scala.Some(state.to_json(writer.app_id, writer.run_id)))
    try:
        txn = writer.delta_log().startTransaction()
        written = recorded_batch(jvm, txn.snapshot(), writer.app_id, txn)
        check_not_written(writer, written, state.batch)
        return _commit(writer.spark, txn, files, actions, operation)
    except LandError:
        raise
    except Exception as exc:  # a JVM error (a conflicting commit, storage): the files stay unreferenced
        text = error_text(exc)
        if "ConcurrentTransactionException" in text or "DELTA_CONCURRENT_TRANSACTION" in text:
            raise LandError(f"batch {state.batch} of source {writer.source!r} was committed to bronze by another "
                            "run while this one committed it: run one lander per source, then start this one "
                            "again", table=str(writer.ref), app_id=writer.app_id) from None
        cause = next((line.strip(": ") for line in text.splitlines()
                      if "Exception" in line or "Error" in line), text.splitlines()[0] if text else "")
        raise LandError(f"committing batch {state.batch} to bronze failed: {cause[:300]}",
                        table=str(writer.ref), app_id=writer.app_id) from None


def append_rows(spark, location: str, log, rows) -> bool:
    """Append bronze ``(source, seq, lsn, payload)`` rows as one file and one plain commit (no app id, no
    userMetadata: what Spark's writer commits for an append without options), without a Spark job;
    False, with nothing written, when the table is not one pyarrow may write (see the module)."""
    folder = direct_folder(location, log)
    if folder is None:
        return False
    rows = list(rows)
    n = len(rows)
    sources, seqs, lsns, payloads = zip(*(r[:4] for r in rows)) if n else ((), (), (), ())
    batch = pa.RecordBatch.from_arrays([
        pa.array(sources, pa.string()), pa.array(seqs, pa.int64()), pa.array(lsns, pa.int64()),
        pa.array([bytes(p) for p in payloads], pa.binary()), pa.nulls(n, pa.timestamp("us", tz="UTC")),
    ], schema=ARROW_SCHEMA)
    files = [write_file(folder, [batch])]
    jvm = spark._jvm
    _commit(spark, log.startTransaction(), files, _add_actions(jvm, files, int(time.time() * 1000)),
            _append_operation(jvm, jvm.scala.Option.empty()))
    return True


def _commit(spark, txn, files: list[BronzeFile], actions, operation) -> int:
    """Commit ``actions`` (a Java list) with the metrics Spark's writer records for ``files``; the version."""
    _register_metrics(spark, txn, files)
    return int(txn.commit(spark._jvm.scala.jdk.javaapi.CollectionConverters.asScala(actions).toSeq(), operation))


def _add_actions(jvm, files: list[BronzeFile], now: int):
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


def _register_metrics(spark, txn, files: list[BronzeFile]) -> None:
    """The operation metrics Spark's writer would record (DESCRIBE HISTORY's numFiles, numOutputRows, ...)."""
    jvm = spark._jvm
    metrics = jvm.scala.collection.immutable.HashMap()
    for name, value in (("numFiles", len(files)), ("numOutputRows", sum(f.rows for f in files)),
                        ("numOutputBytes", sum(f.size for f in files))):
        metric = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric(spark._jsc.sc(), name)
        metric.set(value)
        metrics = metrics.updated(name, metric)
    txn.registerSQLMetrics(spark._jsparkSession, metrics)


def check_not_written(writer, written: int | None, batch: int) -> None:
    """Raise :class:`LandError` when bronze already records ``batch`` (or a later one) for this source."""
    if written is not None and written >= batch:
        raise LandError(f"batch {batch} of source {writer.source!r} is already in bronze (written by "
                        "another run): run one lander per source, then start this one again",
                        table=str(writer.ref), app_id=writer.app_id)
