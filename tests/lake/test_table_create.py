"""A table whose creation was killed before its first commit (a ``_delta_log/`` folder without a commit) is
created again by the next run, for every kind of table the job makes; a folder that is no Delta table at
all is never emptied, and named."""

from __future__ import annotations

import os
import time

import pytest

from cdc_apply.delta.bronze_schema import create_bronze_table
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.refs import TableRef
from cdc_apply.delta.table_create import ensure_path_table
from cdc_apply.errors import StateError
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def _killed_creation(table) -> None:
    """What Delta leaves when killed between making the log folder and writing its first commit."""
    log = table / "_delta_log"
    (log / "_staged_commits").mkdir(parents=True)
    (log / ".00000000000000000000.json.5d1c2b0a-tmp").write_text('{"commitInfo":{}}')
    # A minute old, as after a kill and a restart; a younger one is left a while to its creator.
    old = time.time() - 60
    for path in (log / "_staged_commits", log / ".00000000000000000000.json.5d1c2b0a-tmp", log):
        os.utime(path, (old, old))


def test_state_silver_and_history_tables_killed_before_their_first_commit_are_created_by_the_next_run(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    lake = lake_factory("killed_creations", silver={"history": ["public.*"]})
    for table in ("progress", "type_cache", "schema_history"):
        _killed_creation(lake.root / "state" / table)
    _killed_creation(lake.root / "silver" / "public" / "t")
    _killed_creation(lake.root / "silver_history" / "public" / "t")
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "x"})
    lake.land(b.rows())
    lake.apply()
    assert [r.id for r in lake.silver("public", "t").collect()] == [1]
    assert lake.state("progress").count() == 1
    assert lake.spark.read.format("delta").load(str(lake.root / "silver_history" / "public" / "t")).count() == 1


def test_a_bronze_killed_before_its_first_commit_is_created_by_the_next_lander(spark, tmp_path):
    _killed_creation(tmp_path / "bronze")
    create_bronze_table(spark_tables(spark), str(tmp_path / "bronze"))
    assert spark.read.format("delta").load(str(tmp_path / "bronze")).columns[:4] == ["source", "seq", "lsn", "payload"]


def test_a_create_meeting_another_creators_table_with_other_properties_is_a_race_to_retry():
    from cdc_apply.delta.table_create import _is_race

    # The error a lander met when the other lander's bronze commit landed during its CREATE ... IF NOT EXISTS.
    seen = ("[DELTA_CREATE_TABLE_WITH_DIFFERENT_PROPERTY] The specified properties do not match the existing "
            "properties at /lake/bronze.\n\n== Specified ==\ndelta.appendOnly=true\n\n== Existing ==\n"
            "delta.appendOnly=true\ndelta.enableChangeDataFeed=false\n")
    assert _is_race(RuntimeError(seen))


def test_a_folder_of_files_that_is_no_delta_table_is_named_and_left_as_it_is(spark, tmp_path):
    folder = tmp_path / "someone_elses"
    folder.mkdir()
    (folder / "part-0.parquet").write_bytes(b"PAR1")
    with pytest.raises(StateError) as info:
        ensure_path_table(spark, TableRef(path=str(folder)),
                     lambda: spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{folder}` (a INT) USING delta"))
    assert "holds files but no Delta table" in str(info.value) and "part-0.parquet" in str(info.value)
    assert sorted(p.name for p in folder.iterdir()) == ["part-0.parquet"]


def test_a_log_folder_younger_than_the_settling_time_is_left_to_its_creator_until_it_commits(spark, tmp_path):
    import shutil
    import threading

    made_elsewhere = tmp_path / "elsewhere"
    spark.sql(f"CREATE TABLE delta.`{made_elsewhere}` (a INT) USING delta")
    commit = made_elsewhere / "_delta_log" / "00000000000000000000.json"
    table = tmp_path / "being_created"
    (table / "_delta_log").mkdir(parents=True)
    # The other process: its folder now, its first commit two seconds later.
    other = threading.Timer(2.0, lambda: shutil.copy(commit, table / "_delta_log" / commit.name))
    other.start()
    made = ensure_path_table(spark, TableRef(path=str(table)), lambda: pytest.fail("the other creator's folder was taken"))
    other.join()
    assert made is False and spark.read.format("delta").load(str(table)).columns == ["a"]
