"""Large bronze appends (a snapshot's rows) as Arrow: Parquet written by pyarrow as the rows come.

Spark's DataFrame writer re-encodes every row in the JVM, and that is most of
a snapshot's time (about 5x slower than pyarrow here, docs/LANDER.md). When the
bronze table may be written directly (:func:`~cdc_apply.lander.bronze_commit.direct_folder`),
the rows go to Parquet files in its folder while the snapshot is read and one
commit lists them (:func:`~cdc_apply.lander.bronze_commit.commit_files`); any
other table is written through Spark from the same Arrow data.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from cdc_apply.delta.bronze_schema import ARROW_SCHEMA
from cdc_apply.errors import LandError
from cdc_apply.lander.bronze_commit import BronzeFile, repeated_string, repeated_timestamp, write_file
from cdc_apply.lander.state import ResumeState

FILE_BYTES = 64 * 1024 * 1024      # payload bytes per Parquet file of a direct append


def bronze_batch(source: str, first_seq: int, payloads: pa.Array, landed_at: datetime) -> pa.RecordBatch:
    """Bronze rows for ``payloads`` numbered from ``first_seq`` (lsn 0: the lander wrote them)."""
    n = len(payloads)
    # From buffers, as stream_batch: pa.array/pa.scalar of Python objects make pyarrow import pandas.
    return pa.RecordBatch.from_arrays([
        repeated_string(source, n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.arange(first_seq, first_seq + n, dtype=np.int64))]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.zeros(n, dtype=np.int64))]),
        payloads,
        repeated_timestamp(landed_at, n),
    ], schema=ARROW_SCHEMA)


class ArrowAppender:
    """Rows added in seq order, committed to bronze in one Delta commit per :meth:`commit` by ``writer`` (a
    :class:`~cdc_apply.lander.bronze_writer.BronzeWriter` or :class:`~cdc_apply.lander.bronze_rs.RsBronzeWriter`);
    see the module docstring. Direct: rows go to Parquet files in the table's folder as they come (at most
    :data:`FILE_BYTES` held), and a commit only lists them; until then no reader sees them, and after a
    crash they stay unreferenced (VACUUM removes them). Through Spark: rows are held until the commit."""

    def __init__(self, writer, direct: bool = True) -> None:
        """``direct=False``: always through Spark (the fallback, also for tests)."""
        self.writer = writer
        self.spark = writer.spark
        self._folder: str | None = writer.folder if direct else None
        self._held: list[pa.Array] = []
        self._held_bytes = 0
        self._files: list[BronzeFile] = []
        self._next_seq: int | None = None
        self._first_seq: int | None = None
        self.staged_bytes = 0                                    # payload bytes added since the last commit

    @property
    def direct(self) -> bool:
        return self._folder is not None

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
            self._write_file(self._folder)

    def commit(self, state: ResumeState) -> None:
        """One Delta commit with every row added since the last one, and ``state`` (its last_seq: the last row's)."""
        if self._next_seq is None or self._next_seq - 1 != state.last_seq:
            raise LandError(f"a snapshot commit through seq {state.last_seq} does not match the rows added "
                            f"(through {None if self._next_seq is None else self._next_seq - 1})")
        if self._folder is not None:
            self._write_file(self._folder)
            self.writer.commit_files(self._files, state)
        else:
            self.writer.append_table(pa.Table.from_batches(self._held_batches(), schema=ARROW_SCHEMA), state,
                                     files=max(1, self.spark.sparkContext.defaultParallelism))
        # The stream lands rows of its own between two landings of snapshot rows: numbering starts afresh.
        self._held, self._held_bytes, self._files = [], 0, []
        self._first_seq, self._next_seq, self.staged_bytes = None, None, 0

    def _write_file(self, folder: str) -> None:
        if not self._held:
            return
        self._files.append(write_file(folder, self._held_batches(), self.writer.file_system))
        self._held, self._held_bytes = [], 0

    def _held_batches(self) -> list[pa.RecordBatch]:
        """The rows held, numbered on to the last one added, landed now."""
        assert self._next_seq is not None  # add() numbers every row it holds
        seq = self._next_seq - sum(len(a) for a in self._held)
        landed_at = datetime.now(timezone.utc)
        batches = []
        for array in self._held:
            batches.append(bronze_batch(self.writer.source, seq, array, landed_at))
            seq += len(array)
        return batches
