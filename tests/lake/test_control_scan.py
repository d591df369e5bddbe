"""The control scan (cdc_apply.lake.control_scan): the rows it keeps, and the bronze it leaves unread."""

from __future__ import annotations

import pytest

from cdc_apply.delta.bronze_schema import create_bronze_table
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.control_scan import scan_controls, scanned_rows
from cdc_apply.lander.bronze_commit import stream_batch, write_file
from cdc_apply.lander.bronze_writer import BronzeWriter
from cdc_apply.lander.state import ResumeState
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark

INSERTS = 20_000


def _scan_rows_read(plan) -> int:
    """Rows the plan's bronze scan gave its filter (the scan node's ``numOutputRows``)."""
    leaves = plan.collectLeaves()
    counts = [leaves.apply(k).metrics().apply("numOutputRows").value() for k in range(leaves.size())
              if "Scan" in leaves.apply(k).nodeName()]
    assert len(counts) == 1, plan.toString()
    return counts[0]


def test_a_scan_of_bronze_skips_the_row_groups_of_inserts_only_and_keeps_every_control_message(spark, tmp_path):
    """As the lander writes a snapshot: one file, its frames and its copied rows in row groups of their
    own. The Inserts' row group is left unread; the scan still finds the Relation, Begin and Commit."""
    from datetime import datetime, timezone

    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        for i in range(INSERTS):
            tx.insert(t, {"id": i, "v": f"row {i}"})
    rows = [(seq, lsn, payload) for _, seq, lsn, payload in b.rows()]
    assert [p[:1] for _, _, p in rows[:2]] == [b"R", b"B"] and rows[-1][2][:1] == b"C"
    path = str(tmp_path / "bronze")
    create_bronze_table(spark_tables(spark), path)
    writer = BronzeWriter(spark_tables(spark), TableRef(path=path), "src", direct=True)
    state = writer.open()
    now = datetime.now(timezone.utc)
    groups = [rows[:2], rows[2:-1], rows[-1:]]   # one row group each, as ParquetWriter writes each batch
    written = write_file(writer.folder, [stream_batch("src", group, now) for group in groups])
    writer.commit_files([written], ResumeState(batch=state.batch + 1, last_seq=rows[-1][0],
                                               resume_lsn=rows[-1][1] + 1, messages=len(rows)))
    fresh = spark.read.format("delta").load(path).select("source", "seq", "lsn", "payload")

    kept = scanned_rows(fresh)
    collected = kept.collect()
    assert [r.payload[:1] for r in collected] == [b"R", b"B", b"C"] and all(r.driver for r in collected)
    assert _scan_rows_read(kept._jdf.queryExecution().executedPlan()) == 3   # not 20,003
    scan = scan_controls(fresh, ["src"])
    assert [seq for seq, _, _ in scan.controls["src"]] == [rows[0][0], rows[1][0], rows[-1][0]]
    assert scan.held["src"] == [] and scan.unread["src"] == []
