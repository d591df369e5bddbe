"""Reads as of a commit show the columns the table had then, from a real PostgreSQL 18: ``t`` keeps a
history table and gains a column with a default; ``plain`` keeps none (its reads travel to batch ends)
and has a column renamed. Three batches: the initial snapshot, an insert into each, then the ALTERs and
an update of each."""

from __future__ import annotations

import pytest
from pg_lake import PgLake

from cdc_apply import read_as_of
from cdc_apply.testing.history_check import check_as_of

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SETUP = [
    "CREATE TABLE t (id int PRIMARY KEY, v text)",
    "CREATE TABLE plain (id int PRIMARY KEY, v text)",
    "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 3) g",
    "INSERT INTO plain SELECT g, 'p' || g FROM generate_series(1, 2) g",
]
META = ["_cdc_commit_lsn", "_cdc_commit_ts"]


def _only(state, name: str):
    return [table for table in state if table.name == name]


@pytest.fixture(scope="module")
def altered(postgres, spark, tmp_path_factory):
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("as_of_columns"), "as_of_columns", SETUP,
                  {"silver": {"history": ["public.t"]}}, ddl_events=True)
    lake.land_and_apply()
    before = lake.run("INSERT INTO t VALUES (4, 'four')", "INSERT INTO plain VALUES (3, 'p3')")
    lake.land_and_apply()
    lake.run("ALTER TABLE t ADD COLUMN added int DEFAULT 7", "ALTER TABLE plain RENAME COLUMN v TO w")
    after = lake.run("UPDATE t SET v = 'one', added = 8 WHERE id = 1", "UPDATE plain SET w = 'x' WHERE id = 1")
    lake.land_and_apply()
    states = {lsn: tables for lsn, tables in lake.record.states}
    yield lake, (before, states[before]), (after, states[after])
    lake.close()


def test_a_read_as_of_a_commit_before_add_column_has_no_such_column(altered):
    lake, (before, state), _ = altered
    result = read_as_of(lake.spark, lake.config, before, tables=["public.t"])
    assert result.method == "history"
    assert result["public.t"].columns == ["id", "v", *META]
    assert check_as_of(lake.spark, lake.config, lake.SOURCE, before, _only(state, "t"), method="history") == []


def test_a_read_as_of_a_commit_after_add_column_shows_the_default_and_the_updated_value(altered):
    lake, _, (after, state) = altered
    result = read_as_of(lake.spark, lake.config, after, tables=["public.t"])
    assert result.method == "history" and result["public.t"].columns == ["id", "v", *META, "added"]
    assert sorted((r.id, r.v, r.added) for r in result["public.t"].collect()) == [
        (1, "one", 8), (2, "v2", 7), (3, "v3", 7), (4, "four", 7)]
    assert check_as_of(lake.spark, lake.config, lake.SOURCE, after, _only(state, "t"), method="history") == []


def test_a_read_by_time_travel_names_a_column_renamed_since_as_the_table_names_it_now(altered):
    lake, (before, state), _ = altered
    result = read_as_of(lake.spark, lake.config, before, tables=["public.t", "public.plain"])
    assert (result.method, result.exact) == ("time travel", True)
    assert result["public.plain"].columns == ["id", "w", *META]
    assert result["public.t"].columns == ["id", "v", *META]
    assert sorted(tuple(r) for r in result["public.plain"].select("id", "w").collect()) == [
        (1, "p1"), (2, "p2"), (3, "p3")]
    assert check_as_of(lake.spark, lake.config, lake.SOURCE, before, state, method="time travel") == []
