"""Bronze's newest seqs read without a JVM (delta-rs: live files' statistics, rows where they cannot say)
equal Spark's query through appends, a compaction (files removed) and rows deleted by a rewrite."""

from __future__ import annotations

import pytest

from cdc_apply.delta.bronze_schema import create_bronze_table, spark_schema
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.sources import bronze_files
from cdc_apply.lake.sources.bronze_tail import newest_seqs

pytestmark = pytest.mark.spark


def _append(spark, path: str, rows, files: int = 1) -> None:
    df = spark.createDataFrame([(s, q, q, b"x", None) for s, q in rows], spark_schema())
    df.repartition(files, "source").write.format("delta").mode("append").save(path) if files > 1 else \
        df.coalesce(1).write.format("delta").mode("append").save(path)


def _both(spark, path: str, floors: dict[str, int]) -> tuple[dict, dict]:
    return bronze_files.newest_seqs(TableRef(path=path), floors), newest_seqs(spark, TableRef(path=path), floors)


def test_newest_seqs_without_a_jvm_equal_spark_s_through_compactions_and_deletes(spark, tmp_path):
    path = str(tmp_path / "bronze")
    floors = {"pg": 0, "gs": 0, "none": 0}
    assert bronze_files.newest_seqs(TableRef(path=path), floors) == {}   # no bronze yet
    create_bronze_table(spark, path)
    _append(spark, path, [("pg", 0), ("pg", 1), ("gs", 0)], files=2)    # files by source (or one file of both)
    assert _both(spark, path, floors) == ({"pg": 1, "gs": 0},) * 2
    _append(spark, path, [("pg", 2), ("gs", 1), ("gs", 2)])             # one file of both sources: rows read
    assert _both(spark, path, floors) == ({"pg": 2, "gs": 2},) * 2
    assert _both(spark, path, {"pg": 3, "gs": 2}) == ({"gs": 2},) * 2   # below a floor is not newest
    assert spark.sql(f"OPTIMIZE delta.`{path}`").first().metrics.numFilesRemoved >= 2   # files removed
    assert _both(spark, path, floors) == ({"pg": 2, "gs": 2},) * 2
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE source = 'gs' AND seq = 2")   # the file rewritten
    assert _both(spark, path, floors) == ({"pg": 2, "gs": 1},) * 2
