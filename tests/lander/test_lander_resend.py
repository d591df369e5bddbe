"""A streamed transaction bronze holds part of, and what the walsender sends of it after a reconnect.

These interleave the workload with the lander (PostgreSQL decides what to send
again from the WAL decoded in the new session), then apply bronze with the
reference applier and compare with what PostgreSQL's tables hold.
"""

from __future__ import annotations

import re

import pytest
from lander_helpers import apply_reference, bronze_rows, create_slot, make_config, run_lander

from cdc_apply.lander import framing as f

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

DB = "land_resend"


@pytest.fixture(scope="module")
def db(postgres):
    postgres.create_database(DB)
    postgres.execute("CREATE PUBLICATION pub FOR ALL TABLES", dbname=DB)
    return postgres


def prepare(pg, name):
    # No autoanalyze: its catalog update would hand the open transaction a new snapshot, a change
    # that makes the walsender stream it again (and decides which case a test sees).
    no_auto = "WITH (autovacuum_enabled = false)"
    pg.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text) {no_auto}", dbname=DB)
    pg.execute(f"CREATE TABLE {name}_small (id int PRIMARY KEY) {no_auto}", dbname=DB)
    create_slot(pg, DB, name)


def insert_rows(cur, table, first, last):
    cur.execute(f"INSERT INTO {table} SELECT g, repeat('x', 200) FROM generate_series(%s, %s) g", (first, last))


def land_and_compare(pg, spark, tmp_path, name, expected_ids):
    """Bronze, applied by the reference applier, must give what PostgreSQL's tables hold."""
    mine = bronze_rows(spark, tmp_path / "bronze", name)
    tables = {f"public.{name}": name, f"public.{name}_small": f"{name}_small"}
    applied = apply_reference(mine, list(tables))
    for qualified, table in tables.items():
        ids = sorted(int(r[0]) for r in pg.execute(f"SELECT id FROM {table}", dbname=DB))
        assert sorted(int(r["id"]) for r in applied[qualified]) == ids
    assert sorted(int(r["id"]) for r in applied[f"public.{name}"]) == expected_ids
    return mine


def synthetic_aborts(rows):
    return [p for _, lsn, p in rows if lsn == 0 and p[:1] == f.STREAM_ABORT]


def test_a_subtransaction_rolled_back_while_away_makes_the_transaction_land_whole_again(db, spark, tmp_path):
    name = "resend_sub"
    prepare(db, name)
    config = make_config(tmp_path, db.dsn(DB), name, name, "pub")
    big = db.connect(DB, autocommit=False)
    with big.cursor() as cur:
        insert_rows(cur, name, 1, 400)
        cur.execute("SAVEPOINT s")
        insert_rows(cur, name, 401, 800)
        db.execute(f"INSERT INTO {name}_small VALUES (1)", dbname=DB)     # flushes the WAL before it
        first, _ = run_lander(config, spark)
        assert first.state.streams                                       # blocks of the open transaction
        cur.execute("ROLLBACK TO SAVEPOINT s")
        insert_rows(cur, name, 801, 1400)
    big.commit()
    big.close()
    db.execute(f"INSERT INTO {name}_small VALUES (2)", dbname=DB)
    second, out = run_lander(config, spark)
    assert "reading the slot again to land it whole" in out
    mine = land_and_compare(db, spark, tmp_path, name, list(range(1, 401)) + list(range(801, 1401)))
    assert len(synthetic_aborts(mine)) == 1


def test_a_streamed_transaction_sent_again_whole_voids_the_streamed_copy(db, spark, tmp_path):
    name = "resend_plain"
    prepare(db, name)
    config = make_config(tmp_path, db.dsn(DB), name, name, "pub")
    big = db.connect(DB, autocommit=False)
    with big.cursor() as cur:
        insert_rows(cur, name, 1, 400)
        db.execute(f"INSERT INTO {name}_small VALUES (1)", dbname=DB)
        run_lander(config, spark)
    # No change after the resume point: the walsender never streams it again (a change of a
    # spilled transaction would make it stream at once) and sends it as Begin ... Commit.
    big.commit()
    big.close()
    run_lander(config, spark)
    mine = land_and_compare(db, spark, tmp_path, name, list(range(1, 401)))
    kinds = "".join(chr(p[0]) for _, _, p in mine)
    assert len(synthetic_aborts(mine)) == 1 and "AB" in kinds, re.sub(r"I{3,}", lambda m: f"I*{len(m[0])}", kinds)


def test_a_streamed_transaction_that_aborted_while_away_is_closed_with_a_stream_abort(db, spark, tmp_path):
    name = "resend_abort"
    prepare(db, name)
    config = make_config(tmp_path, db.dsn(DB), name, name, "pub")
    big = db.connect(DB, autocommit=False)
    with big.cursor() as cur:
        insert_rows(cur, name, 1, 400)
        db.execute(f"INSERT INTO {name}_small VALUES (1)", dbname=DB)
        first, _ = run_lander(config, spark)
        assert first.state.streams
    big.rollback()
    big.close()
    db.execute(f"INSERT INTO {name}_small VALUES (2)", dbname=DB)
    second, out = run_lander(config, spark)
    assert "aborted before the server sent it again" in out
    assert second.state.streams == ()
    mine = land_and_compare(db, spark, tmp_path, name, [])
    assert len(synthetic_aborts(mine)) == 1

