"""Bronze written through delta-rs: what Spark's Delta reads of it, and exactly once without Spark's checks."""

from __future__ import annotations

import glob
import json
import os
import threading

import pytest

import cdc_apply.lander.bronze_rs as bronze_rs
from cdc_apply.delta import rs_commit
from cdc_apply.delta.bronze_schema import ARROW_SCHEMA
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.files import live_files
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import LandError
from cdc_apply.lander.bronze_rs import RsBronzeWriter, open_writer, spark_reason
from cdc_apply.lander.bronze_writer import BronzeWriter
from cdc_apply.lander.state import Batch, ResumeState

pytestmark = [pytest.mark.spark]


def _batch(state: ResumeState, first_seq: int, n: int, lsn: int = 1000) -> Batch:
    rows = tuple((first_seq + i, lsn + i, b"I" + bytes([i % 256]) * 20) for i in range(n))
    after = ResumeState(batch=state.batch + 1, last_seq=first_seq + n - 1, resume_lsn=lsn + n,
                        messages=state.messages + n)
    return Batch(rows, after, 21 * n)


def _writer(path, source="pg") -> tuple[RsBronzeWriter, ResumeState]:
    writer = RsBronzeWriter(TableRef(path=str(path)), source)
    return writer, writer.open()


def _land(writer, state, batches, n=10):
    landed = []
    for _ in range(batches):
        batch = _batch(state, state.last_seq + 1, n, lsn=1000 + state.last_seq + 1)
        writer.append(batch)
        landed += batch.rows
        state = batch.state
    return state, landed


def _rows(spark, path):
    return [(r.seq, r.lsn, bytes(r.payload)) for r in spark.read.format("delta").load(str(path)).orderBy("seq").collect()]


