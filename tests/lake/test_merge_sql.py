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
