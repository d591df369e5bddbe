"""What the job asks of a classic session's plans (``cdc_apply.spark.connect``) without running a job."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from cdc_apply.delta.engine import ClassicTables


def _size(frame) -> int:
    """The bytes of the files ``frame`` reads, from the file system."""
    return sum(Path(urlparse(f).path).stat().st_size for f in frame.inputFiles())


def test_the_planned_bytes_of_a_delta_read_are_the_sizes_of_its_live_files(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.range(1000).selectExpr("id", "repeat('x', 50) AS v").write.format("delta").save(path)
    spark.range(1000, 1500).selectExpr("id", "repeat('y', 50) AS v").write.format("delta").mode("append").save(path)
    df = spark.read.format("delta").load(path)
    assert ClassicTables(spark).planned_bytes(df) == _size(df)
    first = df.where("id < 10")   # Delta skips the second append's files by their statistics
    assert ClassicTables(spark).planned_bytes(first) == _size(first) < _size(df)
