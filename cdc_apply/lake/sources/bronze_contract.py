"""The bronze contract checked on every batch: (source, seq) unique, rows appended in seq order.

A replay of bronze (a lost checkpoint) is told from rows appended late, below the applied seq, by the
number of bronze rows at or below that seq: bronze only grows, so a replay finds as many rows as when
they were applied (the count the progress row's state carries), a late append more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_apply.config import Config
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import BronzeError
from cdc_apply.planning.state import SourceState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def check_late_rows(spark: SparkSession, bronze: TableRef, config: Config, states: dict[str, SourceState],
                    stats) -> None:
    """Rows at or below a source's applied seq in a micro-batch (``stats``: per source its first seq)
    are a replay (nothing to do) or rows appended below what was applied: a :class:`BronzeError`."""
    from pyspark.sql import functions as F

    for source, row in stats.items():
        state = states.get(source)
        if (state is None or row.first is None or int(row.first) > state.applied_seq
                or config.format_of(source) != "pgoutput"):
            continue
        now = rows_through(spark, bronze, source, state.applied_seq)
        if state.applied_rows is not None and now > state.applied_rows:
            late = sorted(int(r.seq) for r in bronze.read(spark).where(
                (F.col("source") == source) & (F.col("seq") <= state.applied_seq)
                & (F.col("seq") >= int(row.first))).select("seq").limit(10_000).collect())
            raise BronzeError(
                f"{now - state.applied_rows} row(s) were appended below the applied seq {state.applied_seq} "
                "(bronze rows must be appended in seq order; these would never be applied)",
                source=source, seq=late[0] if late else int(row.first), applied_rows=state.applied_rows,
                bronze_rows=now)


def rows_through(spark: SparkSession, bronze: TableRef, source: str, seq: int) -> int:
    from pyspark.sql import functions as F

    return bronze.read(spark).where((F.col("source") == source) & (F.col("seq") <= seq)).count()


def applied_rows(spark: SparkSession, bronze: TableRef, source: str, previous: SourceState) -> int:
    """Bronze rows of ``source`` with seq <= its previous applied seq (counted once for older states)."""
    if previous.applied_rows is not None:
        return previous.applied_rows
    if previous.applied_seq < 0:
        return 0
    return rows_through(spark, bronze, source, previous.applied_seq)


def count_rows(fresh, bronze_rows=None) -> dict[str, int]:
    """Rows per source among a batch's new bronze rows; a (source, seq) found twice is a
    :class:`BronzeError` before anything is applied (a keyless table would take the change twice).

    ``bronze_rows``, the same rows read from the bronze table itself, lets a batch whose files hold
    runs of consecutive seqs prove them unique without a shuffle (:func:`count_runs`); otherwise, or
    when that proof fails, every (source, seq) is counted."""
    from pyspark.sql import functions as F

    if bronze_rows is not None:
        counted = count_runs(bronze_rows)
        if counted is not None:
            return counted
    per_seq = fresh.groupBy("source", "seq").agg(F.count(F.lit(1)).alias("n"))
    counted = per_seq.groupBy("source").agg(F.sum("n").alias("rows"), F.max("n").alias("most")).collect()
    for r in counted:
        if r.most > 1:
            dup = per_seq.where((F.col("source") == r.source) & (F.col("n") > 1)).orderBy("seq").first()
            raise landed_twice(r.source, int(dup.seq), dup.n)
    return {r.source: int(r.rows) for r in counted}


def landed_twice(source: str, seq: int, rows: int) -> BronzeError:
    """The bronze contract's error for a (source, seq) found ``rows`` times in a batch."""
    return BronzeError(f"(source, seq) landed more than once ({rows} rows); (source, seq) must be unique",
                       source=source, seq=seq)


def count_runs(bronze_rows) -> dict[str, int] | None:
    """Rows per source when the batch's (source, seq) are provably unique from runs alone, else None.

    Rows are grouped by Spark partition, bronze file and source, and each group's ``seq`` minus the
    row's position in its partition (``monotonically_increasing_id``) is compared: when it is the same
    for every row, the group's seqs are distinct (positions are) and fill ``[lo, hi]``. Groups whose
    ranges do not overlap hold no seq twice. A lander writes each file's seqs consecutively, so a
    10M-row snapshot batch is a handful of groups: one partial aggregate instead of a shuffle of every
    row's key. A file in any other order answers None."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    # The file's size and time tell its rows apart from another file's packed into the same partition
    # (a path string per row costs as much again). Two files that share both are one group, judged as
    # soundly: the positions of one partition's rows are distinct.
    try:
        groups = bronze_rows.select(
            F.spark_partition_id().alias("part"), F.col("_metadata.file_size").alias("size"),
            F.col("_metadata.file_modification_time").alias("time"), "source", "seq",
            (F.col("seq") - F.monotonically_increasing_id()).alias("offset"),
        ).groupBy("part", "size", "time", "source").agg(
            F.count(F.lit(1)).alias("n"), F.min("seq").alias("lo"), F.max("seq").alias("hi"),
            F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset")).collect()
    except AnalysisException:   # a bronze without file metadata (a view): counted the other way
        return None
    ranges: dict[str, list[tuple[int, int, int]]] = {}
    for g in groups:
        if g.first_offset != g.last_offset:
            return None
        ranges.setdefault(g.source, []).append((int(g.lo), int(g.hi), int(g.n)))
    for runs in ranges.values():
        runs.sort()
        if any(a[1] >= b[0] for a, b in zip(runs, runs[1:])):
            return None
    return {source: sum(n for _, _, n in runs) for source, runs in ranges.items()}
