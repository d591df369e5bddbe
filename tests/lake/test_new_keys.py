"""Keys a batch inserts first are appended without a join with silver (they cannot be there yet);
only the other keys are MERGEd."""

from __future__ import annotations

import json

import pytest

from cdc_apply.pgoutput import UNCHANGED_TOAST
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def _history(lake, name):
    rows = lake.spark.sql(f"DESCRIBE HISTORY delta.`{lake.root}/silver/public/{name}`").collect()
    return [(r.operation, json.loads(r.userMetadata)["cdc_apply"] if r.userMetadata else {}) for r in rows
            if r.operation != "SET TBLPROPERTIES"]


def test_an_insert_only_batch_into_a_table_with_rows_is_one_append(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "a"})
    lake = lake_factory("insert_only")
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    with b.transaction() as tx:
        for i in range(2, 6):
            tx.insert(t, {"id": i, "v": "b"})
    lake.land(b.rows()[done:])
    lake.apply()
    assert sorted(r.id for r in lake.silver("public", "t").collect()) == [1, 2, 3, 4, 5]
    (op, meta), (first_op, _) = _history(lake, "t")[:2]
    assert (op, first_op) == ("WRITE", "WRITE") and meta["last_commit_lsn"]  # an append says what it applied too


@pytest.mark.parametrize("append_min", [0, None], ids=["from_any_size", "default"])
def test_new_keys_are_appended_and_the_others_merged_in_one_batch_from_a_size_on(lake_factory, monkeypatch, append_min):
    if append_min is not None:
        monkeypatch.setattr("cdc_apply.lake.silver_tables.NEW_KEYS_APPEND_MIN", append_min)
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        for i in (1, 2, 3):
            tx.insert(t, {"id": i, "v": "old"})
    lake = lake_factory(f"new_keys_{append_min}")
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    with b.transaction() as tx:
        tx.insert(t, {"id": 10, "v": "new"})
        tx.update(t, {"id": 10, "v": UNCHANGED_TOAST})   # carried within the batch
        tx.insert(t, {"id": 11, "v": "gone"})
        tx.delete(t, key={"id": 11})
        tx.update(t, {"id": 1, "v": "changed"})
        tx.delete(t, key={"id": 2})
        tx.insert(t, {"id": 2, "v": "back"})             # first event a delete: merged, not appended
        tx.update(t, {"id": 12, "v": "moved"}, key={"id": 3})   # a move-in: 12 is new
    lake.land(b.rows()[done:])
    lake.apply()
    assert sorted((r.id, r.v) for r in lake.silver("public", "t").collect()) == [
        (1, "changed"), (2, "back"), (10, "new"), (12, "moved")]
    recent = _history(lake, "t")[:2]
    if append_min is None:  # a few new keys: one MERGE inserts them (a second commit would cost more)
        assert [op for op, _ in recent] == ["MERGE", "WRITE"]
        return
    assert [(op, meta.get("part")) for op, meta in recent] == [("WRITE", "new keys"), ("MERGE", None)]
    assert recent[0][1]["relation"] == "public.t" and recent[0][1]["last_commit_lsn"] == recent[1][1]["last_commit_lsn"]


def test_a_configured_key_is_not_trusted_to_be_unique_and_its_batch_is_merged(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", True)], replica_identity="f")
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "a"})
    lake = lake_factory("configured_key", tables={"public.t": {"key": ["id"]}})
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    with b.transaction() as tx:
        tx.insert(t, {"id": 2, "v": "b"})
    lake.land(b.rows()[done:])
    lake.apply()
    assert _history(lake, "t")[0][0] == "MERGE"


