"""An Arrow table as one Parquet file of a Delta table, and the statistics Delta keeps of that file.

No Spark and no JVM here: :func:`cdc_apply.delta.commit.append_arrow` writes the bytes into the table's
folder and lists the file in a commit. The statistics are the part of Delta's own that readers of these
files rely on (``numRecords``; ``minValues``/``maxValues``/``nullCount`` of the integer columns and of
string columns whose values all fit Delta's 32-character prefix); a column without them is one Delta
cannot skip files by, never one it skips wrongly.
"""

from __future__ import annotations

import io
import json
import uuid
from typing import NamedTuple, Protocol

import pyarrow as pa

STRING_STATS_CHARS = 32   # Delta's default prefix for string min/max (delta.dataSkippingStringPrefixLength)


class AddedFile(Protocol):
    """A Parquet file in a table's folder, not yet committed — what :mod:`cdc_apply.delta.commit` (Delta's
    JVM classes) and :mod:`cdc_apply.delta.rs_commit` (delta-rs) commit. Read-only: a NamedTuple such as
    :class:`ParquetFile` is one."""

    @property
    def name(self) -> str: ...          # relative to the table's folder

    @property
    def size(self) -> int: ...          # bytes

    @property
    def rows(self) -> int: ...

    @property
    def stats(self) -> str | None: ...  # Delta's per-file statistics (JSON); None: none kept


class ParquetFile(NamedTuple):
    """A Parquet file's bytes on their way into a table's folder (an :class:`AddedFile`)."""
    name: str         # relative to the table's folder
    data: bytes
    rows: int
    stats: str | None  # Delta's per-file statistics (JSON); None: none kept

    @property
    def size(self) -> int:
        return len(self.data)


def parquet_file(table: pa.Table, stats: bool = True) -> ParquetFile:
    """``table`` as the bytes of one snappy Parquet file under a new name, with its Delta statistics unless
    ``stats`` is false (``spark.databricks.delta.stats.collect = false``: Delta's writer keeps none)."""
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy")
    return ParquetFile(f"part-00000-{uuid.uuid4()}-c000.snappy.parquet", out.getvalue(), table.num_rows,
                       file_stats(table) if stats else None)


def file_stats(table: pa.Table) -> str:
    """Delta's statistics JSON of a file holding ``table``'s rows (see the module for which columns)."""
    import pyarrow.compute as pc

    low, high, nulls = {}, {}, {}
    for name, column in zip(table.column_names, table.columns):
        kind = column.type
        if pa.types.is_integer(kind):
            bounds = pc.min_max(column)
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            longest = pc.max(pc.utf8_length(column)).as_py()
            if longest is not None and longest > STRING_STATS_CHARS:
                continue
            bounds = pc.min_max(column)
        else:
            continue
        nulls[name] = column.null_count
        if bounds["min"].is_valid:
            low[name], high[name] = bounds["min"].as_py(), bounds["max"].as_py()
    return json.dumps({"numRecords": table.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls})
