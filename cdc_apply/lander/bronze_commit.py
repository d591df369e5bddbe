"""Bronze commits without Spark jobs: Parquet written by pyarrow, listed in one Delta transaction.

Spark's writer costs a bronze append four Spark jobs, and its ``txnAppId`` check rebuilds the
table's whole state (every file ever added) to read one number. Under a sustained load that made
an append of one second's changes take seconds. When the bronze table is a plain Delta table on a
local file system — the contract's columns only, no partitions, no column mapping, writer protocol
2 at most (``delta.appendOnly``, NOT NULL columns) — the lander writes the rows with pyarrow into the
table's folder and commits them as ``add`` actions through Delta's own ``OptimisticTransaction``
(:mod:`cdc_apply.delta.commit`), with the same ``SetTransaction`` (app id, batch) and ``userMetadata``
as Spark's writer would.

The batch already in bronze is read from the version checksum (``.crc``), which Delta keeps with
every ``SetTransaction`` while there are at most 100 of them; without one, from the table's state
as Delta's writer does. Either way the app id is registered as read by the transaction, so a batch
committed by another process between the read and the commit fails this commit
(``ConcurrentTransactionException``) instead of landing twice.
"""

from __future__ import annotations

import array
import json
import os
import uuid
from datetime import datetime, timedelta, timezone
from itertools import accumulate
from typing import Iterable, NamedTuple

import numpy as np
import pyarrow as pa

from cdc_apply.delta.bronze_schema import ARROW_SCHEMA
from cdc_apply.delta.commit import add_files
from cdc_apply.delta.log import plain_columns
from cdc_apply.delta.spark_errors import error_text
from cdc_apply.errors import LandError
from cdc_apply.lander.state import ResumeState

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
assert array.array("q").itemsize == 8 and array.array("i").itemsize == 4   # Arrow's int64 and int32 offsets
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
    columns = plain_columns(log)
    # A column of the user's own would be null in these files, unchecked; Spark's writer checks its NOT NULL.
    plain = columns is not None and sorted(columns) == sorted(ARROW_SCHEMA.names)
    return location if plain else None


def write_file(folder: str, batches: Iterable[pa.RecordBatch], filesystem=None) -> BronzeFile:
    """Write ``batches`` (bronze rows in seq order) to one new Parquet file in ``folder``; with
    ``filesystem`` (the table's :class:`~cdc_apply.delta.files.StoreFiles`, on object storage) the file is
    made in memory and written there by one upload."""
    import pyarrow.parquet as pq

    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    memory = pa.BufferOutputStream() if filesystem is not None else None
    path = os.path.join(folder, name) if memory is None else memory
    rows = 0
    bounds: dict[str, list[tuple[int, int]]] = {"seq": [], "lsn": []}   # column -> each batch's (min, max)
    sources: set[str] = set()
    with pq.ParquetWriter(path, ARROW_SCHEMA, compression="snappy") as out:
        for batch in batches:
            out.write_batch(batch)
            rows += batch.num_rows
            if batch.num_rows:
                for column in bounds:
                    bounds[column].append(_int_bounds(batch.column(column)))
                sources.update(_sources(batch.column("source")))
    low: dict[str, int | str] = {c: min(b[0] for b in v) for c, v in bounds.items() if v}
    high: dict[str, int | str] = {c: max(b[1] for b in v) for c, v in bounds.items() if v}
    if len(sources) == 1 and len(next(iter(sources))) <= STRING_STATS_CHARS:
        low["source"] = high["source"] = next(iter(sources))
    stats = json.dumps({"numRecords": rows, "minValues": low, "maxValues": high,
                        "nullCount": dict.fromkeys(ARROW_SCHEMA.names, 0)})
    if memory is None:
        return BronzeFile(name, os.path.getsize(path), rows, stats)
    data = memory.getvalue()
    filesystem.put(name, data.to_pybytes())
    return BronzeFile(name, data.size, rows, stats)


