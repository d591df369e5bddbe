"""A micro-batch's bounds from its files' Delta statistics (cdc_apply.lake.sources.micro_batch) against the
bounds query over the micro-batch, on real streams of a bronze table."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from cdc_apply.delta.bronze_schema import create_bronze_table
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.sources.micro_batch import micro_batch_bounds, scanned_files
from cdc_apply.testing.pytest_plugin import append_bronze

pytestmark = pytest.mark.spark


def _rows(source: str, first: int, last: int) -> list[tuple]:
    return [(source, seq, 1000 + seq, b"I" + bytes(20)) for seq in range(first, last + 1)]


def _bronze(spark, tmp_path, *commits) -> TableRef:
    path = str(tmp_path / "bronze")
    create_bronze_table(spark_tables(spark), path)
    for rows in commits:
        append_bronze(spark, path, rows)
    return TableRef(path=path)


def _queried(df) -> dict[str, tuple]:
    got = df.groupBy("source").agg(F.max("seq"), F.min("seq"), F.count(F.lit(1))).collect()
    return {r[0]: tuple(r[1:]) for r in got}


def _each_batch(spark, bronze: TableRef, tmp_path, look, files_per_trigger: int = 1) -> list:
    """``look(df)`` of each micro-batch of a stream over ``bronze`` (one file a micro-batch)."""
    seen = []
    query = (spark.readStream.format("delta").option("maxFilesPerTrigger", files_per_trigger).load(bronze.path)
             .writeStream.foreachBatch(lambda df, _: seen.append(look(df)))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    return seen


def _as_tuples(bounds) -> dict[str, tuple] | None:
    return None if bounds is None else {s: (b.last, b.first, b.n) for s, b in bounds.items()}


def test_each_micro_batch_s_bounds_from_its_files_statistics_equal_the_bounds_query(spark, tmp_path):
    bronze = _bronze(spark, tmp_path, _rows("a", 1, 40), _rows("b", 1, 7), _rows("a", 41, 45), _rows("b", 8, 8))
    seen = _each_batch(spark, bronze, tmp_path,
                       lambda df: (_as_tuples(micro_batch_bounds(spark_tables(spark), df, bronze, None)), _queried(df)), 2)
    assert [stats for stats, _ in seen] == [queried for _, queried in seen]
    assert [stats for stats, _ in seen] == [{"a": (40, 1, 40), "b": (7, 1, 7)}, {"a": (45, 41, 5), "b": (8, 8, 1)}]


def test_the_bounds_keep_only_the_sources_the_job_reads(spark, tmp_path):
    bronze = _bronze(spark, tmp_path, _rows("a", 1, 3), _rows("b", 1, 2))
    seen = _each_batch(spark, bronze, tmp_path,
                       lambda df: _as_tuples(micro_batch_bounds(spark_tables(spark), df, bronze, {"b"})), 2)
    assert seen == [{"b": (2, 1, 2)}]


def test_a_file_of_two_sources_leaves_the_bounds_to_the_query(spark, tmp_path):
    bronze = _bronze(spark, tmp_path, _rows("a", 1, 3) + _rows("b", 1, 2))
    seen = _each_batch(spark, bronze, tmp_path,
                       lambda df: (len(scanned_files(df)), micro_batch_bounds(spark_tables(spark), df, bronze, None)))
    assert seen == [(1, None)]


def test_a_file_with_a_deletion_vector_leaves_the_bounds_to_the_query(spark, tmp_path):
    bronze = _bronze(spark, tmp_path, _rows("a", 1, 10))
    spark.sql(f"ALTER TABLE {bronze.sql} SET TBLPROPERTIES ('delta.appendOnly' = 'false', "
              "'delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM {bronze.sql} WHERE seq = 10")
    seen = _each_batch(spark, bronze, tmp_path,
                       lambda df: (micro_batch_bounds(spark_tables(spark), df, bronze, None), _queried(df)))
    assert seen == [(None, {"a": (9, 1, 9)})]


def test_a_file_compacted_away_since_its_micro_batch_leaves_the_bounds_to_the_query(spark, tmp_path):
    bronze = _bronze(spark, tmp_path, _rows("a", 1, 5), _rows("a", 6, 9))

    def look(df):
        spark.sql(f"OPTIMIZE {bronze.sql}")   # the micro-batch's files are no longer live
        return micro_batch_bounds(spark_tables(spark), df, bronze, None), _queried(df)

    assert _each_batch(spark, bronze, tmp_path, look, 2) == [(None, {"a": (9, 1, 9)})]
