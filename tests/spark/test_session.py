from __future__ import annotations

import logging
import re

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable

from cdc_apply import SetupError, spark_session
from cdc_apply.cli import main as cli
from cdc_apply.spark.session import java_version, local_cores

pytestmark = pytest.mark.spark


def test_merge_into_a_delta_table_gives_the_expected_rows(spark, tmp_path):
    path = str(tmp_path / "customers")
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id INT, name STRING").write.format("delta").save(path)
    changes = spark.createDataFrame([(2, "B", "U"), (3, None, "D"), (4, "d", "I")], "id INT, name STRING, op STRING")
    (
        DeltaTable.forPath(spark, path).alias("t")
        .merge(changes.alias("s"), "t.id = s.id")
        .whenMatchedDelete("s.op = 'D'")
        .whenMatchedUpdate(set={"name": "s.name"})
        .whenNotMatchedInsert(values={"id": "s.id", "name": "s.name"})
        .execute()
    )
    expected = spark.createDataFrame([(1, "a"), (2, "B"), (4, "d")], "id INT, name STRING")
    assert_df_equality(spark.read.format("delta").load(path), expected, ignore_row_order=True)


def test_spark_session_returns_the_active_delta_session(spark):
    assert spark_session() is spark


def test_settings_given_while_a_session_runs_are_named_in_a_warning_where_they_differ_from_its_own(spark):
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("cdc_apply.spark")
    logger.addHandler(handler)
    try:
        got = spark_session("job", **{"spark.sql.shuffle.partitions": "7", "spark.sql.session.timeZone": "UTC"})
    finally:
        logger.removeHandler(handler)
    assert got is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert [r.getMessage() for r in records] == [
        "a Spark session is already running and is used as it is; these settings differ from its own and were not "
        "applied: spark.sql.shuffle.partitions=7 (the session has 2)"]


def test_version_names_the_delta_the_running_session_loaded(spark, capsys):
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    line = capsys.readouterr().out.strip()
    assert re.search(r"; Delta io\.delta:delta-spark_4\.1_2\.13:4\.4\.0 pinned, loaded 4\.4\.0 by the running session "
                     r"\(/\S+/delta-spark_4\.1_2\.13-4\.4\.0\.jar\)\)$", line), line


def test_local_session_uses_utc_and_one_task_per_core(spark):
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.sparkContext.defaultParallelism == 2
    assert spark.conf.get("spark.databricks.delta.snapshotPartitions") == "1"


@pytest.mark.parametrize(("master", "cores"), [("local", 1), ("local[2]", 2), ("local[16]", 16), ("local[4,3]", 4),
                                               ("spark://host:7077", None), ("yarn", None)])
def test_the_task_counts_follow_a_local_masters_cores(master, cores):
    assert local_cores(master) == cores


def test_local_star_means_every_cpu_of_the_machine():
    import os

    assert local_cores("local[*]") == os.cpu_count()


def test_local_session_keeps_a_batch_worth_of_generated_classes_compiled(spark):
    # A batch over ten tables compiles a few hundred distinct classes; Spark's default cache holds 100.
    assert int(spark.sparkContext.getConf().get("spark.sql.codegen.cache.maxEntries")) >= 1000


def test_the_local_jvm_runs_in_utc_so_delta_commits_skip_the_non_utc_state_rebuild(spark):
    assert spark.sparkContext._jvm.java.util.TimeZone.getDefault().getID() == "UTC"


def test_missing_java_is_a_setup_error_naming_what_to_install(tmp_path):
    with pytest.raises(SetupError, match="install a Java 17"):
        java_version(str(tmp_path / "no-java"))
