"""The lander's bronze appends: written by pyarrow and committed through Delta's log, or through Spark."""

from __future__ import annotations

import glob
import json
import os

import pytest

import cdc_apply.lander.bronze_commit as bronze_commit
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import LandError
from cdc_apply.lander.bronze_writer import BronzeWriter
from cdc_apply.lander.state import Batch, ResumeState


def _batch(state: ResumeState, first_seq: int, n: int, lsn: int = 1000) -> Batch:
    rows = tuple((first_seq + i, lsn + i, b"I" + bytes([i % 256]) * 20) for i in range(n))
    after = ResumeState(batch=state.batch + 1, last_seq=first_seq + n - 1, resume_lsn=lsn + n,
                        messages=state.messages + n)
    return Batch(rows, after, 21 * n)


def _writer(spark, path, direct=True, source="pg") -> tuple[BronzeWriter, ResumeState]:
    writer = BronzeWriter(spark_tables(spark), TableRef(path=str(path)), source, direct=direct)
    return writer, writer.open()


def _jobs(spark) -> int:
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None) or [0])


def _adds(path) -> list[dict]:
    adds = []
    for name in sorted(glob.glob(os.path.join(path, "_delta_log", "*.json"))):
        with open(name) as f:
            adds += [json.loads(line)["add"] for line in f if '"add"' in line]
    return adds


@pytest.mark.parametrize("direct", [True, False], ids=["pyarrow", "spark"])
def test_appended_batches_read_back_in_seq_order_with_their_resume_state(spark, tmp_path, direct):
    writer, state = _writer(spark, tmp_path / "bronze", direct)
    assert (writer.folder is not None) == direct
    first = _batch(state, 0, 5)
    writer.append(first)
    second = _batch(first.state, 5, 3, lsn=2000)
    writer.append(second)

    rows = [(r.source, r.seq, r.lsn, bytes(r.payload))
            for r in spark.read.format("delta").load(str(tmp_path / "bronze")).orderBy("seq").collect()]
    assert rows == [("pg",) + r for r in first.rows + second.rows]
    reopened, resumed = _writer(spark, tmp_path / "bronze", direct)
    assert resumed == second.state and not reopened.rebuilt_from_rows


def test_a_direct_append_runs_no_spark_job(spark, tmp_path):
    writer, state = _writer(spark, tmp_path / "bronze")
    before = _jobs(spark)
    for _ in range(3):           # fewer than Delta's checkpoint interval (10), whose checkpoint is a job
        batch = _batch(state, state.last_seq + 1, 100)
        writer.append(batch)
        state = batch.state
    assert _jobs(spark) == before


def test_direct_files_carry_statistics_that_let_a_seq_filter_skip_them(spark, tmp_path):
    writer, state = _writer(spark, tmp_path / "bronze")
    for first in (0, 10, 20):
        batch = _batch(state, first, 10, lsn=100 * first)
        writer.append(batch)
        state = batch.state
    adds = _adds(str(tmp_path / "bronze"))
    stats = [json.loads(a["stats"]) for a in adds]
    assert [(s["numRecords"], s["minValues"]["seq"], s["maxValues"]["seq"]) for s in stats] == \
        [(10, 0, 9), (10, 10, 19), (10, 20, 29)]
    assert (stats[1]["minValues"]["lsn"], stats[1]["maxValues"]["lsn"]) == (1000, 1009)
    assert stats[1]["minValues"]["source"] == stats[1]["maxValues"]["source"] == "pg"
    newest = spark.read.format("delta").load(str(tmp_path / "bronze")).where("source = 'pg' AND seq >= 20")
    assert [os.path.basename(f) for f in newest.inputFiles()] == [adds[2]["path"]]