def test_spark_reads_the_rows_and_describe_history_shows_the_resume_state(spark, tmp_path):
    writer, state = _writer(tmp_path / "bronze")
    state, landed = _land(writer, state, 3)
    assert _rows(spark, tmp_path / "bronze") == landed
    last = spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'bronze'}`").orderBy("version", ascending=False).first()
    assert last.operation == "WRITE" and last.operationParameters["mode"] == "Append"
    assert last.operationMetrics["numOutputRows"] == "10"
    assert ResumeState.from_json(last.userMetadata) == ("cdc_apply-land:pg", state)
    assert spark.sql(f"DESCRIBE DETAIL delta.`{tmp_path / 'bronze'}`").first().properties["delta.appendOnly"] == "true"


def test_spark_s_writer_and_delta_rs_agree_on_the_landed_batch_and_the_resume_state(spark, tmp_path):
    writer, state = _writer(tmp_path / "bronze")
    state, landed = _land(writer, state, 2)
    jvm = BronzeWriter(spark_tables(spark), TableRef(path=str(tmp_path / "bronze")), "pg")
    assert jvm.open() == state and jvm._txn_version() == 2 and not jvm.rebuilt_from_rows
    batch = _batch(state, state.last_seq + 1, 4)
    jvm.append(batch)                       # Spark commits the next batch; delta-rs resumes after it
    reopened, resumed = _writer(tmp_path / "bronze")
    assert resumed == batch.state and not reopened.rebuilt_from_rows
    with pytest.raises(LandError, match="already in bronze"):
        reopened.append(batch)


def test_statistics_are_those_spark_s_file_skipping_uses(spark, tmp_path):
    writer, state = _writer(tmp_path / "bronze")
    _land(writer, state, 3)
    adds = []
    for name in sorted(glob.glob(str(tmp_path / "bronze" / "_delta_log" / "*.json"))):
        with open(name) as f:
            adds += [json.loads(line)["add"] for line in f if '"add"' in line]
    stats = [json.loads(a["stats"]) for a in adds]
    assert [(s["minValues"]["seq"], s["maxValues"]["seq"], s["minValues"]["source"]) for s in stats] == \
        [(0, 9, "pg"), (10, 19, "pg"), (20, 29, "pg")]
    newest = spark.read.format("delta").load(str(tmp_path / "bronze")).where("source = 'pg' AND seq >= 20")
    assert [os.path.basename(f) for f in newest.inputFiles()] == [adds[2]["path"]]


def test_spark_reads_a_table_past_the_checkpoints_delta_rs_writes(spark, tmp_path):
    path = str(tmp_path / "bronze")
    rs_commit.create_table(path, ARROW_SCHEMA, {"delta.appendOnly": "true", "delta.checkpointInterval": "3"}, "bronze")
    writer, state = _writer(path)
    state, landed = _land(writer, state, 7, n=3)
    assert glob.glob(os.path.join(path, "_delta_log", "*.checkpoint.parquet")), "delta-rs wrote a checkpoint"
    assert _rows(spark, path) == landed
    jvm = BronzeWriter(spark_tables(spark), TableRef(path=path), "pg")
    assert jvm.open() == state and jvm._txn_version() == 7
    assert _writer(path)[1] == state


def test_an_empty_batch_commits_its_resume_state_without_a_file(tmp_path):
    writer, state = _writer(tmp_path / "bronze")
    state, _ = _land(writer, state, 1, n=2)
    keepalive = ResumeState(batch=state.batch + 1, last_seq=state.last_seq, resume_lsn=5000, messages=2)
    writer.append(Batch((), keepalive, 0))
    assert _writer(tmp_path / "bronze")[1] == keepalive
    assert len(live_files(rs_commit.open_table(str(tmp_path / "bronze")), ["seq"])) == 1


def test_a_commit_racing_another_run_of_the_same_source_fails_instead_of_landing_twice(spark, tmp_path, monkeypatch):
    first, state = _writer(tmp_path / "bronze")
    second, _ = _writer(tmp_path / "bronze")
    checked = bronze_rs.check_not_written

    def race(writer, written, batch):
        checked(writer, written, batch)
        if writer is second:             # after second's check, before its commit: first commits the batch
            monkeypatch.setattr(bronze_rs, "check_not_written", checked)
            first.append(_batch(state, 0, 4))

    monkeypatch.setattr(bronze_rs, "check_not_written", race)
    with pytest.raises(LandError, match="committed to bronze by another run while this one committed it"):
        second.append(_batch(state, 0, 4))
    assert spark.read.format("delta").load(str(tmp_path / "bronze")).count() == 4


def test_two_runs_committing_the_same_batches_at_once_land_each_batch_once(spark, tmp_path):
    writers = [_writer(tmp_path / "bronze")[0] for _ in range(2)]
    won = {0: [], 1: []}
    start = threading.Barrier(2)

    def run(i):
        state = ResumeState()
        start.wait()
        for k in range(15):
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
    assert sorted(won[0] + won[1]) == list(range(15))
    seqs = [r.seq for r in spark.read.format("delta").load(str(tmp_path / "bronze")).orderBy("seq").collect()]
    assert seqs == list(range(75))


def test_two_sources_in_one_table_resume_each_from_its_own_rows(tmp_path):
    pg, state = _writer(tmp_path / "bronze", "pg")
    other, other_state = _writer(tmp_path / "bronze", "other_source_with_a_name_longer_than_32_chars")
    pg_state, _ = _land(pg, state, 2)
    other_state, _ = _land(other, other_state, 3, n=4)
    assert _writer(tmp_path / "bronze", "pg")[1] == pg_state
    assert _writer(tmp_path / "bronze", "other_source_with_a_name_longer_than_32_chars")[1] == other_state


def test_rows_landed_without_lander_metadata_rebuild_the_resume_state(spark, tmp_path):
    from cdc_apply.pgoutput.encoder import encode
    from cdc_apply.pgoutput.messages import Begin, Commit

    path = str(tmp_path / "bronze")
    writer, state = _writer(path)
    rows = [("pg", 0, 100, encode(Begin(120, 0, 7))), ("pg", 1, 120, encode(Commit(0, 120, 130, 0)))]
    spark.createDataFrame([r + (None,) for r in rows], "source string, seq bigint, lsn bigint, payload binary, "
                          "landed_at timestamp").write.format("delta").mode("append").save(path)
    reopened, resumed = _writer(path)
    assert reopened.rebuilt_from_rows and resumed.last_seq == 1


def test_a_bronze_spark_made_with_deletion_vectors_lands_through_spark_saying_why_once(spark, tmp_path):
    path = str(tmp_path / "bronze")
    spark.sql(f"CREATE TABLE delta.`{path}` (source STRING NOT NULL, seq BIGINT NOT NULL, lsn BIGINT NOT NULL, "
              "payload BINARY NOT NULL, landed_at TIMESTAMP) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    said = []
    writer = open_writer(spark, TableRef(path=path), "pg", say=said.append)
    assert isinstance(writer, BronzeWriter)
    assert len(said) == 1 and "deletionVectors" in said[0] and "Spark" in said[0]
    with pytest.raises(LandError, match="needs Spark"):
        open_writer(None, TableRef(path=path), "pg")


def test_a_bronze_spark_created_plainly_is_written_by_delta_rs(spark, tmp_path):
    from cdc_apply.delta.bronze_schema import create_bronze_table

    path = str(tmp_path / "bronze")
    create_bronze_table(spark_tables(spark), path)
    assert spark_reason(TableRef(path=path)) is None
    writer = open_writer(None, TableRef(path=path), "pg")
    state, landed = _land(writer, writer.open(), 2)
    assert _rows(spark, path) == landed


def test_a_catalog_bronze_and_object_storage_without_credentials_in_the_environment_need_spark(tmp_path, monkeypatch):
    from cdc_apply.delta.storage import CONFIGURING, ENGINE_VARIABLE

    for name in (*CONFIGURING["s3"], ENGINE_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    assert spark_reason(TableRef(name="lake.bronze")) == "bronze.table is a catalog table"
    assert spark_reason(TableRef(path="s3://bucket/bronze")).startswith(
        "bronze.path is on object storage and the environment holds no credentials for delta-rs")
    assert spark_reason(TableRef(path="dbfs:/lake/bronze")).startswith("bronze.path is neither a local path")
    assert spark_reason(TableRef(path=str(tmp_path / "new"))) is None


def test_a_folder_of_other_files_is_not_made_a_bronze_table(tmp_path):
    from cdc_apply.errors import StateError

    (tmp_path / "bronze").mkdir()
    (tmp_path / "bronze" / "notes.txt").write_text("mine")
    with pytest.raises(StateError, match="not cdc_apply's"):
        _writer(tmp_path / "bronze")
