"""Each entry point over Spark Connect, on a lake landed from a real PostgreSQL 18 with the classic session:
the apply job (three batches, a history table on one table), ``status``, reads as of a commit (history and
time travel), ``optimize``, ``verify``, ``forget``, and ``cdc-apply apply --once`` started with
``SPARK_REMOTE=local[2]``."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from pg_lake import PgLake, beside

from cdc_apply.delta.engine import spark_tables
from cdc_apply.testing.connect_server import connect_mode
from cdc_apply.testing.history_check import check_as_of

# Minutes each (a Connect server of its own, the differential workload): run by make system.
pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.connect, pytest.mark.system]

CHECKOUT = Path(__file__).resolve().parents[2]
SETUP = [
    "CREATE TABLE t (id int PRIMARY KEY, v text)",
    "CREATE TABLE plain (id int PRIMARY KEY, v text)",
    "CREATE TABLE bag (v text)",
    "ALTER TABLE bag REPLICA IDENTITY FULL",
    "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 30) g",
    "INSERT INTO plain SELECT g, 'p' || g FROM generate_series(1, 20) g",
    "INSERT INTO bag VALUES ('a'), ('a'), ('b')",
]


def _apply_over_connect(lake: PgLake, session) -> str:
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.lander.lander import Lander

    Lander(lake.lander_config, lake.spark, out=io.StringIO()).run(once=True)
    out = io.StringIO()
    with connect_mode():
        ApplyPipeline.open(spark_tables(session), lake.config, out=out).run(once=True)
    return out.getvalue()


@pytest.fixture(scope="module")
def applied(postgres, spark, connect_session, tmp_path_factory):
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("connect_lake"), "connect_lake", SETUP,
                  {"silver": {"history": ["public.t"]}})
    first = _apply_over_connect(lake, connect_session)
    before = lake.run("UPDATE t SET v = 'one' WHERE id = 1", "DELETE FROM plain WHERE id = 2",
                      "INSERT INTO bag VALUES ('c')", "DELETE FROM bag WHERE v = 'b'")
    _apply_over_connect(lake, connect_session)   # a batch end: time travel shows exactly `before`
    lake.run("UPDATE t SET id = 100 WHERE id = 3", "UPDATE plain SET v = 'x' WHERE id < 5",
             "INSERT INTO t VALUES (31, repeat('long', 3000))", "TRUNCATE bag", "INSERT INTO bag VALUES ('z')")
    second = _apply_over_connect(lake, connect_session)
    states = dict(lake.record.states)
    yield lake, connect_session, (first, second), (before, states[before])
    lake.close()


def test_silver_applied_over_connect_equals_postgresql_after_three_batches(applied):
    lake, _, (first, last), _ = applied
    assert "(v1)" in first and "(v3)" in last, (first, last)
    assert lake.silver_differences() == []


def test_the_history_table_written_over_connect_holds_every_state_of_the_source(applied):
    lake, _, _, _ = applied
    assert [d for d in lake.history_differences() if "public.t" in d or "t:" in d] == []


def test_status_read_over_connect_equals_status_read_without_a_jvm(applied):
    from cdc_apply.lake.books.status import read_status_spark
    from cdc_apply.lake.books.status_files import read_status_files

    lake, session, _, _ = applied
    with connect_mode():
        over_connect = read_status_spark(session, lake.config, timedelta(hours=24))
    files = read_status_files(lake.config, timedelta(hours=24))
    moving = {"lag_seconds", "applied_commit_age_seconds", "updated_at"}
    assert [{k: v for k, v in e.items() if k not in moving} for e in over_connect] == \
        [{k: v for k, v in e.items() if k not in moving} for e in files]
    assert over_connect[0]["health"] == "ok" and over_connect[0]["lag_seq"] == 0


@pytest.mark.parametrize("method", ["history", "time travel"])
def test_a_read_as_of_over_connect_equals_the_source_then(applied, method):
    lake, session, _, (before, state) = applied
    tables = [t for t in state if t.name == "t"] if method == "history" else state
    with connect_mode():
        assert check_as_of(session, lake.config, lake.SOURCE, before, tables, method=method) == []


def test_optimize_over_connect_compacts_silver_and_keeps_its_rows(applied):
    from cdc_apply.lake.maintenance import optimize_silver

    lake, session, _, _ = applied
    with connect_mode():
        done = optimize_silver(session, lake.config)
    assert {d.table for d in done} >= {"public.t", "public.plain", "public.t (history)"}
    assert lake.silver_differences() == []


def _while_landing(lake: PgLake, session, call):
    """``call()`` over Connect while the lander and the Connect apply job run in a loop beside it (verify and
    forget wait for them to pass their point); what it returned."""
    return beside(lambda: _apply_over_connect(lake, session), call, pause=1.0)


def _verify_while_landing(lake: PgLake, session):
    from cdc_apply.api import verify

    # bag is keyless without a history table: verify names it an error (docs/VERIFY.md), so it is left out.
    return _while_landing(lake, session, lambda: verify(session, lake.lander_config, ["public.t", "public.plain"],
                                                        range_rows=8, wait_seconds=300, record=False))


def test_verify_over_connect_finds_silver_equal_then_names_a_damaged_row(applied):
    lake, session, _, _ = applied
    with connect_mode():
        clean = _verify_while_landing(lake, session)
    assert clean.exit_code == 0, clean.lines()
    assert {t.table: t.status for t in clean.tables} == {"public.t": "equal", "public.plain": "equal"}
    lake.spark.sql(f"UPDATE delta.`{lake.config.silver.path}/public/plain` SET v = 'damaged' WHERE id = 7")
    try:
        with connect_mode():
            damaged = _verify_while_landing(lake, session)
        plain = next(t for t in damaged.tables if t.table == "public.plain")
        assert damaged.exit_code == 1 and [(s.key, s.what) for s in plain.samples] == [(("7",), "changed")]
        assert all(t.status == "equal" for t in damaged.tables if t.table != "public.plain"), damaged.lines()
    finally:
        lake.run("UPDATE plain SET v = v WHERE id = 7")   # the row applied again: silver as the source holds it
        with connect_mode():
            _apply_over_connect(lake, session)


def test_forget_over_connect_removes_a_deleted_key_from_bronze_and_its_older_files(applied):
    """The fixture's source deleted plain's key 2: its snapshot Insert and its Delete leave bronze, VACUUM at 0
    hours and the log's older commits go (through the local folder: no JVM on this side), silver stays equal."""
    from cdc_apply.api import forget

    lake, session, _, _ = applied
    with connect_mode():
        run = _while_landing(lake, session, lambda: forget(session, lake.lander_config, "public.plain", ["2"],
                                                           wait_seconds=300, vacuum=True, retain_hours=0))
    assert (run.bronze_messages, run.silver_rows) == (2, 0), run.lines()
    assert "older log files removed" in run.vacuumed[f"{lake.config.silver.path}/public/plain"]
    assert lake.silver_differences() == []