def test_an_empty_batch_commits_its_resume_state_without_a_file(spark, tmp_path):
    writer, state = _writer(spark, tmp_path / "bronze")
    data = _batch(state, 0, 2)
    writer.append(data)
    keepalive = ResumeState(batch=data.state.batch + 1, last_seq=1, resume_lsn=5000, messages=2)
    writer.append(Batch((), keepalive, 0))
    assert len(_adds(str(tmp_path / "bronze"))) == 1
    assert _writer(spark, tmp_path / "bronze")[1] == keepalive


@pytest.mark.parametrize("direct", [True, False], ids=["pyarrow", "spark"])
def test_a_batch_another_run_already_committed_is_refused(spark, tmp_path, direct):
    first, state = _writer(spark, tmp_path / "bronze", direct)
    second, _ = _writer(spark, tmp_path / "bronze", direct)
    first.append(_batch(state, 0, 4))
    with pytest.raises(LandError, match="already in bronze") as err:
        second.append(_batch(state, 0, 4))
    assert err.value.context["app_id"] == "cdc_apply-land:pg"
    assert spark.read.format("delta").load(str(tmp_path / "bronze")).count() == 4


def test_a_commit_racing_another_run_of_the_same_source_fails_instead_of_landing_twice(spark, tmp_path,
                                                                                           monkeypatch):
    first, state = _writer(spark, tmp_path / "bronze")
    second, _ = _writer(spark, tmp_path / "bronze")
    checked = bronze_commit.check_not_written

    def race(writer, written, batch):
        checked(writer, written, batch)
        if writer is second:             # after second's read, before its commit: first commits the batch
            monkeypatch.setattr(bronze_commit, "check_not_written", checked)
            first.append(_batch(state, 0, 4))

    monkeypatch.setattr(bronze_commit, "check_not_written", race)
    with pytest.raises(LandError, match="committed to bronze by another run while this one committed it"):
        second.append(_batch(state, 0, 4))
    assert spark.read.format("delta").load(str(tmp_path / "bronze")).count() == 4


def test_another_source_in_the_same_table_does_not_stop_a_commit(spark, tmp_path):
    pg, state = _writer(spark, tmp_path / "bronze", source="pg")
    other, other_state = _writer(spark, tmp_path / "bronze", source="other")
    pg.append(_batch(state, 0, 3))
    other.append(_batch(other_state, 0, 2))
    pg.append(_batch(ResumeState(batch=1, last_seq=2, resume_lsn=1003, messages=3), 3, 3))
    counts = {r.source: r["count"] for r in
              spark.read.format("delta").load(str(tmp_path / "bronze")).groupBy("source").count().collect()}
    assert counts == {"pg": 6, "other": 2}


def test_the_landed_batch_is_known_without_version_checksums(spark, tmp_path):
    writer, state = _writer(spark, tmp_path / "bronze")
    for _ in range(3):
        batch = _batch(state, state.last_seq + 1, 2)
        writer.append(batch)
        state = batch.state
    assert writer._txn_version() == 3
    for crc in glob.glob(str(tmp_path / "bronze" / "_delta_log" / "*.crc")):
        os.remove(crc)
    fresh, resumed = _writer(spark, tmp_path / "bronze")
    assert fresh._txn_version() == 3 and resumed == state
    with pytest.raises(LandError, match="already in bronze"):
        fresh.append(_batch(ResumeState(batch=2, last_seq=3), 4, 2))


def test_a_direct_commit_records_what_spark_s_writer_would_in_the_table_history(spark, tmp_path):
    from delta.tables import DeltaTable

    writer, state = _writer(spark, tmp_path / "bronze")
    writer.append(_batch(state, 0, 7))
    last = DeltaTable.forPath(spark, str(tmp_path / "bronze")).history(1).collect()[0]
    assert last.operation == "WRITE" and last.operationParameters["mode"] == "Append"
    assert (last.operationMetrics["numFiles"], last.operationMetrics["numOutputRows"]) == ("1", "7")
    assert int(last.operationMetrics["numOutputBytes"]) == _adds(str(tmp_path / "bronze"))[0]["size"]
    assert json.loads(last.userMetadata)["app"] == "cdc_apply-land:pg"


