"""Bookkeeping appends are written once per apply version, across processes; the newest version
written is read from the newest append's file statistics where they tell it, by a query otherwise."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from cdc_apply.config import parse_config
from cdc_apply.delta.ddl import create_table
from cdc_apply.delta.engine import ClassicTables, spark_tables
from cdc_apply.lake.books.bookkeeping import SCHEMAS, Bookkeeping

pytestmark = pytest.mark.spark

NOW = datetime(2026, 11, 27, tzinfo=timezone.utc)


def _bookkeeping(tmp_path) -> Bookkeeping:
    config = parse_config({"bronze": {"path": str(tmp_path / "bronze")}, "silver": {"path": str(tmp_path / "silver")},
                           "state": {"path": str(tmp_path / "state")}})
    return Bookkeeping(config)


def _written(spark, tmp_path, versions) -> tuple[Bookkeeping, object]:
    """Bookkeeping tables with ``type_cache`` rows of ``versions``, each version one append; the table's ref."""
    books = _bookkeeping(tmp_path)
    create_table(spark_tables(spark), books.ref("type_cache"), SCHEMAS["type_cache"], {"delta.appendOnly": "true"})
    for version in versions:
        books.append(spark_tables(spark), "type_cache", _types(version), version)
    return books, books.ref("type_cache")


def _types(version: int) -> list[tuple]:
    return [("pg", 16000 + version, "public", f"t{version}", version, version * 10, version, NOW)]


def _versions(spark, books: Bookkeeping) -> list[int]:
    return sorted(r.apply_version for r in books.ref("type_cache").read(spark).collect())


def test_a_version_written_before_is_not_appended_again_by_another_process(spark, tmp_path):
    books, ref = _written(spark, tmp_path, ())
    assert spark_tables(spark).newest_added_max(ref, "apply_version") == -1
    for version in (1, 2):
        books.append(spark_tables(spark), "type_cache", _types(version), version)
    assert spark_tables(spark).newest_added_max(ref, "apply_version") == 2
    again = _bookkeeping(tmp_path)            # a re-run after a crash: knows nothing of what was written
    again.append(spark_tables(spark), "type_cache", _types(2), 2)
    again.append(spark_tables(spark), "type_cache", _types(3), 3)
    assert _versions(spark, books) == [1, 2, 3]


def test_commits_that_add_no_rows_and_compactions_leave_the_newest_version_readable(spark, tmp_path):
    books, ref = _written(spark, tmp_path, (1, 2, 3))
    spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ('cdc_apply.note' = 'a')")
    assert spark.sql(f"OPTIMIZE {ref.sql}").first().metrics.numFilesRemoved == 3
    assert spark_tables(spark).newest_added_max(ref, "apply_version") == 3
    for note in "bcd":                        # the newest append is now further back than the commits read
        spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ('cdc_apply.note' = '{note}')")
    assert spark_tables(spark).newest_added_max(ref, "apply_version") is None
    again = _bookkeeping(tmp_path)            # answered by the query instead
    again.append(spark_tables(spark), "type_cache", _types(3), 3)
    assert _versions(spark, books) == [1, 2, 3]


def test_files_without_statistics_are_answered_by_the_query(spark, tmp_path):
    spark.conf.set("spark.databricks.delta.stats.collect", "false")
    try:
        books, ref = _written(spark, tmp_path, (1,))
    finally:
        spark.conf.unset("spark.databricks.delta.stats.collect")
    assert spark_tables(spark).newest_added_max(ref, "apply_version") is None
    again = _bookkeeping(tmp_path)
    again.append(spark_tables(spark), "type_cache", _types(1), 1)
    assert _versions(spark, books) == [1]


def test_create_all_names_the_tables_it_created_and_only_those(spark, tmp_path):
    import shutil

    books = _bookkeeping(tmp_path)
    assert books.create_all(spark_tables(spark)) == frozenset(SCHEMAS)
    assert all(spark_tables(spark).exists(books.ref(table)) for table in SCHEMAS)
    assert _bookkeeping(tmp_path).create_all(spark_tables(spark)) == frozenset()
    shutil.rmtree(books.ref("quarantine").path)       # a table lost (or one a newer cdc_apply adds)
    assert _bookkeeping(tmp_path).create_all(spark_tables(spark)) == {"quarantine"}