CLI_CONFIG = """pipeline = "connect_cli"
[bronze]
path = "{root}/bronze"
[silver]
path = "{root}/silver"
[state]
path = "{root}/state"
"""


@pytest.mark.system
def test_cdc_apply_apply_once_with_spark_remote_local_applies_bronze_and_silver_equals_postgresql(
        postgres, spark, tmp_path):
    """The user's way: ``SPARK_REMOTE=local[2] cdc-apply apply --once``; the command starts a Connect server
    with Delta in its own process (port 15002) and applies over it."""
    lake = PgLake(postgres, spark, tmp_path, "connect_cli", SETUP)
    lake.run("UPDATE t SET v = 'w' WHERE id < 10", "DELETE FROM plain WHERE id > 15")
    from cdc_apply.lander.lander import Lander

    Lander(lake.lander_config, spark, out=io.StringIO()).run(once=True)
    (tmp_path / "cli.toml").write_text(CLI_CONFIG.format(root=tmp_path))
    env = {**os.environ, "SPARK_REMOTE": "local[2]", "PYTHONPATH": str(CHECKOUT)}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    proc = subprocess.run([sys.executable, "-m", "cdc_apply.cli.main", "apply", "--config", str(tmp_path / "cli.toml"),
                           "--once"], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "apply version 0" in proc.stdout and "v1" in proc.stdout, proc.stdout
    assert lake.silver_differences() == []
    lake.close()
