"""Kill the lander anywhere, start it again: bronze ends up with every message exactly once.

Each scenario reads its own copy of one slot (all copied before the workload),
so each lands the very same changes; an uninterrupted landing is the reference.
"""

from __future__ import annotations

import io
import random
from collections import Counter
from dataclasses import replace

import pytest
from lander_helpers import (
    apply_reference,
    bronze_rows,
    change_counts,
    create_slot,
    make_config,
    peek,
    run_lander,
    slot_confirmed,
    slot_options,
    units,
)

from cdc_apply.delta.engine import spark_tables

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

DB = "land_crash"
SLOTS = ("crash_ref", "crash_append", "crash_stream", "crash_between", "crash_often")
LAND = {"batch_messages": 350}


class Crash(Exception):
    """Stands for kill -9: nothing after it runs (no final batch, no confirmation)."""


# One copy of a row of the keyless table (REPLICA IDENTITY FULL, duplicates): PostgreSQL's ctid picks it.
ONE_COPY = "(SELECT ctid FROM dups WHERE a = {a} AND b = '{b}' LIMIT 1)"


def workload(pg) -> None:
    """A streamed transaction interleaved with small commits, a prepared one and messages.

    The keyless table ``dups`` gets identical rows, deletes and updates of one of several copies, and
    updates of every copy, in the small commits, the prepared one and the streamed one.
    """
    run = lambda sql: pg.execute(sql, dbname=DB)  # noqa: E731
    big = pg.connect(DB, autocommit=False)
    try:
        with big.cursor() as cur:
            for part in range(3):
                cur.execute("INSERT INTO big SELECT g, repeat('x', 200) FROM generate_series(%s, %s) g",
                            (part * 320 + 1, part * 320 + 320))
                cur.execute(f"INSERT INTO dups SELECT {part}, 'streamed' FROM generate_series(1, 30)")
                cur.execute("DELETE FROM dups WHERE ctid = " + ONE_COPY.format(a=part, b="streamed"))
                cur.execute("UPDATE dups SET b = 'streamed, changed' WHERE ctid = "
                            + ONE_COPY.format(a=part, b="streamed"))
                for i in range(6):
                    run(f"INSERT INTO t VALUES ({part * 100 + i}, 'small {part}')")
                    run(f"INSERT INTO dups VALUES ({i % 2}, 'dup'), ({i % 2}, 'dup'), ({i % 2}, 'dup')")
                    change = ("DELETE FROM dups WHERE ctid = " if i % 3 == 0 else
                              "UPDATE dups SET b = 'one of three' WHERE ctid = ")
                    run(change + ONE_COPY.format(a=i % 2, b="dup"))
                run("UPDATE dups SET a = a + 10 WHERE b = 'one of three' AND a < 10")    # every copy
                if part == 1:
                    run("BEGIN; UPDATE t SET v = 'prepared' WHERE id < 3; "
                        "DELETE FROM dups WHERE ctid = " + ONE_COPY.format(a=0, b="dup") + "; "
                        "PREPARE TRANSACTION 'crash_g'")
                    run("SELECT pg_logical_emit_message(false, 'crash', 'between')")
                    run("COMMIT PREPARED 'crash_g'")
            # A change after the last small commit: wherever a restart resumes, the walsender meets
            # a change of this (spilled) transaction and streams it again rather than replaying it
            # as Begin ... Commit (test_lander_resend.py covers that case).
            cur.execute("INSERT INTO big VALUES (99999, 'last')")
        big.commit()
    finally:
        big.close()
    run("DELETE FROM t WHERE id >= 200")
    run("SELECT pg_logical_emit_message(true, 'crash', 'last')")


@pytest.fixture(scope="module")
def setup(postgres, spark, tmp_path_factory):
    postgres.create_database(DB)
    # No autoanalyze: a catalog update hands open transactions a new snapshot, which changes what
    # the walsender sends again after a restart (see test_lander_resend.py).
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = false)", dbname=DB)
    postgres.execute("CREATE TABLE big (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = false)",
                     dbname=DB)
    postgres.execute("CREATE TABLE dups (a int, b text) WITH (autovacuum_enabled = false)", dbname=DB)
    postgres.execute("ALTER TABLE dups REPLICA IDENTITY FULL", dbname=DB)
    postgres.execute("CREATE PUBLICATION pub FOR ALL TABLES", dbname=DB)
    create_slot(postgres, DB, SLOTS[0], twins=SLOTS[1:] + ("crash_twin",))
    workload(postgres)
    root = tmp_path_factory.mktemp("land_crash")

    def config(slot: str):
        return make_config(root / slot, postgres.dsn(DB), slot, slot, "pub", land=LAND)

    summary, _ = run_lander(config(SLOTS[0]), spark)
    reference = [(lsn, p) for _, lsn, p in bronze_rows(spark, root / SLOTS[0] / "bronze", SLOTS[0])]
    return root, config, reference, summary


@pytest.fixture(scope="module")
def dups(postgres, setup):
    """The keyless table's rows in PostgreSQL, with how many copies of each."""
    return Counter((a, b) for a, b in postgres.execute("SELECT a, b FROM dups", dbname=DB))


def decoded_dups(rows) -> Counter:
    """What the reference applier makes of bronze's rows of the keyless table."""
    numbered = [(i, lsn, p) for i, (lsn, p) in enumerate(rows)]
    return Counter((int(r["a"]), r["b"]) for r in apply_reference(numbered, ["public.dups"])["public.dups"])


