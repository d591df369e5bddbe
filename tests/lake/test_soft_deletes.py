"""Soft deletes (``deletes = "soft"``) on a real PostgreSQL 18 capture: ``k`` (keyed, with a history table),
``f`` (REPLICA IDENTITY FULL, no key) and ``plain`` (keyed, no history: reads as of a commit travel to
batch ends). Three batches: the initial snapshot; an insert, an update and deletes; then the deleted key
inserted again and ``plain`` truncated. Deleted rows stay in silver marked ``_cdc_deleted``; every reader
comparing silver with PostgreSQL reads them as absent."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pg_lake import PgLake

from cdc_apply.config import TableConfig
from cdc_apply.delta.engine import spark_tables
from cdc_apply.errors import SchemaError
from cdc_apply.testing.history_check import check_as_of
from tests.verify.test_verify_spark import verify_while_applying

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SETUP = [
    "CREATE TABLE k (id int PRIMARY KEY, v text)",
    "CREATE TABLE f (a int, b text)",
    "ALTER TABLE f REPLICA IDENTITY FULL",
    "CREATE TABLE plain (id int PRIMARY KEY, v text)",
    "INSERT INTO k SELECT g, 'v' || g FROM generate_series(1, 3) g",
    "INSERT INTO f VALUES (1, 'x'), (1, 'x'), (2, 'y')",
    "INSERT INTO plain SELECT g, 'p' || g FROM generate_series(1, 3) g",
]


def _rows(lake, name: str, version: int | None = None) -> list:
    reader = lake.spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(f"{lake.config.silver.path}/public/{name}").collect()


def _version(lake, name: str) -> int:
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(lake.spark, f"{lake.config.silver.path}/public/{name}")
    return int(table.history(1).first()["version"])


@pytest.fixture(scope="module")
def soft(postgres, spark, tmp_path_factory):
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("soft_deletes"), "soft_deletes", SETUP,
                  {"silver": {"soft_deletes": ["public.*"], "history": ["public.k"]}})
    lake.land_and_apply()
    first = lake.record.take(lake.conn)
    deleted = lake.run("INSERT INTO k VALUES (4, 'four')", "UPDATE k SET v = 'one' WHERE id = 1",
                       "DELETE FROM k WHERE id = 2", "DELETE FROM f WHERE a = 1", "INSERT INTO f VALUES (3, 'z')",
                       "DELETE FROM plain WHERE id = 1")
    lake.land_and_apply()
    after_delete = {name: (_version(lake, name), _rows(lake, name)) for name in ("k", "f", "plain")}
    revived = lake.run("INSERT INTO k VALUES (2, 'again')", "TRUNCATE plain")
    lake.land_and_apply()
    states = {lsn: tables for lsn, tables in lake.record.states}
    yield lake, first, (deleted, states[deleted]), after_delete, (revived, states[revived])
    lake.close()


def test_silver_equals_postgres_when_marked_rows_are_read_as_absent(soft):
    lake = soft[0]
    assert lake.silver_differences() == []


def test_a_deleted_row_stays_in_silver_marked_with_its_delete_commit(soft):
    lake, first, (deleted, _), after_delete, _ = soft
    rows = {r.id: r for r in after_delete["k"][1]}
    assert sorted(rows) == [1, 2, 3, 4]
    assert rows[2]._cdc_deleted is True and rows[2].v == "v2"
    assert first < rows[2]._cdc_commit_lsn <= deleted
    assert rows[2]._cdc_commit_lsn == rows[4]._cdc_commit_lsn   # one transaction
    assert [rows[i]._cdc_deleted for i in (1, 3, 4)] == [False, False, False]


def test_inserting_a_deleted_key_again_revives_its_row(soft):
    lake, _, (deleted, _), _, (revived, _) = soft
    rows = [r for r in _rows(lake, "k") if r.id == 2]
    assert len(rows) == 1
    assert rows[0]._cdc_deleted is False and rows[0].v == "again" and deleted < rows[0]._cdc_commit_lsn <= revived


def test_truncate_marks_every_row_deleted_instead_of_removing_it(soft):
    lake, _, (deleted, _), _, (revived, _) = soft
    rows = _rows(lake, "plain")
    assert sorted(r.id for r in rows) == [1, 2, 3]
    assert all(r._cdc_deleted for r in rows)
    truncated = {r._cdc_commit_lsn for r in rows if r.id != 1}
    assert len(truncated) == 1 and deleted < truncated.pop() <= revived
    assert next(r for r in rows if r.id == 1)._cdc_commit_lsn <= deleted   # marked by its own delete before


def test_a_keyless_full_table_marks_the_copies_it_removes(soft):
    lake, first, (deleted, _), after_delete, _ = soft
    rows = after_delete["f"][1]
    live = sorted((r.a, r.b) for r in rows if not r._cdc_deleted)
    marked = [r for r in rows if r._cdc_deleted]
    assert live == [(2, "y"), (3, "z")]
    assert [(r.a, r.b) for r in marked] == [(1, "x"), (1, "x")]
    assert all(first < r._cdc_commit_lsn <= deleted for r in marked)


def test_the_change_feed_shows_a_soft_delete_as_an_update(soft):
    lake = soft[0]
    feed = (lake.spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
            .load(f"{lake.config.silver.path}/public/k").where("id = 2").collect())
    kinds = [(r._change_type, r._cdc_deleted) for r in sorted(feed, key=lambda r: (r._commit_version, r._change_type))]
    assert "delete" not in {kind for kind, _ in kinds}
    assert ("update_preimage", False) in kinds and ("update_postimage", True) in kinds
    assert ("update_preimage", True) in kinds and ("update_postimage", False) in kinds   # the revival


def test_the_history_table_and_reads_as_of_agree_with_postgres(soft):
    lake, _, (deleted, at_delete), _, (revived, at_revive) = soft
    from cdc_apply.testing.history_check import check_history

    only = lambda state, names: [t for t in state if t.name in names]  # noqa: E731
    states = [(lsn, only(state, {"k"})) for lsn, state in lake.states()]
    assert check_history(lake.spark, lake.config, lake.SOURCE, states) == []
    for lsn, state in ((deleted, at_delete), (revived, at_revive)):
        assert check_as_of(lake.spark, lake.config, lake.SOURCE, lsn, only(state, {"k"}), method="history") == []
        assert check_as_of(lake.spark, lake.config, lake.SOURCE, lsn, only(state, {"k", "f", "plain"}),
                           method="time travel") == []


def test_verify_reads_marked_rows_as_absent_so_a_truncated_table_is_equal_and_a_live_row_marked_deleted_is_missing(
        soft):
    """One verify run: ``plain`` (every row marked by its truncate, PostgreSQL's table empty) is equal; in ``k``
    (the revived key live again) a live row marked deleted by hand is the one difference, missing."""
    lake = soft[0]
    lake.spark.sql(f"UPDATE delta.`{lake.config.silver.path}/public/k` SET _cdc_deleted = true WHERE id = 4")
    run = verify_while_applying(lake, [], 0, steady=False, tables=["public.k", "public.plain"])
    assert {t.table: t.status for t in run.tables} == {"public.k": "differs", "public.plain": "equal"}, run.lines()
    k = next(t for t in run.tables if t.table == "public.k")
    assert [(s.key, s.what) for s in k.samples] == [(("4",), "missing")], run.lines()


def test_a_table_holding_marked_rows_refuses_hard_deletes_naming_the_key(soft):
    from cdc_apply.lake.pipeline import ApplyPipeline

    lake = soft[0]
    lake.run("DELETE FROM k WHERE id = 3")
    import io

    from cdc_apply.lander.lander import Lander

    Lander(lake.lander_config, lake.spark, out=io.StringIO()).run(once=True)
    hard = replace(lake.config, tables={"public.k": TableConfig(deletes="hard")})
    with pytest.raises(SchemaError) as info:
        ApplyPipeline.open(spark_tables(lake.spark), hard, out=io.StringIO()).run(once=True)
    assert "key=tables.public.k.deletes" in str(info.value)
