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
