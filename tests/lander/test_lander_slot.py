"""The slot bronze was landed from, and no other: a dropped or re-created slot stops the lander.

Changes made while a source had no slot are not in WAL the new slot can decode;
starting anew would lose them without a word.
"""

from __future__ import annotations

import time

import pytest
from lander_helpers import bronze_rows, create_slot, make_config, run_lander, slot_confirmed

from cdc_apply.errors import LandError

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

DB = "land_slot"


@pytest.fixture(scope="module")
def db(postgres):
    postgres.create_database(DB)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=DB)
    postgres.execute("CREATE PUBLICATION pub FOR ALL TABLES", dbname=DB)
    return postgres


def slot_exists(pg, slot: str) -> bool:
    return bool(pg.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,), dbname=DB))


def drop_slot(pg, slot: str) -> None:
    """Drop ``slot`` once the walsender of the lander's last session has let go of it."""
    deadline = time.monotonic() + 30
    while pg.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,), dbname=DB)[0][0]:
        assert time.monotonic() < deadline, f"slot {slot} stays active"
        time.sleep(0.1)
    pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,), dbname=DB)


def land_some(pg, spark, tmp_path, slot: str, first: int):
    config = make_config(tmp_path, pg.dsn(DB), slot, slot, "pub", create_slot=True)
    run_lander(config, spark)                          # creates the slot: bronze holds nothing yet
    pg.execute(f"INSERT INTO t VALUES ({first}, 'landed'), ({first + 1}, 'landed')", dbname=DB)
    summary, _ = run_lander(config, spark)
    assert summary.messages == 5                       # B R I I C
    return config, summary.state


def test_a_dropped_slot_is_an_error_not_a_new_start(db, spark, tmp_path):
    config, landed = land_some(db, spark, tmp_path, "dropped", 100)
    drop_slot(db, "dropped")
    db.execute("INSERT INTO t VALUES (102, 'made while there was no slot')", dbname=DB)
    with pytest.raises(LandError) as err:
        run_lander(config, spark)
    text = str(err.value)
    assert "replication slot 'dropped' does not exist" in text and "may be lost" in text
    assert f"up to seq {landed.last_seq}" in text and "source.name" in text and "re-snapshot" in text
    assert err.value.context["source"] == "dropped" and err.value.context["seq"] == landed.last_seq
    assert not slot_exists(db, "dropped")              # create_slot = true did not start a new one
    assert len(bronze_rows(spark, tmp_path / "bronze", "dropped")) == landed.last_seq + 1


def test_a_slot_dropped_and_created_again_by_hand_is_the_same_error(db, spark, tmp_path):
    config, landed = land_some(db, spark, tmp_path, "recreated", 200)
    drop_slot(db, "recreated")
    db.execute("INSERT INTO t VALUES (202, 'made while there was no slot')", dbname=DB)
    create_slot(db, DB, "recreated")
    with pytest.raises(LandError) as err:
        run_lander(config, spark)
    text = str(err.value)
    assert "replication slot 'recreated' starts at" in text and "past" in text and "may be lost" in text
    assert f"seq {landed.last_seq}" in text and "restart lsn" in text
    assert len(bronze_rows(spark, tmp_path / "bronze", "recreated")) == landed.last_seq + 1


def test_a_slot_the_lander_confirmed_past_bronze_itself_is_not_mistaken_for_a_new_one(
        db, spark, tmp_path, monkeypatch):
    import cdc_apply.lander.lander as lander

    config, landed = land_some(db, spark, tmp_path, "followed", 300)
    # WAL the slot's publication sends nothing of: the lander confirms past bronze's last unit when idle.
    db.execute("CREATE TABLE IF NOT EXISTS unpublished (id int)", dbname="postgres")
    db.execute("INSERT INTO unpublished SELECT generate_series(1, 2000)", dbname="postgres")
    monkeypatch.setattr(lander, "FOLLOW_BYTES", 1)
    followed = []
    run_lander(config, spark, probe=lambda event, **info: followed.append(info["flush"]) if event == "followed" else None)
    assert followed and slot_confirmed(db, DB, "followed") == followed[-1] > landed.resume_lsn
    db.execute("INSERT INTO t VALUES (302, 'after')", dbname=DB)
    summary, _ = run_lander(config, spark)
    assert summary.messages == 4                       # B R I C: started, nothing lost, nothing twice


def test_a_second_lander_of_a_slot_stops_before_writing_while_the_first_holds_the_lander_lock(db, spark, tmp_path):
    from cdc_apply.lander.server import LOCK_PREFIX

    config = make_config(tmp_path, db.dsn(DB), "locked", "locked", "pub", create_slot=True)
    holder = db.connect(DB)        # the first lander's session, as far as the lock goes
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (LOCK_PREFIX + "locked",))
            assert cur.fetchone()[0]
        with pytest.raises(LandError) as err:
            run_lander(config, spark)
        assert "another lander is landing slot 'locked'" in str(err.value)
        assert err.value.context["slot"] == "locked"
        assert not (tmp_path / "bronze").exists() and not slot_exists(db, "locked")
    finally:
        holder.close()                 # the lock goes with its session, as a killed lander's does
    summary, _ = run_lander(config, spark)
    assert slot_exists(db, "locked") and summary.state.batch >= 1