def assert_same_landing(rows, reference, dups):
    """Every change exactly once, every transaction whole and in commit order, the same tables; the
    keyless table, where a change landed twice or lost would show, as PostgreSQL holds it."""
    assert change_counts(rows) == change_counts(reference)
    assert units(rows) == units(reference)
    tables = ["public.t", "public.big", "public.dups"]
    numbered = lambda rs: [(i, lsn, p) for i, (lsn, p) in enumerate(rs)]  # noqa: E731
    assert apply_reference(numbered(rows), tables) == apply_reference(numbered(reference), tables)
    assert decoded_dups(rows) == dups


def landed(spark, root, slot):
    rows = bronze_rows(spark, root / slot / "bronze", slot)
    assert [r[0] for r in rows] == sorted({r[0] for r in rows}), "seq must be unique and increasing"
    return [(lsn, p) for _, lsn, p in rows]


def test_the_uninterrupted_reference_matches_the_sql_interface_and_streams_across_commits(postgres, setup):
    _, _, reference, summary = setup
    assert [p for _, p in reference] == [p for _, p in peek(postgres, DB, "crash_twin", slot_options())]
    kinds = "".join(chr(p[0]) for _, p in reference)
    assert kinds.index("S") < kinds.index("C") < kinds.rindex("S")     # blocks before and after commits
    assert len(summary.batches) >= 3


def test_the_uninterrupted_reference_decodes_to_the_keyless_table_postgresql_holds(setup, dups):
    assert sum(dups.values()) > 50 and max(dups.values()) > 1     # duplicates, and many
    assert decoded_dups(setup[2]) == dups


def test_a_crash_after_the_delta_commit_and_before_the_flush_confirmation(postgres, spark, setup, dups):
    root, config, reference, _ = setup
    slot = "crash_append"
    appended = []

    def probe(event, **info):
        if event == "appended":
            appended.append(info["batch"])
            if len(appended) == 2:
                raise Crash()

    with pytest.raises(Crash):
        run_lander(config(slot), spark, probe=probe)
    assert slot_confirmed(postgres, DB, slot) < appended[-1].state.resume_lsn    # never confirmed
    summary, _ = run_lander(config(slot), spark)
    assert summary.batches[0].first_seq == appended[-1].state.last_seq + 1
    assert_same_landing(landed(spark, root, slot), reference, dups)
    assert slot_confirmed(postgres, DB, slot) >= summary.state.resume_lsn


def test_a_crash_in_the_middle_of_a_streamed_transaction(spark, setup, dups):
    root, config, reference, _ = setup
    slot = "crash_stream"
    seen = {"appended": 0, "in_block": 0, "blocks": 0}

    def probe(event, **info):
        if event == "appended":
            seen["appended"] += 1
        elif event == "message":
            kind = info["payload"][:1]
            if kind == b"S":
                seen["blocks"] += 1
                seen["in_block"] = 0
            elif kind == b"E":
                seen["in_block"] = -1
            elif seen["in_block"] >= 0:
                seen["in_block"] += 1
            # Blocks of the transaction are in bronze, more are coming, and one is half read.
            if seen["appended"] >= 1 and seen["blocks"] >= 2 and seen["in_block"] == 20:
                raise Crash()

    with pytest.raises(Crash):
        run_lander(config(slot), spark, probe=probe)
    summary, _ = run_lander(config(slot), spark)
    assert summary.replayed > 0          # the transaction was streamed again from its first change
    assert_same_landing(landed(spark, root, slot), reference, dups)


def test_a_crash_between_batches(spark, setup, dups):
    root, config, reference, _ = setup
    slot = "crash_between"
    confirmed = []

    def probe(event, **info):
        if event == "confirmed":
            confirmed.append(info["flush"])
            if len(confirmed) == 3:
                raise Crash()

    with pytest.raises(Crash):
        run_lander(config(slot), spark, probe=probe)
    run_lander(config(slot), spark)
    assert_same_landing(landed(spark, root, slot), reference, dups)


@pytest.fixture(scope="module")
def crashed_often(spark, setup):
    """A landing crashed again and again at random points: (its bronze rows, the crashes)."""
    root, config, _, _ = setup
    slot = "crash_often"
    rng = random.Random(5)
    crashes = 0
    for _ in range(6):
        # Past one batch (350 messages, maybe more to end a block), so every run lands something.
        state = {"after": rng.randint(420, 700)}

        def probe(event, **info):
            if event == "message":
                state["after"] -= 1
                if state["after"] == 0:
                    raise Crash()

        try:
            run_lander(config(slot), spark, probe=probe)
            break
        except Crash:
            crashes += 1
    else:
        # Every restart streams the open transaction again from its first change (the re-sent part
        # is skipped, but counts as read): the last restart runs without a crash to finish.
        run_lander(config(slot), spark)
    return landed(spark, root, slot), crashes


def test_crashing_again_and_again_at_random_points_still_lands_everything_once(setup, dups, crashed_often):
    rows, crashes = crashed_often
    assert crashes >= 2
    assert_same_landing(rows, setup[2], dups)


def test_silver_after_crashed_landings_holds_the_keyless_table_as_postgresql_does(spark, setup, dups, crashed_often):
    from cdc_apply.delta.refs import silver_ref
    from cdc_apply.lake.pipeline import ApplyPipeline

    root, config, _, _ = setup
    rows, _ = crashed_often
    applied = replace(config("crash_often"), apply=replace(config("crash_often").apply, tables=("public.dups",)))
    ApplyPipeline.open(spark_tables(spark), applied, out=io.StringIO()).run(once=True)
    silver = silver_ref(applied, "public", "dups").read(spark).select("a", "b").collect()
    assert Counter((r.a, r.b) for r in silver) == decoded_dups(rows) == dups
