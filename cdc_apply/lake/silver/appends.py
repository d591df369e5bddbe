"""Appends into silver: rows no silver row can match, written without a MERGE's join.

Two cases (docs/ARCHITECTURE.md, "New keys by append"): a batch's keys that are new (their first
event in the batch is an insert or a move-in, after its last truncate) once the table's Inserts reach
``NEW_KEYS_APPEND_MIN``, and batches that only insert (keyless tables: each Insert adds one copy;
keyed tables: every key new). Files are sized by the rows written and sorted by key, so file
statistics bound key ranges tightly for the MERGEs that follow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdc_apply.delta.names import quote_ident
from cdc_apply.lake.books.commit_tag import decode_tag, encode_tag
from cdc_apply.lake.silver.merge_result import MergeResult
from cdc_apply.planning import columns as cc
from cdc_apply.planning.table_plan import TableWork

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Values (rows x columns) per file of an append (append_rows): ~1M rows of an 8-column table.
CELLS_PER_FILE = 8_000_000


def append_new_keys(spark: SparkSession, collapsed, work: TableWork, metadata: str, count: int) -> int:
    """Append the collapsed rows of keys new in this batch (``_new``, kept and complete): rows no silver
    row can match; ``count`` of them (:func:`split_new_keys` counted them), which sizes the files. Its
    ``userMetadata`` marks it as the batch's new-key part. Returns ``count``."""
    from pyspark.sql import functions as F

    rows = collapsed.where(_appended())
    values = [F.col(cc.final(i)).alias(c.name) for i, c in enumerate(work.columns)]
    meta = [F.col(src).alias(col) for col, src in work.meta] + live_marker(work)
    if count:
        out = rows.select(*values, *meta).coalesce(append_files(count, len(work.columns)))
        tag = decode_tag(metadata)
        assert tag is not None  # ``metadata`` is the batch step's own tag (the ledger's write)
        work.ref.append(_key_sorted(out, work), None, 0, encode_tag({**tag, "part": "new keys"}))
    return count


def split_new_keys(collapsed, work: TableWork) -> tuple[int, Any, Any, int]:
    """``(rows to MERGE, their lowest key, highest key, rows to append)`` of collapsed rows whose new keys
    (``_new``) are appended and the others merged — one job where a key range and a count of the rows
    to append were two. The range only for a single-column key (``None`` otherwise)."""
    from pyspark.sql import functions as F

    merged, appended = ~F.col("_new"), _appended()
    counts = [F.count(F.when(merged, 1)), F.count(F.when(appended, 1))]
    single = len(work.key_index) == 1
    key = F.col(cc.key(0))
    bounds = [F.min(F.when(merged, key)), F.max(F.when(merged, key))] if single else []
    row = collapsed.agg(*counts, *bounds).first()
    return row[0], row[2] if single else None, row[3] if single else None, row[1]


def _appended():
    """The collapsed rows an append of new keys writes: new, kept, complete."""
    from pyspark.sql import functions as F

    return F.col("_new") & (F.col("_action") == "upsert") & F.col("_complete")


def _key_sorted(rows, work: TableWork):
    """Rows sorted by key within each file written: the file's min/max statistics then bound a key
    range tightly, and a MERGE limited to a batch's key range (merge_keyed) skips the other files."""
    from pyspark.sql import functions as F

    if not work.key:
        return rows
    return rows.sortWithinPartitions(*[F.col(quote_ident(work.columns[i].name)) for i in work.key_index])


def live_marker(work: TableWork) -> list:
    """A soft-deleting table's marker column, false (live), for appended rows; nothing otherwise."""
    from pyspark.sql import functions as F

    return [] if work.deleted is None else [F.lit(False).alias(work.deleted)]


def append_files(rows: int, columns: int) -> int:
    """Files for an append of ``rows`` rows of ``columns`` columns: about CELLS_PER_FILE values each."""
    return max(1, -(-rows * (columns + 2) // CELLS_PER_FILE))


def append_rows(spark: SparkSession, projected, work: TableWork, metadata: str, inserts: int | None) -> MergeResult:
    """Inserts only, where a MERGE has nothing to match: append the new rows as they are.

    Used for keyless tables whose batch only inserts (each Insert adds one copy) and for keyed batches
    whose keys are all new. The write carries ``metadata`` (its step: see cdc_apply.lake.books.ledger).
    ``inserts`` (the batch's Inserts of the table, from its counts) is what the append writes, and
    sizes the files: otherwise each partition of the decoded batch would write one. ``None``: unknown,
    one file per partition (a snapshot's load, whose partitions are bronze's file splits).
    """
    from pyspark.sql import functions as F

    values = [F.col(cc.value(i)).alias(c.name) for i, c in enumerate(work.columns)]
    meta = [F.col(src).alias(col) for col, src in work.meta] + live_marker(work)
    rows = projected.where(F.col(cc.OP) == "I").select(*values, *meta)
    # The decoded batch's partitions each hold rows of every table: an initial load of ten tables would
    # otherwise leave each with dozens of small files for every MERGE to visit.
    if inserts is not None:
        rows = rows.coalesce(append_files(inserts, len(work.columns)))
    work.ref.append(_key_sorted(rows, work), None, 0, metadata)
    return MergeResult(inserted=inserts or 0)
