"""Bronze's newest seq per source (the lag), followed through the Delta log instead of a query a batch."""

from __future__ import annotations

from cdc_apply.delta.bronze_schema import create_bronze_table, spark_schema
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.sources.bronze_tail import BronzeTail, newest_seqs


def _append(spark, path: str, rows, files: int = 1) -> None:
    """Bronze rows ``(source, seq)`` in one commit of ``files`` files (one file: every source in it)."""
    df = spark.createDataFrame([(s, q, q, b"x", None) for s, q in rows], spark_schema())
    df.repartition(files, "source").write.format("delta").mode("append").save(path) if files > 1 else \
        df.coalesce(1).write.format("delta").mode("append").save(path)


def _bronze(spark, tmp_path) -> tuple[str, BronzeTail]:
    path = str(tmp_path / "bronze")
    create_bronze_table(spark_tables(spark), path)
    return path, BronzeTail(spark_tables(spark), TableRef(path=path))


def test_the_newest_seqs_are_followed_through_the_commits_after_one_query(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    _append(spark, path, [("pg", 0), ("pg", 1)])
    _append(spark, path, [("other", 5)])
    assert tail.newest({"pg": 0, "other": 0}) == {"pg": 1, "other": 5}
    for first in (2, 4, 6):
        _append(spark, path, [("pg", first), ("pg", first + 1)])
        _append(spark, path, [("other", first + 10)])
        assert tail.newest({"pg": 1, "other": 5}) == {"pg": first + 1, "other": first + 10}
    assert tail.queries == 1 and tail.scans == 0   # the first answer came from the files' statistics


def test_a_source_with_nothing_at_or_past_its_floor_is_left_out(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    _append(spark, path, [("pg", 0), ("pg", 1)])
    assert tail.newest({"pg": 0}) == {"pg": 1}
    assert tail.newest({"pg": 2}) == {}
    _append(spark, path, [("pg", 2)])
    assert tail.newest({"pg": 2}) == {"pg": 2} and tail.queries == 1


def test_a_commit_that_removes_bronze_files_is_answered_by_the_query(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    _append(spark, path, [("pg", q) for q in range(6)])
    assert tail.newest({"pg": 0}) == {"pg": 5}
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE seq >= 4")
    assert tail.newest({"pg": 0}) == {"pg": 3} and tail.queries == 2


def test_a_file_holding_several_sources_is_answered_by_the_query(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    _append(spark, path, [("pg", 0)])
    assert tail.newest({"pg": 0, "other": 0}) == {"pg": 0}
    _append(spark, path, [("pg", 1), ("other", 7)])
    assert tail.newest({"pg": 0, "other": 0}) == {"pg": 1, "other": 7} and tail.queries == 2 and tail.scans == 1
    _append(spark, path, [("pg", 2), ("other", 8)], files=2)   # one file per source: followed again
    assert tail.newest({"pg": 0, "other": 0}) == {"pg": 2, "other": 8} and tail.queries == 2


def test_a_source_name_longer_than_delta_s_statistics_keep_is_answered_by_the_query(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    long = "a-source-name-longer-than-thirty-two-characters"
    _append(spark, path, [(long, 0)])
    assert tail.newest({long: 0}) == {long: 0}
    _append(spark, path, [(long, 1)])
    assert tail.newest({long: 0}) == {long: 1} and tail.queries == 2 and tail.scans == 2


def test_the_first_answer_is_the_newest_seq_of_each_source_s_files_at_or_past_its_floor(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    _append(spark, path, [("pg", 0), ("pg", 1)])
    _append(spark, path, [("pg", 2), ("pg", 3), ("other", 4)], files=2)
    _append(spark, path, [])   # an append of no rows
    assert tail.newest({"pg": 2, "other": 5, "gone": 0}) == {"pg": 3}
    assert tail.queries == 1 and tail.scans == 0


def test_a_bronze_file_with_deleted_rows_is_answered_by_a_scan(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    _append(spark, path, [("pg", q) for q in range(6)])
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false', "
              "'delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE seq >= 4")   # marks the rows: the file's statistics stay
    assert tail.newest({"pg": 0}) == {"pg": 3} and tail.scans == 1


def test_a_source_the_first_query_did_not_ask_for_is_queried_when_asked(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    _append(spark, path, [("pg", 0)])
    _append(spark, path, [("late", 3)])
    assert tail.newest({"pg": 0}) == {"pg": 0}
    assert tail.newest({"pg": 0, "late": 0}) == {"pg": 0, "late": 3} and tail.queries == 2


def test_the_status_command_s_one_off_answer_equals_the_followed_one(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    _append(spark, path, [("pg", 0), ("pg", 1)])
    tail.newest({"pg": 0})
    _append(spark, path, [("pg", 2)])
    assert newest_seqs(spark_tables(spark), TableRef(path=path), {"pg": 1}) == tail.newest({"pg": 1}) == {"pg": 2}
    assert newest_seqs(spark_tables(spark), TableRef(path=str(tmp_path / "none")), {"pg": 0}) == {}


def test_a_compaction_of_bronze_changes_no_row_and_is_followed_without_a_query(spark, tmp_path):
    path, tail = _bronze(spark, tmp_path)
    for first in (0, 2, 4):
        _append(spark, path, [("pg", first), ("pg", first + 1)])
    assert tail.newest({"pg": 0}) == {"pg": 5}
    assert spark.sql(f"OPTIMIZE delta.`{path}`").first().metrics.numFilesRemoved == 3
    _append(spark, path, [("pg", 6)])
    assert tail.newest({"pg": 0}) == {"pg": 6} and tail.queries == 1


def _commits(spark, path: str, seqs, at_minute: int) -> None:
    """Bronze rows of source ``pg``: a Commit at each of ``seqs`` (committed ``at_minute`` past 12:00), an
    Insert-like row between them."""
    from datetime import datetime, timezone

    from cdc_apply.pgoutput import messages as m
    from cdc_apply.pgoutput.encoder import encode

    when = datetime(2026, 12, 1, 12, at_minute, tzinfo=timezone.utc)
    ts = int((when - datetime(2000, 1, 1, tzinfo=timezone.utc)).total_seconds() * 1_000_000)
    commit = encode(m.Commit(0, 0x100, 0x200, ts))
    rows = [("pg", q, q, commit if q in seqs else b"I....", None) for q in range(min(seqs) - 3, max(seqs) + 1)]
    spark.createDataFrame(rows, spark_schema()).coalesce(1).write.format("delta").mode("append").save(path)


def test_the_oldest_unapplied_change_is_found_past_the_first_query_s_window(spark, tmp_path, monkeypatch):
    from datetime import datetime, timezone

    from cdc_apply.lake.sources import bronze_tail

    path, _ = _bronze(spark, tmp_path)
    _commits(spark, path, [20], at_minute=1)      # a transaction longer than the window: due at 12:01
    _commits(spark, path, [40], at_minute=2)
    now = datetime(2026, 12, 1, 12, 10, tzinfo=timezone.utc)
    ages = lambda after: bronze_tail.unapplied_ages(spark, TableRef(path=path), {"pg": after}, {"pg": 40}, now)
    monkeypatch.setattr(bronze_tail, "FIRST_DUE_WINDOW", 5)
    asked = []
    first_due = bronze_tail._first_due
    monkeypatch.setattr(bronze_tail, "_first_due", lambda *a: asked.append(dict(a[2])) or first_due(*a))
    assert ages(10) == {"pg": 540.0}
    assert asked == [{"pg": (10, 15)}, {"pg": (15, 40)}]
    asked.clear()
    assert ages(17) == {"pg": 540.0} and asked == [{"pg": (17, 22)}]   # due within the window: one query
    assert ages(20) == {"pg": 480.0}
