"""Delta over a local Spark Connect server (the ``connect_spark`` fixture, docs/CONNECT.md), and what
``cdc_apply.spark_session()`` does with Spark Connect: takes a running session as it is, and builds one
with Delta when ``SPARK_REMOTE`` asks for a local server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_apply import SetupError
from cdc_apply.spark.connect import USER_METADATA
from cdc_apply.spark.session import CONNECT_UNSUPPORTED

pytestmark = pytest.mark.connect

CHECKOUT = Path(__file__).resolve().parents[2]


def test_the_fixture_s_session_is_a_spark_connect_session(connect_spark):
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    from pyspark.sql.utils import is_remote

    assert isinstance(connect_spark, ConnectSession)
    assert is_remote()
    assert connect_spark.conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"


def test_a_delta_table_created_merged_and_read_back_over_connect_has_the_merged_rows(connect_spark, tmp_path):
    table = f"delta.`{tmp_path / 'customers'}`"
    connect_spark.sql(f"CREATE TABLE {table} (id INT, name STRING) USING delta").collect()
    connect_spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (3, 'c')").collect()
    changes = connect_spark.createDataFrame([(2, "B", "U"), (3, None, "D"), (4, "d", "I")],
                                            "id INT, name STRING, op STRING")
    changes.createOrReplaceTempView("changes")
    connect_spark.sql(f"""
        MERGE INTO {table} t USING changes s ON t.id = s.id
        WHEN MATCHED AND s.op = 'D' THEN DELETE
        WHEN MATCHED THEN UPDATE SET name = s.name
        WHEN NOT MATCHED THEN INSERT (id, name) VALUES (s.id, s.name)""").collect()
    rows = connect_spark.read.format("delta").load(str(tmp_path / "customers")).orderBy("id").collect()
    assert [tuple(r) for r in rows] == [(1, "a"), (2, "B"), (4, "d")]


def test_map_in_arrow_over_connect_runs_the_function_in_the_server_s_python_workers(connect_spark):
    def doubled(batches):
        import pyarrow as pa
        import pyarrow.compute as pc

        for batch in batches:
            yield pa.RecordBatch.from_arrays([pc.multiply(batch.column(0), 2)], names=["x"])

    rows = connect_spark.range(4).mapInArrow(doubled, "x BIGINT").orderBy("x").collect()
    assert [r.x for r in rows] == [0, 2, 4, 6]


def test_describe_history_shows_the_user_metadata_set_on_the_connect_session(connect_spark, tmp_path):
    table = f"delta.`{tmp_path / 'tagged'}`"
    connect_spark.sql(f"CREATE TABLE {table} (id INT) USING delta").collect()
    connect_spark.conf.set(USER_METADATA, '{"app":"cdc_apply","apply_step":65}')
    try:
        connect_spark.sql(f"INSERT INTO {table} VALUES (1)").collect()
    finally:
        connect_spark.conf.unset(USER_METADATA)
    connect_spark.sql(f"INSERT INTO {table} VALUES (2)").collect()
    history = connect_spark.sql(f"DESCRIBE HISTORY {table}").orderBy("version").collect()
    assert [(r.version, r.operation, r.userMetadata) for r in history] == [
        (0, "CREATE TABLE", None), (1, "WRITE", '{"app":"cdc_apply","apply_step":65}'), (2, "WRITE", None)]


def test_a_child_session_over_connect_is_a_clone_kept_and_handed_out_again_with_the_given_settings_reset(
        connect_spark):
    """A dropped Connect session closes the release pool all Connect clients share (a deadlock when the
    garbage collector runs it in gRPC's callback thread): the tables' sessions are kept and reused."""
    import gc
    import weakref

    from cdc_apply.spark.connect import connect_clone as child_session

    dvs = "spark.databricks.delta.merge.deletionVectors.persistent"
    with child_session(connect_spark, (dvs,)) as first:
        with child_session(connect_spark, (dvs,)) as second:   # two tables at once: two clones
            assert second is not first and connect_spark not in (first, second)
        first.conf.set(dvs, "false")
        first.conf.set("spark.sql.shuffle.partitions", "3")
    clones = {weakref.ref(first), weakref.ref(second)}
    del first, second
    gc.collect()
    kept = {ref() for ref in clones}
    assert None not in kept   # not dropped
    with child_session(connect_spark, (dvs,)) as a, child_session(connect_spark, (dvs,)) as b:
        assert {a, b} == kept   # handed out again: no third clone
        changed = a if a.conf.get("spark.sql.shuffle.partitions") == "3" else b
        assert changed.conf.get("spark.sql.shuffle.partitions") == "3"   # its own settings stay
        assert changed.conf.get(dvs, None) != "false"                     # the given ones are reset
    assert connect_spark.conf.get("spark.sql.shuffle.partitions") != "3"   # never the caller's


def test_the_lander_refuses_a_connect_session_with_what_is_needed(connect_spark):
    from cdc_apply.spark.session import require_classic

    with pytest.raises(SetupError) as err:
        require_classic(connect_spark)
    assert CONNECT_UNSUPPORTED in str(err.value)


_BUILD_SCRIPT = """
import cdc_apply
spark = cdc_apply.spark_session()
spark.sql("SELECT 1").collect()
print(type(spark).__module__, spark.conf.get("spark.sql.extensions"))
spark.stop()
"""


@pytest.mark.system
def test_spark_session_builds_a_connect_session_with_delta_when_spark_remote_asks_for_a_local_server(tmp_path):
    # A fresh interpreter: this test process may run a classic JVM already.
    env = {**os.environ, "SPARK_REMOTE": "local[2]", "PYTHONPATH": str(CHECKOUT)}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    proc = subprocess.run([sys.executable, "-c", _BUILD_SCRIPT], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "pyspark.sql.connect.session io.delta.sql.DeltaSparkSessionExtension"


_USER_SCRIPT = """
import os, sys
from pyspark.sql import SparkSession
from cdc_apply.spark.connect import local_connect_settings

folder = sys.argv[1]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the server's Python workers run $PYSPARK_PYTHON
spark = SparkSession.builder.config(map=local_connect_settings(**{"spark.sql.warehouse.dir": folder + "/warehouse",
                                                                   "spark.driver.memory": "2g"})).getOrCreate()
table = f"delta.`{folder}/t`"
spark.sql(f"CREATE TABLE {table} (id INT) USING delta").collect()
spark.sql(f"INSERT INTO {table} VALUES (1), (2)").collect()
print(type(spark).__module__, spark.read.format("delta").load(folder + "/t").count(),
      spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").first().operation)
spark.stop()
"""


@pytest.mark.system
def test_spark_remote_local_runs_a_connect_server_with_delta_in_the_user_s_own_process(tmp_path):
    # The way a user starts it: SPARK_REMOTE=local[2] and a plain builder given the Delta settings; the
    # server runs in that process (on Connect's default port, 15002) and stops with its session.
    env = {**os.environ, "SPARK_REMOTE": "local[2]", "PYTHONPATH": str(CHECKOUT)}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    proc = subprocess.run([sys.executable, "-c", _USER_SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "pyspark.sql.connect.session 2 WRITE"
