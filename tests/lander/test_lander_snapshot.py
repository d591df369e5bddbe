"""Snapshots against a real server, with a workload changing every table all along.

One source lives through the whole story, in order: the lander creates the slot and is killed in the
middle of its initial snapshot, inside a table copied in key ranges; the next run goes on from the next
range, each round of ranges at a point of its own while the stream flows, and copies the tables after
it; a table joins the publication while the lander streams; ALTER TABLE adds a column with a default
and rewrites a table (the DDL event trigger); silver is applied and must equal PostgreSQL. Then silver is
damaged by hand and `cdc-apply snapshot --table` repairs it while the stream flows.
"""

from __future__ import annotations

import io
import threading
import time
from dataclasses import replace

import pytest
from lander_helpers import bronze_rows, make_config, run_lander
from snapshot_helpers import (
    PRELOAD,
    PUBLISHED,
    SETUP,
    Workload,
    chunk_widths,
    committed_ranges,
    covers_once,
    expected_tables,
    framing_rows,
    snapshot_outcomes,
)

from cdc_apply.delta.engine import spark_tables

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

DB = "snap_e2e"
SOURCE = "snap"


class Crash(Exception):
    """Stands for kill -9: nothing after it runs."""


def oid(pg, name: str) -> int:
    return int(pg.execute("SELECT %s::regclass::oid::int8", (name,), dbname=DB)[0][0])


def apply_and_compare(spark, config, pg, tables: tuple[str, ...] = ()) -> None:
    """Apply bronze (only ``tables``, when given) and compare those silver tables with PostgreSQL."""
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.testing.compare import compare_with_postgres

    started = time.monotonic()
    ApplyPipeline.open(spark_tables(spark), replace(config, apply=replace(config.apply, tables=tables)), out=io.StringIO()).run(once=True)
    applied = time.monotonic()
    conn = pg.connect(DB)
    try:
        want = [t for t in expected_tables(conn) if not tables or t.qualified_name in tables]
        checks = compare_with_postgres(spark, config, conn, SOURCE, snapshot=want)
    finally:
        conn.close()
    print(f"apply {applied - started:.1f} s, compare {time.monotonic() - applied:.1f} s")
    assert len(checks) == (len(tables) or 6) and all(c.equal for c in checks), \
        [c.line() for c in checks if not c.equal]


