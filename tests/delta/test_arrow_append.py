"""Arrow tables appended to Delta tables as pyarrow's Parquet files and one commit (delta.commit.append_arrow):
the rows Spark reads back, the commit Spark's writer would have made, and the tables that must be left to
Spark's writer."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from cdc_apply.delta.commit import append_arrow
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.refs import TableRef

pytestmark = pytest.mark.spark

DDL = ("source STRING, apply_version BIGINT, n INT, at TIMESTAMP, "
       "tables ARRAY<STRUCT<table: STRING, inserts: BIGINT>>, payload BINARY")
AT = datetime(2026, 5, 4, 3, 2, 1, 123456, tzinfo=timezone.utc)


def _rows(version: int, n: int = 3) -> pa.Table:
    return pa.table({
        "source": pa.array([f"s{k}" for k in range(n)]),
        "apply_version": pa.array([version] * n, pa.int64()),
        "n": pa.array([k if k else None for k in range(n)], pa.int32()),
        "at": pa.array([AT] * n, pa.timestamp("us", tz="UTC")),
        "tables": pa.array([[{"table": "public.t", "inserts": k}] if k % 2 else [] for k in range(n)],
                           pa.list_(pa.struct([("table", pa.string()), ("inserts", pa.int64())]))),
        "payload": pa.array([bytes([k, 0, 255]) for k in range(n)], pa.binary()),
    })


def _table(spark, path, properties: str = "") -> TableRef:
    spark.sql(f"CREATE TABLE delta.`{path}` ({DDL}) USING delta {properties}")
    return TableRef(path=str(path))


def _versions(spark, ref: TableRef) -> int:
    return spark_tables(spark).delta_table(ref).history().count()


def test_an_appended_arrow_table_reads_back_as_its_rows(spark, tmp_path):
    ref = _table(spark, tmp_path / "t")
    assert append_arrow(spark, ref, _rows(1)) and append_arrow(spark, ref, _rows(2, 2))
    got = sorted(tuple(r) for r in ref.read(spark).select("source", "apply_version", "n", "at", "payload").collect())
    assert got == sorted([(f"s{k}", 1, k or None, AT.replace(tzinfo=None), bytearray([k, 0, 255])) for k in range(3)]
                         + [(f"s{k}", 2, k or None, AT.replace(tzinfo=None), bytearray([k, 0, 255])) for k in range(2)])
    lists = {(r.source, r.apply_version): [tuple(t) for t in r.tables] for r in ref.read(spark).collect()}
    assert lists[("s1", 1)] == [("public.t", 1)] and lists[("s0", 2)] == []


def test_the_commit_is_an_append_as_spark_s_writer_records_it_with_statistics(spark, tmp_path):
    ref = _table(spark, tmp_path / "t")
    append_arrow(spark, ref, _rows(7), user_metadata='{"k": 1}')
    newest = spark_tables(spark).delta_table(ref).history(1).first()
    assert (newest.operation, newest.operationParameters["mode"], newest.userMetadata) == ("WRITE", "Append", '{"k": 1}')
    assert newest.operationMetrics["numOutputRows"] == "3" and newest.operationMetrics["numFiles"] == "1"
    assert spark_tables(spark).newest_added_max(ref, "apply_version") == 7
    added = [json.loads(line)["add"] for line in
             open(tmp_path / "t" / "_delta_log" / f"{int(newest.version):020d}.json") if '"add"' in line]
    stats = json.loads(added[0]["stats"])
    assert stats["numRecords"] == 3 and stats["nullCount"]["n"] == 1
    assert (stats["minValues"]["source"], stats["maxValues"]["source"]) == ("s0", "s2")
    assert os.path.getsize(tmp_path / "t" / added[0]["path"]) == added[0]["size"]
    # Delta skips files by these statistics: a query for a version no file holds reads none of them.
    assert ref.read(spark).where("apply_version = 8").count() == 0


def test_a_table_with_column_mapping_is_left_to_spark_s_writer(spark, tmp_path):
    ref = _table(spark, tmp_path / "t", "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    before = _versions(spark, ref)
    assert not append_arrow(spark, ref, _rows(1))
    assert _versions(spark, ref) == before
    assert not [f for f in os.listdir(tmp_path / "t") if f.endswith(".parquet")]


def test_a_column_of_another_type_is_left_to_spark_s_writer(spark, tmp_path):
    ref = _table(spark, tmp_path / "t")
    rows = _rows(1)
    wrong = rows.set_column(rows.column_names.index("n"), "n", pa.array(["1", "2", "3"]))
    assert not append_arrow(spark, ref, wrong)
    assert not append_arrow(spark, ref, pa.table({"other": pa.array([1])}))
    assert ref.read(spark).count() == 0


def test_a_null_in_a_not_null_column_is_left_to_spark_s_writer(spark, tmp_path):
    spark.sql(f"CREATE TABLE delta.`{tmp_path / 't'}` (source STRING, n INT NOT NULL) USING delta")
    ref = TableRef(path=str(tmp_path / "t"))
    assert not append_arrow(spark, ref, pa.table({"source": ["a"], "n": pa.array([None], pa.int32())}))
    assert append_arrow(spark, ref, pa.table({"source": ["a"], "n": pa.array([4], pa.int32())}))
    assert [tuple(r) for r in ref.read(spark).collect()] == [("a", 4)]


def test_a_catalog_table_is_left_to_spark_s_writer(spark):
    assert not append_arrow(spark, TableRef(name="default.no_such_table"), _rows(1))
