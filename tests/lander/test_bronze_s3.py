"""Bronze on ``s3://``/``s3a://`` landed through delta-rs, no JVM, against an S3-compatible server (moto's, on
127.0.0.1; the tests skip without it): a real source landed message for message, racing landers and commits
that never land a batch twice, a setting under which a commit would not be exclusive refused by name, and
no credential in what is written or said."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
from lander_helpers import create_slot, make_config, peek, run_lander, slot_options, units

import cdc_apply.lander.bronze_rs as bronze_rs
from cdc_apply.delta import files
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import ConfigError, LandError
from cdc_apply.lander.bronze_rs import RsBronzeWriter, spark_reason
from cdc_apply.lander.state import Batch, ResumeState


def _prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def _batch(state: ResumeState, first_seq: int, n: int) -> Batch:
    rows = tuple((first_seq + i, 1000 + first_seq + i, b"I" + bytes([i % 256]) * 20) for i in range(n))
    return Batch(rows, ResumeState(batch=state.batch + 1, last_seq=first_seq + n - 1, resume_lsn=2000 + first_seq + n,
                                   messages=state.messages + n), 21 * n)


def _rows(url: str) -> list[tuple[str, int, int, bytes]]:
    table = files.open_table(TableRef(path=url))
    got = files.read_rows(table, ["source", "seq", "lsn", "payload"]).sort_by([("source", "ascending"),
                                                                              ("seq", "ascending")])
    return list(zip(*(got.column(c).to_pylist() for c in got.column_names)))


def test_the_lander_lands_a_postgres_stream_into_s3_bronze_without_spark_message_for_message(postgres, s3_env,
                                                                                              tmp_path):
    db = "s3_land"
    postgres.create_database(db)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=db)
    postgres.execute("CREATE PUBLICATION pub FOR TABLE t", dbname=db)
    create_slot(postgres, db, "s3_land", twins=("s3_land_twin",))
    postgres.execute("INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 300) g", dbname=db)
    postgres.execute("UPDATE t SET v = repeat('y', 3000) WHERE id <= 40", dbname=db)
    postgres.execute("DELETE FROM t WHERE id > 280", dbname=db)
    url = s3_env.url(f"{_prefix()}/bronze")
    config = make_config(tmp_path, postgres.dsn(db), "pg", "s3_land", "pub", bronze=url,  # type: ignore[arg-type]
                         land={"batch_messages": 120})
    assert spark_reason(TableRef(path=url)) is None          # delta-rs writes it: no Spark session is needed
    summary, out = run_lander(config, None)
    assert summary.messages > 0 and "landing through Spark" not in out
    rows = _rows(url)
    expected = peek(postgres, db, "s3_land_twin", slot_options(two_phase=True))
    assert [p for _, _, _, p in rows] == [p for _, p in expected]
    assert [s for _, s, _, _ in rows] == list(range(len(rows)))
    again, _ = run_lander(config, None)                       # resumes from bronze on S3: nothing new
    assert again.messages == 0 and again.state.last_seq == rows[-1][1]


def test_two_landers_committing_the_same_batches_on_s3_land_each_batch_once(s3_env):
    url = s3_env.url(f"{_prefix()}/bronze")
    writers = [RsBronzeWriter(TableRef(path=url), "pg") for _ in range(2)]
    for writer in writers:
        writer.open()
    won: dict[int, list[int]] = {0: [], 1: []}
    start = threading.Barrier(2)

    def run(i: int) -> None:
        state = ResumeState()
        start.wait()
        for k in range(12):
            batch = _batch(state, k * 5, 5)
            try:
                writers[i].append(batch)
                won[i].append(k)
            except LandError:
                pass
            state = batch.state

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won[0] + won[1]) == list(range(12))         # each batch landed by exactly one of them
    assert [s for _, s, _, _ in _rows(url)] == list(range(60))


def test_a_commit_racing_another_run_on_s3_fails_instead_of_landing_twice(s3_env, monkeypatch):
    url = s3_env.url(f"{_prefix()}/bronze")
    first, second = RsBronzeWriter(TableRef(path=url), "pg"), RsBronzeWriter(TableRef(path=url), "pg")
    state, _ = first.open(), second.open()
    checked = bronze_rs.check_not_written

    def race(writer, written, batch):
        checked(writer, written, batch)
        if writer is second:             # after second's check, before its commit: first commits the batch
            monkeypatch.setattr(bronze_rs, "check_not_written", checked)
            first.append(_batch(state, 0, 4))

    monkeypatch.setattr(bronze_rs, "check_not_written", race)
    with pytest.raises(LandError, match="committed to bronze by another run while this one committed it"):
        second.append(_batch(state, 0, 4))
    assert [s for _, s, _, _ in _rows(url)] == [0, 1, 2, 3]


def test_conditional_put_turned_off_is_refused_naming_the_setting_before_anything_is_written(s3_env, monkeypatch):
    prefix = _prefix()
    monkeypatch.setenv("AWS_CONDITIONAL_PUT", "disabled")
    with pytest.raises(ConfigError, match="AWS_CONDITIONAL_PUT") as info:
        RsBronzeWriter(TableRef(path=s3_env.url(f"{prefix}/bronze")), "pg").open()
    assert info.value.context["key"] == "AWS_CONDITIONAL_PUT"
    assert s3_env.list_keys(prefix) == ""


def test_no_credential_reaches_bronze_s_files_or_its_commits(s3_store, monkeypatch):
    secret = f"secret-{uuid.uuid4().hex}"
    for name, value in s3_store.environment(secret=secret).items():
        monkeypatch.setenv(name, value)
    prefix = _prefix()
    writer = RsBronzeWriter(TableRef(path=s3_store.url(f"{prefix}/bronze")), "pg")
    state = writer.open()
    writer.append(_batch(state, 0, 10))
    keys = s3_store.list_keys(prefix).splitlines()
    assert any(k.endswith(".parquet") for k in keys) and any("/_delta_log/" in k for k in keys)
    store = files.StoreFiles(f"s3://{s3_store.bucket}")
    for key in keys:
        with store.pyarrow.open_input_file(key) as got:
            assert secret.encode() not in got.read(), key


# pyspark and py4j made unimportable: a lander that reached for Spark would fail, not start a JVM.
NO_SPARK = ("import sys; sys.modules['pyspark'] = None; sys.modules['py4j'] = None; sys.modules['delta'] = None\n"
            "from cdc_apply.cli.main import main\n"
            "code = main(sys.argv[1:])\n"
            "assert not [m for m in sys.modules if m.startswith(('pyspark', 'py4j')) and sys.modules[m]]\n"
            "sys.exit(code)\n")


def test_the_land_command_lands_into_s3_with_pyspark_unimportable(postgres, s3_store, tmp_path):
    db = "s3_cli"
    postgres.create_database(db)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=db)
    postgres.execute("CREATE PUBLICATION pub FOR TABLE t", dbname=db)
    create_slot(postgres, db, "s3_cli", twins=("s3_cli_twin",))
    postgres.execute("INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 100) g", dbname=db)
    url = s3_store.url(f"{_prefix()}/bronze")
    secret = f"secret-{uuid.uuid4().hex}"
    (tmp_path / "land.toml").write_text(
        f'pipeline = "s3cli"\n[bronze]\npath = "{url}"\n[silver]\npath = "{tmp_path}/silver"\n'
        f'[state]\npath = "{tmp_path}/state"\n[source]\nname = "pg"\ndsn = "{postgres.dsn(db)}"\nslot = "s3_cli"\n'
        'publication = "pub"\n[land]\nbatch_seconds = 0.5\nidle_exit_seconds = 1.0\n')
    env = {**os.environ, **s3_store.environment(secret=secret),
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", NO_SPARK, "land", "--config", str(tmp_path / "land.toml"), "--once"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "done:" in proc.stdout and time.monotonic() - started < 120
    assert secret not in proc.stdout + proc.stderr
    with pytest.MonkeyPatch.context() as mp:
        for name, value in s3_store.environment().items():
            mp.setenv(name, value)
        rows = _rows(url)
    assert units([(lsn, p) for _, _, lsn, p in rows]) == units(peek(postgres, db, "s3_cli_twin",
                                                                     slot_options(two_phase=True)))


def test_an_initial_snapshot_lands_into_s3_bronze_as_it_lands_into_a_local_path(postgres, s3_env, tmp_path):
    db = "s3_snap"
    postgres.create_database(db)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=db)
    postgres.execute("INSERT INTO t SELECT g, repeat('s', g % 50) FROM generate_series(1, 2000) g", dbname=db)
    postgres.execute("CREATE PUBLICATION pub FOR TABLE t", dbname=db)
    url = s3_env.url(f"{_prefix()}/bronze")
    landed = {}
    for slot, bronze in (("snap_local", str(tmp_path / "bronze")), ("snap_s3", url)):
        config = make_config(tmp_path / slot, postgres.dsn(db), "pg", slot, "pub", bronze=bronze,  # type: ignore[arg-type]
                             create_slot=True, snapshot="initial", snapshot_chunk_rows=500)
        summary, _ = run_lander(config, None)
        assert summary.state.last_seq > 2000   # the copy: a snapshot message, a Relation, a Truncate, the rows
        landed[slot] = sorted(p for _, _, _, p in _rows(bronze) if p[:1] == b"I")
    assert len(landed["snap_s3"]) == 2000 and landed["snap_s3"] == landed["snap_local"]