def test_a_bronze_table_with_columns_of_its_own_is_appended_through_spark(spark, tmp_path):
    path = str(tmp_path / "bronze")
    spark.sql(f"CREATE TABLE delta.`{path}` (source STRING NOT NULL, seq BIGINT NOT NULL, lsn BIGINT NOT NULL, "
              "payload BINARY NOT NULL, landed_at TIMESTAMP, note STRING) USING delta")
    writer, state = _writer(spark, tmp_path / "bronze")
    assert writer.folder is None
    batch = _batch(state, 0, 3)
    writer.append(batch)
    assert [r.seq for r in spark.read.format("delta").load(path).orderBy("seq").collect()] == [0, 1, 2]


def test_direct_appends_go_on_after_cdc_apply_optimize_compacts_bronze(spark, tmp_path):
    from cdc_apply.config import parse_config
    from cdc_apply.lake.maintenance import optimize_bronze

    path = tmp_path / "bronze"
    writer, state = _writer(spark, path)
    landed = []
    for first in (0, 10, 20, 30):
        batch = _batch(state, first, 10)
        writer.append(batch)
        landed += batch.rows
        state = batch.state
    config = parse_config({"bronze": {"path": str(path)}, "silver": {"path": str(tmp_path / "silver")},
                           "state": {"path": str(tmp_path / "state")}})
    done = optimize_bronze(spark, config)
    assert (done.files_removed, done.files_added) == (4, 1)
    before = _jobs(spark)
    batch = _batch(state, 40, 10)
    writer.append(batch)            # the compaction's commit does not hide the landed batch or conflict
    landed += batch.rows
    assert _jobs(spark) == before, "still committed directly"
    reopened, resumed = _writer(spark, path)
    assert resumed == batch.state
    rows = [(r.seq, r.lsn, bytes(r.payload)) for r in spark.read.format("delta").load(str(path)).orderBy("seq").collect()]
    assert rows == landed


def test_the_test_lakes_plain_appends_run_no_spark_job_and_record_no_lander_state(spark, tmp_path):
    from cdc_apply.delta.bronze_schema import create_bronze_table
    from cdc_apply.testing.pytest_plugin import append_bronze

    path = str(tmp_path / "bronze")
    create_bronze_table(spark_tables(spark), path)
    before = _jobs(spark)
    append_bronze(spark, path, [("a", 0, 10, b"x"), ("b", 0, 11, b"y")])
    append_bronze(spark, path, [("a", 1, 12, bytearray(b"z"))])
    assert _jobs(spark) == before
    rows = [(r.source, r.seq, r.lsn, bytes(r.payload), r.landed_at)
            for r in spark.read.format("delta").load(path).orderBy("seq", "source").collect()]
    assert rows == [("a", 0, 10, b"x", None), ("b", 0, 11, b"y", None), ("a", 1, 12, b"z", None)]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("operation = 'WRITE'").collect()
    assert len(history) == 2 and all(r.userMetadata is None for r in history)
    assert [a["stats"] for a in _adds(path)][0].count('"source"') == 1   # two sources: no source bounds


def test_a_plain_append_to_a_table_pyarrow_may_not_write_goes_through_spark(spark, tmp_path):
    from cdc_apply.testing.pytest_plugin import append_bronze

    path = str(tmp_path / "bronze")
    spark.sql(f"CREATE TABLE delta.`{path}` (source STRING NOT NULL, seq BIGINT NOT NULL, lsn BIGINT NOT NULL, "
              "payload BINARY NOT NULL, landed_at TIMESTAMP) USING delta PARTITIONED BY (source)")
    append_bronze(spark, path, [("a", 0, 10, b"x")])
    assert [(r.source, r.seq) for r in spark.read.format("delta").load(path).collect()] == [("a", 0)]
    assert all("source=a" in a["path"] for a in _adds(path))
