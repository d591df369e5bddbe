"""Large bronze appends (a snapshot's rows) as Arrow: Parquet written by pyarrow, committed through Delta's log.

Spark's DataFrame writer re-encodes every row in the JVM, and that is most of
a snapshot's time (about 5x slower than pyarrow here, docs/LANDER.md). When the
bronze table is a plain Delta table on a local file system — no partitions, no
column mapping, writer protocol 2 at most (``delta.appendOnly``, NOT NULL
columns) — the rows are written by pyarrow into the table's folder and
committed as ``add`` actions with Delta's own ``OptimisticTransaction``: the
same ``txnAppId``/``txnVersion`` and ``userMetadata`` as
:meth:`BronzeWriter.append`, checked inside the transaction. Any other table
is written through Spark from the same Arrow data.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from cdc_apply.errors import LandError
from cdc_apply.lander.bronze_writer import BronzeWriter
from cdc_apply.lander.state import ResumeState

FILE_BYTES = 64 * 1024 * 1024      # payload bytes per Parquet file of a direct append

SCHEMA = pa.schema([
    pa.field("source", pa.string(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("lsn", pa.int64(), nullable=False),
    pa.field("payload", pa.binary(), nullable=False),
    pa.field("landed_at", pa.timestamp("us", tz="UTC")),
])


def bronze_batch(source: str, first_seq: int, payloads: pa.Array, landed_at: datetime) -> pa.RecordBatch:
    """Bronze rows for ``payloads`` numbered from ``first_seq`` (lsn 0: the lander wrote them)."""
    n = len(payloads)
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(source, pa.string()), n),
        pa.array(np.arange(first_seq, first_seq + n, dtype=np.int64)),
        pa.repeat(pa.scalar(0, pa.int64()), n),
        payloads,
        pa.repeat(pa.scalar(landed_at, pa.timestamp("us", tz="UTC")), n),
    ], schema=SCHEMA)


class ArrowAppender:
    """Rows added in seq order, committed to bronze in one Delta commit per :meth:`commit`; see the module
    docstring. Direct: rows go to Parquet files in the table's folder as they come (at most
    :data:`FILE_BYTES` held), and a commit only lists them; until then no reader sees them, and after a
    crash they stay unreferenced (VACUUM removes them). Through Spark: rows are held until the commit."""

    def __init__(self, writer: BronzeWriter, direct: bool = True) -> None:
        """``direct=False``: always through Spark (the fallback, also for tests)."""
        self.writer = writer
        self.spark = writer.spark
        self._folder = self._direct_folder() if direct else None
        self._held: list[pa.Array] = []
        self._held_bytes = 0
        self._files: list[tuple[str, int, int, int, int]] = []   # name, size, rows, first seq, last seq
        self._next_seq: int | None = None
        self._first_seq: int | None = None
        self.staged_bytes = 0                                    # payload bytes added since the last commit

    @property
    def direct(self) -> bool:
        return self._folder is not None

    def _direct_folder(self) -> str | None:
        location = self.writer._location
        if location is None:
            return None
        if location.startswith("file:"):
            location = "/" + location[len("file:"):].lstrip("/")
        if not os.path.isabs(location) or not os.path.isdir(location):
            return None
        log = self.writer._delta_log()
        if log is None:
            return None
        snapshot = log.update(*(getattr(log, f"update$default${i}")() for i in (1, 2, 3)))
        protocol, metadata = snapshot.protocol(), snapshot.metadata()
        mapping = metadata.configuration().get("delta.columnMapping.mode")
        plain = (protocol.minReaderVersion() == 1 and protocol.minWriterVersion() <= 2
                 and metadata.partitionColumns().isEmpty()
                 and (not mapping.isDefined() or mapping.get() == "none"))
        return location if plain else None

    def add(self, payloads: pa.Array, first_seq: int) -> None:
        """The next rows, numbered from ``first_seq`` (which must follow the rows added before)."""
        if self._next_seq is not None and first_seq != self._next_seq:
            raise LandError(f"snapshot rows numbered from seq {first_seq}, expected {self._next_seq}")
        if self._first_seq is None:
            self._first_seq = first_seq
        self._next_seq = first_seq + len(payloads)
        self._held.append(payloads)
        self._held_bytes += payloads.nbytes
        self.staged_bytes += payloads.nbytes
        if self._folder is not None and self._held_bytes >= FILE_BYTES:
            self._write_file()

    def commit(self, state: ResumeState) -> None:
        """One Delta commit with every row added since the last one, and ``state`` (its last_seq: the last row's)."""
        if self._next_seq is None or self._next_seq - 1 != state.last_seq:
            raise LandError(f"a snapshot commit through seq {state.last_seq} does not match the rows added "
                            f"(through {None if self._next_seq is None else self._next_seq - 1})")
        if self._folder is not None:
            self._write_file()
            self._commit_files(state)
        else:
            landed_at = datetime.now(timezone.utc)
            batches, seq = [], self._first_seq
            for array in self._held:
                batches.append(bronze_batch(self.writer.source, seq, array, landed_at))
                seq += len(array)
            self._append_spark(pa.Table.from_batches(batches, schema=SCHEMA), state)
        # The stream lands rows of its own between two landings of snapshot rows: numbering starts afresh.
        self._held, self._held_bytes, self._files = [], 0, []
        self._first_seq, self._next_seq, self.staged_bytes = None, None, 0

    def _write_file(self) -> None:
        import pyarrow.parquet as pq

        if not self._held:
            return
        first = self._next_seq - sum(len(a) for a in self._held)
        landed_at = datetime.now(timezone.utc)
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        path = os.path.join(self._folder, name)
        seq = first
        with pq.ParquetWriter(path, SCHEMA, compression="snappy") as out:
            for array in self._held:
                out.write_batch(bronze_batch(self.writer.source, seq, array, landed_at))
                seq += len(array)
        self._files.append((name, os.path.getsize(path), seq - first, first, seq - 1))
        self._held, self._held_bytes = [], 0

    def _append_spark(self, table: pa.Table, state: ResumeState) -> None:
        from cdc_apply.lake.bronze import bronze_schema

        writer = self.writer
        df = self.spark.createDataFrame(table, schema=bronze_schema())
        out = (df.coalesce(max(1, self.spark.sparkContext.defaultParallelism)).write.format("delta").mode("append")
               .option("txnAppId", writer.app_id).option("txnVersion", str(state.batch))
               .option("userMetadata", state.to_json(writer.app_id, writer.run_id)))
        self._check_version(writer._txn_version(), state.batch)
        out.save(writer.ref.path) if writer.ref.path else out.saveAsTable(writer.ref.name)

    def _check_version(self, written: int | None, version: int) -> None:
        if written is not None and written >= version:
            raise LandError(f"batch {version} of source {self.writer.source!r} is already in bronze (written by "
                            "another run): run one lander per source, then start this one again",
                            table=str(self.writer.ref), app_id=self.writer.app_id)

    def _commit_files(self, state: ResumeState) -> None:
        writer, jvm = self.writer, self.spark._jvm
        now = int(time.time() * 1000)
        none = jvm.scala.Option.empty()
        delta = jvm.org.apache.spark.sql.delta
        actions = jvm.java.util.ArrayList()
        for name, size, rows, first, last in self._files:
            stats = json.dumps({"numRecords": rows, "minValues": {"seq": first, "lsn": 0},
                                "maxValues": {"seq": last, "lsn": 0},
                                "nullCount": {"source": 0, "seq": 0, "lsn": 0, "payload": 0, "landed_at": 0}})
            actions.add(delta.actions.AddFile(name, jvm.scala.collection.immutable.HashMap(), size, now, True, stats,
                                              None, None, none, none, none, none, none))
        actions.add(delta.actions.SetTransaction(writer.app_id, state.batch, jvm.scala.Some(jvm.java.lang.Long(now))))
        operation = delta.DeltaOperations.Write(jvm.org.apache.spark.sql.SaveMode.Append, none, none,
                                                jvm.scala.Some(state.to_json(writer.app_id, writer.run_id)),
                                                none, none, none, none, none)
        try:
            txn = writer._delta_log().startTransaction()
            # Read inside the transaction: a commit of the same batch by another process conflicts with it.
            self._check_version(int(txn.txnVersion(writer.app_id)), state.batch)
            txn.commit(jvm.scala.jdk.javaapi.CollectionConverters.asScala(actions).toSeq(), operation)
        except LandError:
            raise
        except Exception as exc:  # a JVM error (a conflicting commit, storage): the files stay unreferenced
            raise LandError(f"committing a snapshot batch to Delta failed: {str(exc).splitlines()[0]}",
                            table=str(writer.ref), batch=state.batch) from None
