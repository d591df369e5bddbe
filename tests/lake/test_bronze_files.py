"""Bronze's newest seqs read without a JVM (delta-rs: live files' statistics, rows where they cannot say)
equal Spark's query through appends, a compaction (files removed) and rows deleted by a rewrite."""

from __future__ import annotations

import pytest

from cdc_apply.delta.bronze_schema import create_bronze_table, spark_schema
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.sources import bronze_files
from cdc_apply.lake.sources.bronze_tail import newest_seqs

pytestmark = pytest.mark.spark


def _append(spark, path: str, rows, files: int = 1) -> None:
    df = spark.createDataFrame([(s, q, q, b"x", None) for s, q in rows], spark_schema())
    df.repartition(files, "source").write.format("delta").mode("append").save(path) if files > 1 else \
        df.coalesce(1).write.format("delta").mode("append").save(path)


def _both(spark, path: str, floors: dict[str, int]) -> tuple[dict, dict]:
    return bronze_files.newest_seqs(TableRef(path=path), floors), newest_seqs(spark_tables(spark), TableRef(path=path), floors)


def test_newest_seqs_without_a_jvm_equal_spark_s_through_compactions_and_deletes(spark, tmp_path):
    path = str(tmp_path / "bronze")
    floors = {"pg": 0, "gs": 0, "none": 0}
    assert bronze_files.newest_seqs(TableRef(path=path), floors) == {}   # no bronze yet
    create_bronze_table(spark_tables(spark), path)
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


def _commits(spark, path: str, source: str, seqs, minute: int, landed=None) -> None:
    """Rows of ``source``: a Commit (committed ``minute`` past 12:00) at each of ``seqs``, other rows between."""
    from datetime import datetime, timezone

    from cdc_apply.pgoutput import messages as m
    from cdc_apply.pgoutput.encoder import encode

    ts = int((datetime(2026, 12, 1, 12, minute, tzinfo=timezone.utc)
              - datetime(2000, 1, 1, tzinfo=timezone.utc)).total_seconds() * 1_000_000)
    commit = encode(m.Commit(0, 0x100, 0x200, ts))
    rows = [(source, q, q, commit if q in seqs else b"I....", landed) for q in range(min(seqs) - 3, max(seqs) + 1)]
    spark.createDataFrame(rows, spark_schema()).coalesce(1).write.format("delta").mode("append").save(path)


def test_the_job_s_ages_from_delta_rs_equal_spark_s_in_and_past_the_first_window(spark, tmp_path, monkeypatch):
    from datetime import datetime, timezone

    from cdc_apply.lake.sources import bronze_tail

    path = str(tmp_path / "bronze")
    create_bronze_table(spark_tables(spark), path)
    _commits(spark, path, "pg", [20], minute=1)
    _commits(spark, path, "pg", [40], minute=2)
    _commits(spark, path, "gs", [9], minute=3, landed=datetime(2026, 12, 1, 12, 4, tzinfo=timezone.utc))
    monkeypatch.setattr(bronze_tail, "FIRST_DUE_WINDOW", 5)   # the first due Commit past the window, then in it
    now = datetime(2026, 12, 1, 12, 10, tzinfo=timezone.utc)
    ref, newest = TableRef(path=path), {"pg": 40, "gs": 9}
    for applied in ({"pg": 10, "gs": 5}, {"pg": 17, "gs": 5}, {"pg": 20, "gs": 9}, {"pg": 40, "gs": 9}):
        local = bronze_files.local_unapplied_ages(ref, applied, newest, now, landed_only={"gs"})
        assert local == bronze_tail.unapplied_ages(spark, ref, applied, newest, now, landed_only={"gs"})
    assert bronze_files.local_unapplied_ages(ref, {"pg": 10, "gs": 5}, newest, now, {"gs"}) == {"pg": 540.0, "gs": 360.0}


def test_the_job_asks_spark_for_the_ages_of_a_bronze_delta_rs_cannot_open(spark, tmp_path):
    from datetime import datetime, timezone

    now = datetime(2026, 12, 1, 12, 10, tzinfo=timezone.utc)
    behind = ({"pg": 1}, {"pg": 5}, now)
    assert bronze_files.local_unapplied_ages(TableRef(path="s3a://bucket/bronze"), *behind) is None
    assert bronze_files.local_unapplied_ages(TableRef(name="main.cdc.bronze"), *behind) is None
    assert bronze_files.local_unapplied_ages(TableRef(path=str(tmp_path / "none")), *behind) is None