def test_the_state_a_job_loads_from_local_tables_without_spark_equals_spark_s_read(lake, monkeypatch):
    from cdc_apply.lake.books import bookkeeping
    from cdc_apply.pgoutput import messages as m
    from cdc_apply.testing.stream import StreamBuilder

    for name in ("a", "b"):
        b = StreamBuilder(name)
        t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
        for i in range(3):
            with b.transaction() as tx:
                tx.insert(t, {"id": i, "v": name})
        with b.transaction() as tx:
            tx.b.emit(m.Type(tx.xid, 90001, "public", f"mood_{name}"))
            wider = b.relation("public", "t", [("id", "int4", True), ("v", "text", False), ("w", "int8", False)],
                               oid=t.oid, emit=False)
            tx.relation(wider)
            tx.insert(wider, {"id": 9, "v": name, "w": 1})
        lake.land(b)
        lake.apply()
    books = Bookkeeping(lake.config)
    for table in ("progress", "schema_history", "type_cache"):   # read by delta-rs, not by Spark's fallback
        assert bookkeeping.local_rows(books.ref(table), ("source",)), table
    local = (books.load_progress(spark_tables(lake.spark)), books.load_written(), books.load_history(spark_tables(lake.spark)),
             books.load_history(spark_tables(lake.spark), through_version=1))
    assert local[0][0] == 2 and sorted(local[0][1]) == ["a", "b"] and local[2]["b"].types
    monkeypatch.setattr(bookkeeping, "local_rows", lambda *args: None)
    monkeypatch.setattr(bookkeeping, "newest_rows_per_source", lambda *args: None)
    queried = Bookkeeping(lake.config)
    engine = spark_tables(lake.spark)
    assert (queried.load_progress(engine), queried.load_written(), queried.load_history(engine),
            queried.load_history(engine, through_version=1)) == local
    assert sorted(local[3]) == ["a"]


def test_a_later_run_finds_its_local_state_tables_and_adds_the_columns_an_older_one_lacks_without_spark(
        spark, tmp_path, monkeypatch):
    import shutil

    from cdc_apply.delta.refs import TableRef

    books = _bookkeeping(tmp_path)
    assert books.create_all(spark_tables(spark)) == frozenset(SCHEMAS)
    older = SCHEMAS["quarantine"][:-1]   # the quarantine table as an older cdc_apply made it
    shutil.rmtree(books.ref("quarantine").path)
    create_table(spark_tables(spark), books.ref("quarantine"), older, {"delta.appendOnly": "true"})
    asked = []
    exists = ClassicTables.exists
    monkeypatch.setattr(ClassicTables, "exists", lambda tables, ref: asked.append(ref.path) or exists(tables, ref))
    assert _bookkeeping(tmp_path).create_all(spark_tables(spark)) == frozenset()
    assert asked == []   # delta-rs read every table's columns: no Spark snapshot of any
    names = [f.name for f in books.ref("quarantine").read(spark).schema.fields]
    assert names == [name for name, _ in SCHEMAS["quarantine"]]


def test_the_quarantined_sources_read_without_spark_are_those_spark_reads(spark, tmp_path, monkeypatch):
    from cdc_apply.lake.books import bookkeeping

    books = _bookkeeping(tmp_path)
    books.create_all(spark_tables(spark))
    assert books.quarantined_sources(spark_tables(spark)) == set()
    columns = [name for name, _ in SCHEMAS["quarantine"]]
    rows = spark.createDataFrame([{c: None for c in columns} | {"source": s} for s in ("a", "b", "a")],
                                 books.ref("quarantine").read(spark).schema)
    rows.write.format("delta").mode("append").save(books.ref("quarantine").path)
    assert books.quarantined_sources(spark_tables(spark)) == {"a", "b"}
    monkeypatch.setattr(bookkeeping, "local_rows", lambda *args: None)
    assert books.quarantined_sources(spark_tables(spark)) == {"a", "b"}
