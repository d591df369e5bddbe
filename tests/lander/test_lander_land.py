"""A normal landing: a real slot, a real bronze table, compared with what PostgreSQL decodes itself."""

from __future__ import annotations

import pytest
from lander_helpers import (
    apply_reference,
    bronze_rows,
    canonical,
    create_slot,
    make_config,
    peek,
    run_lander,
    slot_confirmed,
    slot_options,
)

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

DB = "land_basic"


def workload(pg) -> None:
    run = lambda sql: pg.execute(sql, dbname=DB)  # noqa: E731
    run("INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 20) g")
    for i in range(5):
        run(f"INSERT INTO t VALUES ({100 + i}, 'single')")
    run("UPDATE t SET v = 'changed' WHERE id <= 5")
    # More than logical_decoding_work_mem (64kB on the test server): streamed in blocks.
    run("INSERT INTO big SELECT g, repeat('x', 200) FROM generate_series(1, 1500) g")
    run("BEGIN; INSERT INTO t VALUES (900, 'prepared'); PREPARE TRANSACTION 'land_g1'")
    run("COMMIT PREPARED 'land_g1'")
    run("SELECT pg_logical_emit_message(true, 'land', 'transactional')")
    run("SELECT pg_logical_emit_message(false, 'land', 'not transactional')")
    run("DELETE FROM t WHERE id = 100")


@pytest.fixture(scope="module")
def landed(postgres, spark, tmp_path_factory):
    postgres.create_database(DB)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=DB)
    postgres.execute("CREATE TABLE big (id int PRIMARY KEY, v text)", dbname=DB)
    postgres.execute("CREATE PUBLICATION pub FOR ALL TABLES", dbname=DB)
    create_slot(postgres, DB, "basic", two_phase=True, twins=("basic_twin",))
    workload(postgres)
    root = tmp_path_factory.mktemp("land_basic")
    config = make_config(root, postgres.dsn(DB), "pg", "basic", "pub", land={"batch_messages": 1000})
    summary, out = run_lander(config, spark)
    return root, config, summary, out


def test_bronze_holds_exactly_what_postgresql_decodes_from_a_twin_slot(postgres, spark, landed):
    root, _, summary, _ = landed
    rows = bronze_rows(spark, root / "bronze", "pg")
    expected = peek(postgres, DB, "basic_twin", slot_options())
    assert [p for _, _, p in rows] == [p for _, p in expected]
    # The walsender zeroes the LSN of Relation/Type messages; every other LSN is the server's.
    assert [lsn for _, lsn, p in rows if p[:1] not in b"RY"] == [lsn for lsn, p in expected if p[:1] not in b"RY"]
    kinds = {p[:1] for _, _, p in rows}
    assert {b"S", b"E", b"c", b"b", b"P", b"K", b"M", b"B", b"C", b"U", b"D"} <= kinds
    assert summary.messages == len(rows) and summary.replayed == 0


def test_seq_counts_up_from_zero_and_every_row_names_the_source(spark, landed):
    from pyspark.sql import functions as F

    root, _, summary, _ = landed
    df = spark.read.format("delta").load(str(root / "bronze"))
    seqs = [r.seq for r in df.orderBy("seq").select("seq").collect()]
    assert seqs == list(range(len(seqs)))
    assert df.where(F.col("landed_at").isNull() | (F.col("source") != "pg")).count() == 0
    assert len(summary.batches) >= 2                     # batch_messages = 1000


def test_each_batch_is_one_delta_commit_with_one_file(spark, landed):
    from delta.tables import DeltaTable

    root, _, summary, _ = landed
    history = DeltaTable.forPath(spark, str(root / "bronze")).history().where("operation = 'WRITE'").collect()
    assert len(history) == len(summary.batches)
    assert all(int(h.operationMetrics["numFiles"]) == 1 for h in history)


def test_the_slot_is_confirmed_up_to_what_bronze_holds(postgres, landed):
    _, _, summary, _ = landed
    assert slot_confirmed(postgres, DB, "basic") >= summary.state.resume_lsn > 0


def test_a_progress_line_per_batch_names_messages_bytes_seq_lsn_and_lag(landed):
    _, _, summary, out = landed
    lines = [line for line in out.splitlines() if "] batch " in line]
    assert len(lines) == len(summary.batches)
    first = summary.batches[0]
    assert f"{first.messages} messages" in lines[0] and f"seq {first.first_seq}..{first.last_seq}" in lines[0]
    assert "slot lag" in lines[0] and "last lsn" in lines[0] and "/" in lines[0]


def test_landing_again_with_nothing_new_adds_nothing(postgres, spark, landed):
    root, config, summary, _ = landed
    again, _ = run_lander(config, spark)
    assert again.messages == 0 and again.batches == ()
    assert len(bronze_rows(spark, root / "bronze", "pg")) == summary.messages
    postgres.execute("INSERT INTO t VALUES (5000, 'later')", dbname=DB)
    more, _ = run_lander(config, spark)
    rows = bronze_rows(spark, root / "bronze", "pg")
    assert more.messages == 4 and len(rows) == summary.messages + 4     # B R I C: a new session sends R again
    assert canonical([p for _, _, p in rows]) == canonical([p for _, p in peek(postgres, DB, "basic_twin",
                                                                               slot_options())])


