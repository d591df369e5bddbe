"""The Spark Connect engine's reads of Delta's log (SQL alone) give what the classic engine's JVM reads give, on
the same table: the table is written by the classic ``spark`` session and read by both."""

from __future__ import annotations

import pytest

from cdc_apply.delta.engine import ClassicTables, ConnectTables, spark_tables
from cdc_apply.delta.refs import TableRef
from cdc_apply.testing.connect_server import connect_mode

pytestmark = [pytest.mark.spark, pytest.mark.connect]


@pytest.fixture(scope="module")
def tagged_table(spark, tmp_path_factory):
    """A table of four commits: created, two appends tagged through the writer's ``userMetadata``, one
    MERGE tagged through the session's ``commitInfo.userMetadata``."""
    path = str(tmp_path_factory.mktemp("log_connect") / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (id INT, name STRING) USING delta").collect()
    for step in (1, 2):
        (spark.createDataFrame([(step, f"n{step}")], "id INT, name STRING").write.format("delta").mode("append")
         .option("userMetadata", f'{{"apply_step":{step}}}').save(path))
    spark.createDataFrame([(2, "B")], "id INT, name STRING").createOrReplaceTempView("log_connect_changes")
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", '{"apply_step":3}')
    try:
        spark.sql(f"MERGE INTO delta.`{path}` t USING log_connect_changes s ON t.id = s.id "
                  "WHEN MATCHED THEN UPDATE SET name = s.name").collect()
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
    return TableRef(path=path)


def test_the_engine_of_a_connect_session_is_told_from_a_classic_one_s(spark, connect_session):
    assert type(spark_tables(connect_session)) is ConnectTables
    assert type(spark_tables(spark)) is ClassicTables


def test_the_newest_version_over_connect_is_the_one_the_jvm_reads(spark, connect_session, tagged_table):
    classic = (spark_tables(spark).newest_version(tagged_table), spark_tables(spark).version(tagged_table))
    with connect_mode():
        over_connect = (spark_tables(connect_session).newest_version(tagged_table), spark_tables(connect_session).version(tagged_table))
    assert classic == over_connect == (3, 3)


def test_the_files_bytes_over_connect_are_the_ones_the_jvm_reads(spark, connect_session, tagged_table):
    classic = spark_tables(spark).files_bytes(tagged_table)
    with connect_mode():
        over_connect = spark_tables(connect_session).files_bytes(tagged_table)
    assert classic is not None and classic > 0
    assert over_connect == classic


def test_each_commit_s_user_metadata_over_connect_is_the_one_delta_s_history_api_reads(spark, connect_session,
                                                                                       tagged_table):
    classic = spark_tables(spark).commit_user_metadata(tagged_table)
    with connect_mode():
        over_connect = spark_tables(connect_session).commit_user_metadata(tagged_table)
        newest_two = spark_tables(connect_session).commit_user_metadata(tagged_table, 2)
    assert classic == over_connect == [(3, '{"apply_step":3}'), (2, '{"apply_step":2}'), (1, '{"apply_step":1}'),
                                       (0, None)]
    assert newest_two == classic[:2]


def test_a_path_without_a_table_has_no_version_and_no_bytes_over_connect(connect_session, tmp_path):
    missing = TableRef(path=str(tmp_path / "missing"))
    with connect_mode():
        assert (spark_tables(connect_session).newest_version(missing), spark_tables(connect_session).version(missing),
                spark_tables(connect_session).files_bytes(missing)) == (None, None, None)