def land_while(config, spark, until, timeout: float = 90.0):
    """Run the lander streaming in a thread until ``until(lander)`` holds; returns its output."""
    from cdc_apply.lander.lander import Lander

    out, stop = io.StringIO(), threading.Event()
    lander = Lander(config, spark, out=out, stop=stop)
    failure = []
    thread = threading.Thread(target=lambda: failure.append(None) or lander.run(once=False), daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        while not until(lander):
            assert thread.is_alive(), out.getvalue()
            assert time.monotonic() < deadline, out.getvalue()
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(60)
    return out.getvalue()


@pytest.fixture(scope="module")
def story(postgres, spark, tmp_path_factory):
    postgres.create_database(DB)
    postgres.execute(SETUP, dbname=DB)
    postgres.execute(PRELOAD, dbname=DB)
    root = tmp_path_factory.mktemp("snap_e2e")
    config = make_config(root, postgres.dsn(DB), SOURCE, "snap_slot", "pub_main,pub_root", create_slot=True,
                         snapshot="when_needed", snapshot_workers=2, snapshot_check_seconds=1.0, ddl_events=True,
                         snapshot_batch_bytes=60_000, snapshot_chunk_rows=50, land={"batch_seconds": 1.0})
    workload = Workload(postgres, DB)
    workload.start()
    return {"pg": postgres, "root": root, "config": config, "workload": workload, "log": {}}


def test_a_lander_killed_in_its_initial_snapshot_goes_on_from_the_next_key_range_while_the_stream_flows(story, spark):
    pg, config, workload = story["pg"], story["config"], story["workload"]
    docs = oid(pg, "docs")
    seen = {"commits_at_first": None}

    def probe(event, **info):
        if event == "snapshot_appended":
            seen["commits_at_first"] = seen["commits_at_first"] or workload.commits
            time.sleep(0.3)                                  # the workload commits while the copy goes on
            if info["state"].snapshots.resume_key(docs) is not None:   # some of docs' ranges are in bronze
                seen["resume"] = info["state"].snapshots.resume_key(docs)
                raise Crash()

    with pytest.raises(Crash):
        run_lander(config, spark, probe=probe)
    assert seen["resume"] is not None
    assert workload.commits > seen["commits_at_first"]
    landed = committed_ranges(framing_rows(spark, story["root"] / "bronze", SOURCE))[docs]
    assert landed and landed[-1][1] == seen["resume"]
    # Streaming on while the workload goes on: the next run copies docs' other ranges and the tables after it.
    out = land_while(config, spark, lambda lander: lander.snapshots.tables >= 4 and not lander.state.snapshots.pending
                     and lander.snapshots.flow is None)
    assert "closed the unfinished snapshot" not in out
    rows = framing_rows(spark, story["root"] / "bronze", SOURCE)
    ranges = committed_ranges(rows)
    assert covers_once(ranges[docs]) and ranges[docs][:len(landed)] == landed   # nothing copied twice
    assert not any(kind == "abort" for (_, kind) in snapshot_outcomes(rows))
    assert set(ranges) == {oid(pg, t) for t in PUBLISHED}
    # Rounds after the restart took points of their own, and the stream's transactions landed between them.
    later = [seq for _, _, seq, _ in ranges[docs][len(landed):]]
    everything = bronze_rows(spark, story["root"] / "bronze", SOURCE)
    commits = [seq for seq, _, payload in everything if payload[:1] == b"C" and later[0] < seq < later[-1]]
    assert len(later) >= 2 and commits, (later, commits)
    # Each chunk's marker says its longest Insert payload: the apply's batches of its rows are sized by it.
    widths = chunk_widths(everything)
    assert len(widths) >= len(ranges[docs]) and all(said == (longest or None) for said, longest in widths), widths
    assert any(longest for _, longest in widths)


# The table joins once the lander streams (two batches landed), so that the session finds it, not the check
# at the lander's start. The lander's loop once asked again within snapshot_check_seconds of the session's
# check, was told no, and streamed on: a new session every second, and the table never copied.
def test_a_table_added_to_the_publication_while_streaming_is_copied(story, spark):
    pg, config = story["pg"], story["config"]
    pg.execute("CREATE TABLE late (id int PRIMARY KEY, v text); "
               "INSERT INTO late SELECT g, 'before' FROM generate_series(1, 50) g", dbname=DB)
    late = oid(pg, "late")

    def added(lander) -> bool:
        if len(lander.reports) < 2:
            return False
        if not pg.execute("SELECT 1 FROM pg_publication_tables WHERE tablename = 'late'", dbname=DB):
            pg.execute("ALTER PUBLICATION pub_main ADD TABLE late", dbname=DB)
            pg.execute("INSERT INTO late VALUES (51, 'after')", dbname=DB)
        return late in lander.state.snapshots.done

    out = land_while(config, spark, added)
    assert "snapshot public.late: 50 rows" in out or "snapshot public.late: 51 rows" in out


def test_silver_equals_postgresql_with_defaults_of_added_columns_and_a_rewritten_table(story, spark):
    pg, config, workload = story["pg"], story["config"], story["workload"]
    pg.execute("ALTER TABLE pleaf ADD COLUMN c int DEFAULT 7", dbname=DB)    # no WAL for rows already there
    pg.execute("ALTER TABLE dups ADD COLUMN r int DEFAULT (random() * 1000)::int", dbname=DB)  # a rewrite
    time.sleep(0.5)
    workload.stop()
    _, out = run_lander(config, spark)
    assert "snapshot public.dups" in out                  # the rewrite asked for a new copy
    assert pg.execute("SELECT count(*) FROM pleaf WHERE c = 7", dbname=DB)[0][0] >= 200
    apply_and_compare(spark, config, pg)


def test_cdc_apply_snapshot_copies_a_damaged_table_again_while_the_stream_flows(story, spark, tmp_path):
    from cdc_apply.cli.main import main
    from cdc_apply.delta.refs import silver_ref

    pg, config = story["pg"], story["config"]
    before = silver_ref(config, "public", "docs").read(spark).count()
    spark.sql(f"DELETE FROM delta.`{story['root'] / 'silver' / 'public' / 'docs'}` WHERE id % 2 = 0")
    assert silver_ref(config, "public", "docs").read(spark).count() < before
    toml = tmp_path / "snap.toml"
    toml.write_text(f'[bronze]\npath = "{story["root"] / "bronze"}"\n[silver]\npath = "{story["root"] / "silver"}"\n'
                    f'[state]\npath = "{story["root"] / "state"}"\n[source]\nname = "{SOURCE}"\n'
                    f'dsn = "{pg.dsn(DB)}"\nslot = "snap_slot"\npublication = "pub_main,pub_root"\n')
    workload = Workload(pg, DB, seed=11, first_id=50_000)
    workload.start()
    before_framing = framing_rows(spark, story["root"] / "bronze", SOURCE)
    before, before_rows = snapshot_outcomes(before_framing), len(before_framing)
    asked = []

    def served(lander) -> bool:
        if not asked and lander.state.last_seq > 0:
            asked.append(main(["snapshot", "--config", str(toml), "--table", "public.docs"]))
        return bool(asked) and not lander.state.snapshots.pending and lander.snapshots.tables >= 1

    land_while(config, spark, served)
    workload.stop()
    run_lander(config, spark)
    rows = framing_rows(spark, story["root"] / "bronze", SOURCE)
    after = snapshot_outcomes(rows)
    docs = [r for r in committed_ranges(rows)[oid(pg, "docs")] if r[2] > max(seq for seq, _, _ in rows[:before_rows])]
    assert asked == [0] and set(after - before) == {(oid(pg, "docs"), "commit")} and covers_once(docs)
    apply_and_compare(spark, config, pg, ("public.docs",))
