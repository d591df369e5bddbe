"""The engine seam (cdc_apply/delta/engine.py): every engine answers the same questions of a table alike, and
which engine runs is asked at the entry points only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cdc_apply
from cdc_apply.delta.engine import ClassicTables, spark_tables
from cdc_apply.delta.refs import TableRef
from cdc_apply.delta.rs_tables import RsTables
from cdc_apply.errors import ConfigError

PACKAGE = Path(cdc_apply.__file__).parent
# The entry points that pick an engine from their session (and the test helpers users call as entry points).
ENTRY_POINTS = {"api.py", "lake/books/status.py", "lake/history/as_of.py", "lake/maintenance.py",
                "verification/run.py", "forgetting/run.py", "lander/bronze_rs.py", "testing/compare.py", "testing/history_check.py",
                "testing/differential.py", "testing/pytest_plugin.py"}


def _calls(name: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called == name:
                    where = str(path.relative_to(PACKAGE))
                    found[where] = found.get(where, 0) + 1
    return found


def test_only_the_engine_module_asks_whether_a_session_is_spark_connect():
    assert set(_calls("is_connect_session")) == {"delta/engine.py"}


def test_only_the_entry_points_choose_an_engine_from_a_session():
    assert set(_calls("spark_tables")) <= ENTRY_POINTS, set(_calls("spark_tables")) - ENTRY_POINTS


@pytest.fixture(scope="module")
def tagged(spark, tmp_path_factory):
    """A table of four commits through a classic session: created, two appends with an app transaction and
    userMetadata, one MERGE."""
    path = str(tmp_path_factory.mktemp("engines") / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (id INT, name STRING) USING delta")
    for step in (1, 2):
        (spark.createDataFrame([(step, f"n{step}")], "id INT, name STRING").write.format("delta").mode("append")
         .option("txnAppId", "engines-test").option("txnVersion", str(step))
         .option("userMetadata", f'{{"step":{step}}}').save(path))
    spark.sql(f"MERGE INTO delta.`{path}` t USING (SELECT 2 AS id, 'B' AS name) s ON t.id = s.id "
              "WHEN MATCHED THEN UPDATE SET name = s.name")
    return TableRef(path=path)


def _answers(tables, ref: TableRef) -> tuple:
    return (tables.exists(ref), tables.version(ref), tables.newest_version(ref), tables.commit_user_metadata(ref),
            tables.commit_user_metadata(ref, 2), tables.recorded_txn_version(ref, "engines-test"),
            tables.recorded_txn_version(ref, "no-such-app"))


def test_the_classic_engine_and_delta_rs_answer_alike_of_one_table(spark, tagged):
    classic = _answers(spark_tables(spark), tagged)
    assert type(spark_tables(spark)) is ClassicTables
    assert classic == _answers(RsTables(), tagged)
    assert classic[:3] == (True, 3, 3)
    assert [m for _, m in classic[3]] == [None, '{"step":2}', '{"step":1}', None]
    assert classic[5:] == (2, None)


def test_a_path_without_a_table_is_no_table_to_both_engines(spark, tmp_path):
    missing = TableRef(path=str(tmp_path / "missing"))
    for tables in (spark_tables(spark), RsTables()):
        assert (tables.exists(missing), tables.version(missing), tables.newest_version(missing)) == (False, None, None)


def test_delta_rs_names_a_table_it_cannot_reach_instead_of_guessing(monkeypatch):
    from cdc_apply.delta.storage import CONFIGURING, ENGINE_VARIABLE

    for name in (*CONFIGURING["s3"], ENGINE_VARIABLE):   # object storage whose credentials only Spark holds
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="not a path delta-rs reads here"):
        RsTables().exists(TableRef(path="s3://bucket/t"))
    with pytest.raises(ConfigError, match="not a path delta-rs reads here"):
        RsTables().version(TableRef(name="main.silver.t"))
