"""The server restarts while the lander streams: it reconnects with backoff and loses nothing."""

from __future__ import annotations

import threading

import pytest
from lander_helpers import bronze_rows, change_counts, create_slot, make_config, run_lander, units

from cdc_apply.testing.postgres import start_postgres

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

DB = "land_restart"


def test_a_server_restart_while_landing_is_survived_without_loss_or_duplicates(spark, tmp_path):
    pg = start_postgres(tmp_path / "pg" / "data")
    try:
        pg.create_database(DB)
        run = lambda sql: pg.execute(sql, dbname=DB)  # noqa: E731
        run("CREATE TABLE t (id int PRIMARY KEY, v text)")
        run("CREATE PUBLICATION pub FOR ALL TABLES")
        create_slot(pg, DB, "rs", twins=("rs_twin",))
        run("INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 900) g")   # streamed
        for i in range(20):
            run(f"INSERT INTO t VALUES ({1000 + i}, 'before')")

        config = make_config(tmp_path, pg.dsn(DB), "rs", "rs", "pub",
                             land={"batch_messages": 300, "batch_seconds": 1.0, "keepalive_seconds": 1.0})
        stop, first_batch, done_seen = threading.Event(), threading.Event(), threading.Event()
        result = {}

        def probe(event, **info):
            if event == "confirmed":
                first_batch.set()
                if done_seen.is_set():
                    stop.set()
            elif event == "message" and info["payload"].endswith(b"done"):
                done_seen.set()

        def land():
            try:
                result["summary"], result["out"] = run_lander(config, spark, once=False, probe=probe, stop=stop)
            except BaseException as exc:  # reported below, in the test's thread
                result["error"] = exc

        thread = threading.Thread(target=land, name="lander")
        thread.start()
        assert first_batch.wait(120), result
        pg.restart()                       # the walsender goes away in the middle of the backlog
        for i in range(20):
            run(f"INSERT INTO t VALUES ({2000 + i}, 'after')")
        run("SELECT pg_logical_emit_message(false, 'restart', 'done')")
        thread.join(180)
        stop.set()
        assert not thread.is_alive() and "error" not in result, result
        summary = result["summary"]
        assert summary.reconnects >= 1
        assert "reconnecting in" in result["out"]

        run_lander(make_config(tmp_path / "ref", pg.dsn(DB), "ref", "rs_twin", "pub"), spark)
        mine = [(lsn, p) for _, lsn, p in bronze_rows(spark, tmp_path / "bronze", "rs")]
        reference = [(lsn, p) for _, lsn, p in bronze_rows(spark, tmp_path / "ref" / "bronze", "ref")]
        assert change_counts(mine) == change_counts(reference)
        assert units(mine) == units(reference)
    finally:
        pg.destroy()
