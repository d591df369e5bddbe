"""Names holding backticks, from a real PostgreSQL 18: a table ``bt`tbl`` keyed by ``id`k`` with columns
``c`b``, ``a`.b`` (a backtick and a dot), ``` ` ``` (only a backtick) and a TOASTed ``doc```; a table without
a key; a table whose history tracks one such column. The lander's initial snapshot, then three apply
batches (inserts, updates with unchanged TOAST, a key change, deletes, duplicates; then more than
NEW_KEYS_APPEND_MIN new keys beside an update), with silver's Change Data Feed on (the default): silver,
the history tables and silver's change feed against PostgreSQL. One module: the capture is applied once."""

from __future__ import annotations

import pytest
from pg_lake import PgLake

from cdc_apply.delta.engine import spark_tables
from cdc_apply.lake.silver import replace_rows
from cdc_apply.lake.silver.merge import NEW_KEYS_APPEND_MIN

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

T, BAG, TRACKED = "bt`tbl", "bag`", "tr`ack"
SETUP = [
    'CREATE TABLE "bt`tbl" ("id`k" int PRIMARY KEY, "c`b" text, "a`.b" int, "`" text, "doc`" text)',
    'ALTER TABLE "bt`tbl" ALTER COLUMN "doc`" SET STORAGE EXTERNAL',   # stored out of line, uncompressed
    'CREATE TABLE "bag`" ("x`" int, "y`.z" text)',
    'ALTER TABLE "bag`" REPLICA IDENTITY FULL',
    'CREATE TABLE "tr`ack" ("k`" int PRIMARY KEY, "st`atus" text, "seen`" int)',
    """INSERT INTO "bt`tbl" SELECT g, 'c' || g, g, '`' || g, repeat(md5(g::text), 100) FROM generate_series(1, 20) g""",
    """INSERT INTO "bag`" VALUES (1, 'a'), (1, 'a'), (2, NULL)""",
    """INSERT INTO "tr`ack" VALUES (1, 'new', 0)""",
]
CONFIG = {"silver": {"history": ["public.*"]}, "tables": {f"public.{TRACKED}": {"track_columns": ["st`atus"]}}}


@pytest.fixture(scope="module")
def applied(postgres, spark, tmp_path_factory):
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("backticks"), "backticks", SETUP, CONFIG)
    lake.land_and_apply()                                   # the initial snapshot
    lake.run("""INSERT INTO "bt`tbl" VALUES (100, 'new', 100, 'n', 'small')""")
    lake.run("""UPDATE "bt`tbl" SET "c`b" = 'upd', "`" = NULL WHERE "id`k" = 1""")          # doc` unchanged TOAST
    lake.run("""UPDATE "bt`tbl" SET "id`k" = 200, "a`.b" = -2 WHERE "id`k" = 2""")          # a key change, same
    lake.run("""DELETE FROM "bt`tbl" WHERE "id`k" = 3""")
    lake.run("""UPDATE "bt`tbl" SET "c`b" = 'twice' WHERE "id`k" = 4""",
             """UPDATE "bt`tbl" SET "a`.b" = 44 WHERE "id`k" = 4""")
    lake.run("""INSERT INTO "bag`" VALUES (1, 'a')""")
    lake.run("""DELETE FROM "bag`" WHERE ctid = (SELECT min(ctid) FROM "bag`" WHERE "x`" = 1)""")
    lake.run("""UPDATE "bag`" SET "y`.z" = 'b' WHERE "x`" = 2""")
    lake.run("""UPDATE "tr`ack" SET "seen`" = 1 WHERE "k`" = 1""")                         # untracked: in place
    lake.run("""UPDATE "tr`ack" SET "st`atus" = 'open', "seen`" = 2 WHERE "k`" = 1""")     # tracked: a version
    crashed = []
    with pytest.MonkeyPatch.context() as patch:     # the job dies between a table's two commits, then runs again
        patch.setattr(replace_rows, "_delete_matching", _crash_once(crashed, replace_rows._delete_matching))
        with pytest.raises(Exception, match="injected crash"):
            lake.land_and_apply()
    lake.apply()
    first = {"silver": lake.silver_differences(), "history": lake.history_differences()}
    lake.run(f"""INSERT INTO "bt`tbl" SELECT g, 'bulk', g, NULL, 'd' FROM generate_series(1000, {999 + NEW_KEYS_APPEND_MIN}) g""",
             """UPDATE "bt`tbl" SET "`" = 'again' WHERE "id`k" = 5""")
    lake.land_and_apply()
    yield lake, first, crashed[0]
    lake.close()