def test_the_cli_creates_slot_and_publication_and_lands_with_the_dsn_from_the_environment(
        postgres, spark, landed, tmp_path, monkeypatch, capsys):
    from cdc_apply.cli.main import main

    monkeypatch.setenv("LAND_CLI_DSN", postgres.dsn(DB))
    config = tmp_path / "land.toml"
    config.write_text(f'''
[bronze]
path = "{tmp_path / 'bronze'}"
[silver]
path = "{tmp_path / 'silver'}"
[state]
path = "{tmp_path / 'state'}"
[source]
name = "cli"
dsn_env = "LAND_CLI_DSN"
slot = "cli_slot"
publication = "cli_pub"
publication_tables = ["public.t"]
create_slot = true
create_publication = true
[land]
idle_exit_seconds = 0.5
''')
    existing = postgres.execute("SELECT count(*) FROM t", dbname=DB)[0][0]
    assert main(["land", "--config", str(config), "--once"]) == 0
    postgres.execute("INSERT INTO t VALUES (7000, 'cli'), (7001, 'cli')", dbname=DB)
    postgres.execute("INSERT INTO big VALUES (7000, 'not published')", dbname=DB)
    assert main(["land", "--config", str(config), "--once"]) == 0
    out = capsys.readouterr().out
    assert "created" in out and "done: 1 batches, 5 messages" in out     # B R I I C
    rows = bronze_rows(spark, tmp_path / "bronze", "cli")
    kinds = "".join(chr(p[0]) for _, _, p in rows)
    # The new slot's initial snapshot (the default) first: t's rows as one snapshot stream, then the changes.
    snapshot, changes = kinds[:-5], kinds[-5:]
    assert snapshot[0] == "S" and snapshot[-1] == "c" and snapshot.count("I") == existing and "B" not in snapshot
    assert changes == "BRIIC"


def test_protocol_1_binary_without_streaming_lands_what_postgresql_decodes_with_those_options(
        postgres, spark, landed, tmp_path):
    create_slot(postgres, DB, "v1_binary", two_phase=False, twins=("v1_binary_twin",))
    postgres.execute("INSERT INTO big SELECT g, repeat('y', 200) FROM generate_series(10001, 10400) g", dbname=DB)
    postgres.execute("BEGIN; INSERT INTO t VALUES (901, 'p'); PREPARE TRANSACTION 'land_g2'", dbname=DB)
    postgres.execute("COMMIT PREPARED 'land_g2'", dbname=DB)
    config = make_config(tmp_path, postgres.dsn(DB), "v1", "v1_binary", "pub", proto_version=1, binary=True,
                         streaming="off", two_phase=False)
    run_lander(config, spark)
    rows = bronze_rows(spark, tmp_path / "bronze", "v1")
    expected = peek(postgres, DB, "v1_binary_twin", slot_options(proto=1, streaming="off", two_phase=False,
                                                                 binary=True))
    assert [p for _, _, p in rows] == [p for _, p in expected]
    kinds = {p[:1] for _, _, p in rows}
    assert b"S" not in kinds and b"b" not in kinds and b"K" not in kinds     # no streams, no two-phase


def test_a_source_with_two_publications_over_different_tables_lands_the_changes_of_both(
        postgres, spark, tmp_path):
    postgres.create_database(DB)
    run = lambda sql: postgres.execute(sql, dbname=DB)  # noqa: E731
    run("CREATE TABLE m1 (id int PRIMARY KEY, v text)")
    run("CREATE TABLE m2 (id int PRIMARY KEY, v text)")
    run("CREATE TABLE m3 (id int PRIMARY KEY, v text)")
    run("CREATE PUBLICATION pub_m1 FOR TABLE m1")
    run("CREATE PUBLICATION pub_m2 FOR TABLE m2")
    create_slot(postgres, DB, "multi_pub")
    run("INSERT INTO m1 VALUES (1, 'one'), (2, 'two')")
    run("INSERT INTO m2 VALUES (10, 'ten')")
    run("INSERT INTO m3 VALUES (100, 'in no publication')")
    run("UPDATE m2 SET v = 'TEN' WHERE id = 10")
    run("DELETE FROM m1 WHERE id = 1")
    config = make_config(tmp_path, postgres.dsn(DB), "multi", "multi_pub", "pub_m1, pub_m2")
    run_lander(config, spark)
    applied = apply_reference(bronze_rows(spark, tmp_path / "bronze", "multi"), ["public.m1", "public.m2", "public.m3"])
    assert applied == {"public.m1": [{"id": "2", "v": "two"}], "public.m2": [{"id": "10", "v": "TEN"}],
                       "public.m3": []}


def test_a_full_batch_ends_at_the_last_transaction_that_ended_in_it(postgres, spark, tmp_path):
    db = "land_units"
    postgres.create_database(db)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=db)
    postgres.execute("CREATE PUBLICATION pub FOR ALL TABLES", dbname=db)
    create_slot(postgres, db, "units", twins=("units_twin",))
    for i in range(40):   # B (R) I I I I I C: batches of 30 messages would end inside every fourth one
        postgres.execute(f"INSERT INTO t SELECT g, 'x' FROM generate_series({5 * i}, {5 * i + 4}) g", dbname=db)
    config = make_config(tmp_path, postgres.dsn(db), "pg", "units", "pub", land={"batch_messages": 30})
    summary, _ = run_lander(config, spark)
    rows = bronze_rows(spark, tmp_path / "bronze", "pg")
    assert [p for _, _, p in rows] == [p for _, p in peek(postgres, db, "units_twin", slot_options())]
    kind_at = {seq: p[:1] for seq, _, p in rows}
    assert len(summary.batches) >= 10
    assert [kind_at[b.last_seq] for b in summary.batches] == [b"C"] * len(summary.batches)