# A file's statistics without pyarrow.compute: importing it costs ~0.05–0.15 s, which a lander's first append
# would pay while the stream flows (the lander imports it nowhere else).
def _int_bounds(column: pa.Array) -> tuple[int, int]:
    """Min and max of an int64 column, from its buffer (nulls, which bronze's columns never hold: pyarrow's)."""
    if column.null_count:
        import pyarrow.compute as pc

        low_high = pc.min_max(column)
        return low_high["min"].as_py(), low_high["max"].as_py()
    values = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column), offset=column.offset * 8)
    return int(values.min()), int(values.max())


def _sources(column: pa.Array) -> set[str]:
    """The distinct values of a non-empty source column: one compare where all are the first (a lander's batch)."""
    first = column[0].as_py()
    if first is not None and column.equals(repeated_string(first, len(column))):
        return {first}
    return set(column.to_pylist())


def stream_batch(source: str, rows, landed_at: datetime) -> pa.RecordBatch:
    """Bronze rows for the lander's ``(seq, lsn, payload)`` tuples.

    The columns are made from buffers, not by ``pa.array``: converting Python objects makes pyarrow import
    pandas when it is installed (seconds before a lander's first commit), and the buffers are built in C.
    """
    n = len(rows)
    seqs, lsns, payloads = zip(*rows) if n else ((), (), ())
    return pa.RecordBatch.from_arrays([
        repeated_string(source, n),
        int64_array(seqs),
        int64_array(lsns),
        binary_array(payloads),
        repeated_timestamp(landed_at, n),
    ], schema=ARROW_SCHEMA)


def int64_array(values) -> pa.Array:
    """An int64 Arrow array of Python ints, without pyarrow's object conversion (see :func:`stream_batch`)."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(_int64s(values))])


def binary_array(values) -> pa.Array:
    """A binary Arrow array of ``bytes`` (under 2 GiB in all, the offsets being int32)."""
    offsets = array.array("i", [0])
    try:
        offsets.extend(accumulate(map(len, values)))
    except OverflowError:       # 2 GiB or more: pyarrow says what it says of such a column
        return pa.array(values, pa.binary())
    return pa.Array.from_buffers(pa.binary(), len(values), [None, pa.py_buffer(offsets),
                                                            pa.py_buffer(b"".join(values))])


def repeated_string(value: str, n: int) -> pa.Array:
    """``value`` ``n`` times as a string Arrow array."""
    data = value.encode("utf-8")
    offsets = array.array("i", range(0, len(data) * (n + 1), len(data))) if data else array.array("i", [0]) * (n + 1)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def repeated_timestamp(value: datetime, n: int) -> pa.Array:
    """``value`` (aware) ``n`` times as a ``timestamp[us, UTC]`` Arrow array."""
    micros = (value - _EPOCH) // timedelta(microseconds=1)
    return pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(_int64s([micros]) * n)])


def _int64s(values) -> array.array:
    return array.array("q", values)


def commit_files(writer, files: list[BronzeFile], state: ResumeState) -> int:
    """One Delta commit adding ``files`` with ``state`` as userMetadata and batch ``state.batch``; its version.

    Raises :class:`LandError` when the batch is already in bronze or another commit of this source's
    app id landed first; the files then stay unreferenced (VACUUM removes them)."""
    try:
        return add_files(writer.spark, writer.delta_log(), files, app=(writer.app_id, state.batch),
                         user_metadata=state.to_json(writer.app_id, writer.run_id),
                         check=lambda written: check_not_written(writer, written, state.batch))
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
    add_files(spark, log, [write_file(folder, [batch])])
    return True


def check_not_written(writer, written: int | None, batch: int) -> None:
    """Raise :class:`LandError` when bronze already records ``batch`` (or a later one) for this source."""
    if written is not None and written >= batch:
        raise LandError(f"batch {batch} of source {writer.source!r} is already in bronze (written by "
                        "another run): run one lander per source, then start this one again",
                        table=str(writer.ref), app_id=writer.app_id)