class Crash(RuntimeError):
    pass


def _crash_once(crashed: list, delete):
    def crash(spark, ref, *args):
        if not crashed:
            crashed.append(ref)
            raise Crash("injected crash after the replacing write, before the delete")
        return delete(spark, ref, *args)

    return crash


def test_silver_equals_postgresql_after_updates_a_key_change_and_deletes_of_backtick_named_columns(applied):
    lake, first, _ = applied
    assert first["silver"] == []


def test_silver_equals_postgresql_after_a_batch_of_new_keys_appended_beside_an_update(applied):
    lake, _, _ = applied
    assert lake.silver_differences() == []


def test_history_tables_with_backtick_names_hold_every_state_postgresql_went_through(applied):
    lake, first, _ = applied
    # The tracked table's history changes its open version in place (its own test below says how).
    assert [d for d in first["history"] + lake.history_differences() if TRACKED not in d] == []


def test_track_columns_naming_a_backtick_column_open_versions_only_for_its_changes(applied):
    from cdc_apply.delta.refs import history_ref

    lake, _, _ = applied
    rows = history_ref(lake.config, "public", TRACKED, lake.SOURCE).read(lake.spark).collect()
    versions = sorted((r["_cdc_valid_from_lsn"], r["st`atus"], r["seen`"], r["_cdc_closed_by"]) for r in rows)
    assert [v[1:] for v in versions] == [("new", 1, "update"), ("open", 2, None)]


def test_silvers_change_feed_shows_the_update_of_a_backtick_named_column(applied):
    from pyspark.sql import functions as F

    from cdc_apply.delta.refs import silver_ref

    lake, _, _ = applied
    ref = silver_ref(lake.config, "public", T, lake.SOURCE)
    feed = lake.spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(ref.path)
    changes = {(r["_change_type"], r["c`b"]) for r in feed.where(F.col("`id``k`") == 1).collect()}
    assert {kind for kind, value in changes if value == "c1"} & {"delete", "update_preimage"}
    assert {kind for kind, value in changes if value == "upd"} & {"insert", "update_postimage"}


def test_a_crash_between_the_replacing_write_and_the_delete_leaves_each_commit_written_once(applied):
    import json

    lake, _, crashed = applied
    tags = [json.loads(r.userMetadata)["cdc_apply"] for r in spark_tables(lake.spark).delta_table(crashed).history()
            .where("userMetadata IS NOT NULL").select("userMetadata").collect()]
    replaced = [t["replaces_for_step"] for t in tags if "replaces_for_step" in t]
    steps = [t["apply_step"] for t in tags if "apply_step" in t]
    assert replaced and len(replaced) == len(set(replaced)) and len(steps) == len(set(steps))
    assert set(replaced) <= set(steps)      # each first commit's step was recorded by its delete


def test_a_backtick_column_of_a_table_without_deletion_vectors_stops_the_batch_naming_the_remedy(spark, tmp_path):
    from types import SimpleNamespace

    from cdc_apply.delta.refs import TableRef
    from cdc_apply.errors import ApplyError

    ref = TableRef(path=str(tmp_path / "n`dv"))
    spark.sql(f"CREATE TABLE {ref.sql} (`id``` INT, `v``` STRING) USING delta TBLPROPERTIES ("
              "'delta.enableChangeDataFeed' = 'true', 'delta.enableDeletionVectors' = 'false', "
              "'delta.columnMapping.mode' = 'name')")
    work = SimpleNamespace(ref=ref, columns=[SimpleNamespace(name="id`"), SimpleNamespace(name="v`")], meta=[],
                           qualified_name="public.n`dv", source="src")
    with pytest.raises(ApplyError, match="only with deletion vectors"):
        replace_rows.needs_replace(spark_tables(spark), work)
