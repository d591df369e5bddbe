"""Silver table DDL: schema chains applied to a real Delta table, and re-run after a crash."""

from __future__ import annotations

import pytest

from cdc_apply.delta.ddl import create_table
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.silver.schema_changes import apply_schema_ops
from cdc_apply.planning.tables import SchemaOp

pytestmark = pytest.mark.spark

PROPS = {"delta.columnMapping.mode": "name", "delta.enableChangeDataFeed": "true"}
DROP_A_RENAME_B_TO_A = [SchemaOp("drop", "a"), SchemaOp("rename", "b", new_name="a")]


# As silver.readers = "delta-rs" makes them: no column mapping, type widening or deletion vectors.
PLAIN_PROPS = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "false"}


def _table(spark, tmp_path, props: dict[str, str] = PROPS) -> TableRef:
    ref = TableRef(path=str(tmp_path / "t"))
    create_table(spark_tables(spark), ref, [("id", "INT"), ("a", "STRING"), ("b", "STRING")], props)
    spark.sql(f"INSERT INTO {ref.sql} VALUES (1, 'old a', 'was b')")
    return ref


def _state(spark, ref: TableRef):
    df = ref.read(spark)
    return df.columns, sorted(tuple(r) for r in df.collect())


def test_a_chain_that_reuses_a_dropped_name_run_twice_keeps_the_renamed_columns_values(spark, tmp_path):
    ref = _table(spark, tmp_path)
    apply_schema_ops(spark_tables(spark), ref, DROP_A_RENAME_B_TO_A, chain="1->3")
    assert _state(spark, ref) == (["id", "a"], [(1, "was b")])
    apply_schema_ops(spark_tables(spark), ref, DROP_A_RENAME_B_TO_A, chain="1->3")   # the batch re-run after a crash
    assert _state(spark, ref) == (["id", "a"], [(1, "was b")])


def test_a_chain_cut_short_by_a_crash_resumes_at_the_first_step_not_done(spark, tmp_path):
    ref = _table(spark, tmp_path)
    apply_schema_ops(spark_tables(spark), ref, DROP_A_RENAME_B_TO_A[:1], chain="1->3")  # died after the drop
    apply_schema_ops(spark_tables(spark), ref, DROP_A_RENAME_B_TO_A, chain="1->3")
    assert _state(spark, ref) == (["id", "a"], [(1, "was b")])
    history = spark.sql(f"DESCRIBE HISTORY {ref.sql}").select("operation").collect()
    assert [r.operation for r in history].count("DROP COLUMNS") == 1


def test_a_chain_on_a_table_without_column_mapping_is_one_overwrite_that_a_rerun_skips(spark, tmp_path):
    ref = _table(spark, tmp_path, PLAIN_PROPS)
    chain = DROP_A_RENAME_B_TO_A + [SchemaOp("add", "n", spark_ddl="INT"), SchemaOp("retype", "id", spark_ddl="BIGINT",
                                                                                     old_ddl="INT", in_place=True)]
    for _ in range(2):   # the second: the batch re-run after a crash
        apply_schema_ops(spark_tables(spark), ref, chain, chain="1->5", mapped=False)
        df = ref.read(spark)
        assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
            ("id", "bigint"), ("a", "string"), ("n", "int")]
        assert [tuple(r) for r in df.collect()] == [(1, "was b", None)]
    history = spark.sql(f"DESCRIBE HISTORY {ref.sql}").collect()
    assert [r.operation for r in history].count("WRITE") == 2   # the INSERT and the one overwrite
    assert "columnMapping.mode" not in str(spark.sql(f"SHOW TBLPROPERTIES {ref.sql}").collect())


def test_adds_alone_on_a_table_without_column_mapping_are_one_add_columns(spark, tmp_path):
    ref = _table(spark, tmp_path, PLAIN_PROPS)
    apply_schema_ops(spark_tables(spark), ref, [SchemaOp("add", "c", spark_ddl="INT"),
                                                SchemaOp("add", "d", spark_ddl="STRING")], chain="1->3", mapped=False)
    assert _state(spark, ref) == (["id", "a", "b", "c", "d"], [(1, "old a", "was b", None, None)])
    last = spark.sql(f"DESCRIBE HISTORY {ref.sql} LIMIT 1").collect()[0]
    assert last.operation == "ADD COLUMNS"


def test_schema_steps_leave_no_commit_metadata_behind_for_later_writes(spark, tmp_path):
    ref = _table(spark, tmp_path)
    apply_schema_ops(spark_tables(spark), ref, [SchemaOp("add", "c", spark_ddl="INT")], chain="1->2")
    spark.sql(f"INSERT INTO {ref.sql} VALUES (2, 'x', 'y', 3)")
    last = spark.sql(f"DESCRIBE HISTORY {ref.sql} LIMIT 1").collect()[0]
    assert last.operation == "WRITE" and last.userMetadata is None


def _operations(spark, path) -> list[str]:
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    return [r.operation for r in history]


def _version_seq(spark, path) -> str:
    props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    return props["cdc_apply.relation_version_seq"]


def test_a_later_run_writes_no_property_commit_unless_the_relation_changed(lake):
    from cdc_apply.testing.stream import StreamBuilder

    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "a"})
    lake.land(b)
    lake.apply()
    path = lake.root / "silver" / "public" / "t"
    first = _operations(lake.spark, path)
    assert first.count("SET TBLPROPERTIES") == 1          # a new table says whose it is
    with b.transaction() as tx:                          # a new process (apply run), the same relation
        tx.update(t, {"id": 1, "v": "b"})
    lake.land(b)
    lake.apply()
    second = _operations(lake.spark, path)
    assert second[len(first):] == ["MERGE"]
    before = _version_seq(lake.spark, path)
    t2 = b.relation("public", "t", [("id", "int4", True), ("v", "text", False), ("w", "int4", False)], oid=t.oid,
                    emit=False)
    with b.transaction() as tx:                          # a new relation version: its seq is the table's to say
        tx.relation(t2)
        tx.insert(t2, {"id": 2, "v": "c", "w": 3})
    lake.land(b)
    lake.apply()
    third = _operations(lake.spark, path)[len(second):]
    assert "SET TBLPROPERTIES" in third
    assert int(_version_seq(lake.spark, path)) > int(before)
    assert sorted(tuple(r) for r in lake.silver("public.t").select("id", "v", "w").collect()) == [
        (1, "b", None), (2, "c", 3)]
