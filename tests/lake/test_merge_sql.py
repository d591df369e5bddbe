"""The MERGE's SQL text for a Spark Connect session (pure): key bounds, chunk ranges."""

from __future__ import annotations

from types import SimpleNamespace

from cdc_apply.lake.silver.merge_sql import key_bounds_sql, key_ranges_sql


def test_key_bounds_join_the_condition_as_a_between_of_cast_literals():
    text = key_bounds_sql("t.`id` = s.`k0`", "t.`id`", (3, 9), "bigint")
    assert text == "(t.`id` = s.`k0`) AND t.`id` BETWEEN CAST(3 AS bigint) AND CAST(9 AS bigint)"


def test_key_bounds_without_a_literal_form_leave_the_condition_unbounded():
    assert key_bounds_sql("t.`a` = s.`k0`", "t.`a`", ([1], [2]), "array<int>") == "t.`a` = s.`k0`"


def test_chunk_ranges_become_one_delete_condition_with_open_ends():
    column = SimpleNamespace(name="id", spark_ddl="int")
    work = SimpleNamespace(columns=[column], clears=[SimpleNamespace(column=0, low=None, high=10),
                                                     SimpleNamespace(column=0, low=20, high=None)])
    assert key_ranges_sql(work) == "(`id` < CAST(10 AS int)) OR (`id` >= CAST(20 AS int))"


def test_a_soft_tables_keyed_merge_over_connect_marks_deleted_rows_and_revives_them_in_sql_text():
    from cdc_apply.delta.sql_table import SqlDeltaTable
    from cdc_apply.lake.silver.soft_deletes import keyed_soft_delete
    from cdc_apply.planning import columns as cc

    work = SimpleNamespace(deleted="_cdc_deleted", meta=(("_cdc_commit_lsn", cc.COMMIT_LSN),
                                                         ("_cdc_commit_ts", cc.COMMIT_TS), ("_cdc_xid", cc.XID)))
    assignments, values = {"`v`": "s.`_f_0`"}, {"`v`": "s.`_f_0`"}
    merge = SqlDeltaTable(None, SimpleNamespace(sql="delta.`/silver/t`"), "t").merge(None, "t.`id` = s.`k_0`")
    merge, upsert = keyed_soft_delete(merge, work, assignments, values)
    merge.whenMatchedUpdate(condition=upsert, set=assignments).whenNotMatchedInsert(values=values)
    text = merge.statement("v")
    assert ("WHEN MATCHED AND s._action = 'delete' AND NOT coalesce(t.`_cdc_deleted`, false) THEN UPDATE SET "
            f"`_cdc_deleted` = true, `_cdc_commit_lsn` = s.`{cc.COMMIT_LSN}`, `_cdc_commit_ts` = s.`{cc.COMMIT_TS}`, "
            f"`_cdc_xid` = s.`{cc.XID}`") in text
    assert ("WHEN MATCHED AND s._action = 'upsert' AND (s._complete OR NOT coalesce(t.`_cdc_deleted`, false)) "
            "THEN UPDATE SET `v` = s.`_f_0`, `_cdc_deleted` = false") in text
    assert "DELETE" not in text and "VALUES (s.`_f_0`, false)" in text