def test_silver_writes_of_a_table_keyed_by_one_column_build_no_parquet_dictionary_of_the_key(lake_factory, monkeypatch):
    """One row per key: the key's dictionary would only be dropped as larger than its plain values. The
    other columns, and a table keyed by two columns (each repeats), keep Parquet's choice."""

    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    import cdc_apply.lake.silver_tables as silver_tables

    lake = lake_factory("key_dictionary")
    seen = []   # (table, {column: the session's dictionary setting of its Parquet column}) at each write

    def spying(name):
        write = getattr(silver_tables, name)

        def spy(session, rows, work, *args, **kwargs):
            physical = {f.name: f.metadata.get("delta.columnMapping.physicalName", f.name)
                        for f in DeltaTable(str(work.ref)).schema().fields}
            conf = getattr(session, "spark", session).conf   # merge_keyed takes the engine, the appends a session
            seen.append((work.qualified_name, {c: conf.get(f"parquet.enable.dictionary#{p}", None)
                                               for c, p in physical.items()}))
            return write(session, rows, work, *args, **kwargs)
        monkeypatch.setattr(silver_tables, name, spy)

    for name in ("append_rows", "append_new_keys", "merge_keyed"):
        spying(name)
    b = StreamBuilder("src")
    one = b.relation("public", "one", [("id", "int4", True), ("v", "text", False)])
    two = b.relation("public", "two", [("a", "int4", True), ("b", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        for i in range(40):
            tx.insert(one, {"id": i, "v": f"v{i % 2}"})
            tx.insert(two, {"a": i % 3, "b": i, "v": f"v{i % 2}"})
    lake.land(b.rows())
    lake.apply()   # into empty tables: appends
    done = len(b.rows())
    with b.transaction() as tx:
        tx.update(one, {"id": 1, "v": "v0"})
        tx.update(two, {"a": 1, "b": 1, "v": "v0"})
        tx.insert(one, {"id": 99, "v": "v1"})
    lake.land(b.rows()[done:])
    lake.apply()   # MERGEs
    assert {t for t, _ in seen} == {"public.one", "public.two"} and len(seen) >= 4
    for table, settings in seen:
        expected = {"id": "false"} if table == "public.one" else {}
        assert {c: v for c, v in settings.items() if v is not None} == expected, table
    assert lake.silver("public", "one").count() == 41
    # Only the key's dictionary is off: the low-cardinality text column of the same files keeps its own.
    path = f"{lake.root}/silver/public/one"
    physical = {f.name: f.metadata.get("delta.columnMapping.physicalName", f.name) for f in DeltaTable(path).schema().fields}
    # The table's data files, every version's (Delta's change-data files, written by Delta beside a MERGE's
    # updates, are Delta's own: a run where they kept the key's dictionary failed here now and then).
    table = DeltaTable(path)
    data_files = {a["path"] for v in range(table.version() + 1)
                  for a in pa.table(DeltaTable(path, version=v).get_add_actions(flatten=True)).to_pylist()}
    assert len(data_files) >= 2
    for file in (f"{path}/{name}" for name in sorted(data_files)):
        chunks = {c.path_in_schema: c for g in range(pq.ParquetFile(file).metadata.num_row_groups)
                  for c in (pq.ParquetFile(file).metadata.row_group(g).column(k)
                            for k in range(pq.ParquetFile(file).metadata.num_columns))}
        if physical["v"] in chunks:
            assert chunks[physical["v"]].has_dictionary_page and not chunks[physical["id"]].has_dictionary_page


@pytest.mark.parametrize("key_columns", [1, 2], ids=["one key column", "two key columns"])
def test_a_batch_splits_into_the_keys_to_merge_their_range_and_the_rows_to_append(spark, key_columns):
    from types import SimpleNamespace

    from cdc_apply.lake.silver.appends import split_new_keys

    # (key, new, action, complete): only new, kept, complete rows are appended; the range is of the others
    rows = [(5, False, "upsert", True), (2, False, "delete", True), (9, True, "upsert", True),
            (11, True, "upsert", False), (12, True, "delete", True), (40, True, "upsert", True)]
    collapsed = spark.createDataFrame(rows, "k_0 int, _new boolean, _action string, _complete boolean")
    work = SimpleNamespace(key_index=tuple(range(key_columns)))
    assert split_new_keys(collapsed, work) == ((2, 2, 5, 2) if key_columns == 1 else (2, None, None, 2))
