"""``cdc-apply land`` into bronze on ``s3a://`` (delta-rs, no JVM) killed with SIGKILL at random moments and
started again: bronze on the S3-compatible server (moto's; skipped without it) holds every unit of the slot
once, in order, as PostgreSQL decodes them on a twin slot. Two landers started together on one source
land it once between them."""

from __future__ import annotations

import os
import random
import time
import uuid

import pytest
from lander_helpers import create_slot, peek, slot_options, units

from cdc_apply.delta import files
from cdc_apply.delta.refs import TableRef
from cdc_apply.testing.processes import CliProcess

pytestmark = [pytest.mark.system, pytest.mark.postgres]

CONFIG = """pipeline = "s3crash"
[bronze]
path = "{bronze}"
[silver]
path = "{root}/silver"
[state]
path = "{root}/state"
[source]
name = "pg"
dsn = "{dsn}"
slot = "{slot}"
publication = "pub"
[land]
batch_messages = 150
batch_seconds = 0.3
idle_exit_seconds = 1.0
"""


def _workload(postgres, db: str) -> None:
    """Small commits, a transaction larger than ten batches (a batch ends inside it), TOASTed values, a TRUNCATE."""
    run = lambda sql: postgres.execute(sql, dbname=db)  # noqa: E731
    for i in range(40):
        run(f"INSERT INTO t SELECT g, 'v' || g FROM generate_series({i * 25}, {i * 25 + 24}) g")
    run("UPDATE t SET v = repeat('toast', 2000) WHERE id % 97 = 0")
    big = postgres.connect(db, autocommit=False)
    try:
        with big.cursor() as cur:
            cur.execute("INSERT INTO t SELECT g, repeat('s', 300) FROM generate_series(5000, 6500) g")
            cur.execute("DELETE FROM t WHERE id BETWEEN 5000 AND 5200")
        big.commit()
    finally:
        big.close()
    run("TRUNCATE other")
    run("INSERT INTO other SELECT g FROM generate_series(1, 50) g")


def _source(postgres, db: str, slot: str) -> None:
    postgres.create_database(db)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=db)
    postgres.execute("CREATE TABLE other (n int)", dbname=db)
    postgres.execute("ALTER TABLE other REPLICA IDENTITY FULL", dbname=db)
    postgres.execute("CREATE PUBLICATION pub FOR TABLE t, other", dbname=db)
    create_slot(postgres, db, slot, twins=(f"{slot}_twin",))
    _workload(postgres, db)


def _setup(postgres, s3_store, tmp_path, db: str) -> tuple[str, dict, str]:
    slot = db
    _source(postgres, db, slot)
    bronze = s3_store.url(f"{db}-{uuid.uuid4().hex[:8]}/bronze")
    (tmp_path / "land.toml").write_text(CONFIG.format(bronze=bronze, root=tmp_path, dsn=postgres.dsn(db), slot=slot))
    env = {**s3_store.environment(), "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    return bronze, env, slot


def _bronze(s3_store, bronze: str) -> list[tuple[int, int, bytes]]:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in s3_store.environment().items():
            mp.setenv(name, value)
        table = files.open_table(TableRef(path=bronze))
        got = files.read_rows(table, ["seq", "lsn", "payload"], "source = 'pg'").sort_by("seq")
    return list(zip(got.column("seq").to_pylist(), got.column("lsn").to_pylist(), got.column("payload").to_pylist()))


def _expect_once(postgres, db: str, slot: str, rows: list[tuple[int, int, bytes]]) -> None:
    assert [s for s, _, _ in rows] == list(range(len(rows)))
    expected = peek(postgres, db, f"{slot}_twin", slot_options(two_phase=True))
    assert units([(lsn, p) for _, lsn, p in rows]) == units(expected)


def test_the_land_command_killed_at_random_moments_then_run_again_leaves_every_unit_once_in_s3_bronze(
        postgres, s3_store, tmp_path):
    bronze, env, slot = _setup(postgres, s3_store, tmp_path, "s3_crash")
    rng = random.Random(71)
    kills = 0
    for attempt in range(10):
        # A run starts, lands this workload and ends its idle wait in about 2 s: the kills fall inside that.
        at = rng.uniform(0.4, 2.0)
        run = CliProcess(f"land-{attempt}", ["land", "--config", str(tmp_path / "land.toml"), "--once"],
                         tmp_path / "logs", tmp_path, env)
        done = run.wait(timeout=300, kill_when=lambda r=run, a=at: "random" if _elapsed(r) > a else None)
        if done.killed is None:
            assert done.returncode == 0, done.stdout + done.stderr
            break
        kills += 1
    final = CliProcess("land-final", ["land", "--config", str(tmp_path / "land.toml"), "--once"], tmp_path / "logs",
                       tmp_path, env).wait(timeout=300)
    assert final.returncode == 0, final.stdout + final.stderr
    assert kills >= 3, "the kills came after the landing had ended: nothing was tested"
    _expect_once(postgres, "s3_crash", slot, _bronze(s3_store, bronze))


def test_two_land_commands_started_together_on_one_source_land_it_once(postgres, s3_store, tmp_path):
    bronze, env, slot = _setup(postgres, s3_store, tmp_path, "s3_pair")
    runs = [CliProcess(f"land-{i}", ["land", "--config", str(tmp_path / "land.toml"), "--once"],
                       tmp_path / "logs", tmp_path, env) for i in range(2)]
    done = [r.wait(timeout=300) for r in runs]
    assert sorted(d.returncode for d in done) in ([0, 0], [0, 2]), [d.stdout + d.stderr for d in done]
    again = CliProcess("land-again", ["land", "--config", str(tmp_path / "land.toml"), "--once"], tmp_path / "logs",
                       tmp_path, env).wait(timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    _expect_once(postgres, "s3_pair", slot, _bronze(s3_store, bronze))


def _elapsed(run: CliProcess) -> float:
    return time.monotonic() - run.started
