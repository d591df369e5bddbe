"""Snapshots of soft-deleting tables (``deletes = "soft"``): a snapshot's replace of the table, or of a
chunk's key range, marks the rows it lacks deleted instead of removing them, and a copied key revives its
marked row instead of standing beside it."""

from __future__ import annotations

import pytest

from cdc_apply.pgoutput.snapshot import KeyRange
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def test_a_snapshot_marks_the_rows_it_lacks_and_revives_the_keys_it_copies(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    w = b.relation("public", "w", [("id", "int4", True), ("v", "text", False)])
    bag = b.relation("public", "bag", [("x", "int4", False)], replica_identity="f")
    with b.transaction() as tx:
        for rel in (t, w):
            tx.insert(rel, {"id": 1, "v": "old"})
            tx.insert(rel, {"id": 5, "v": "five"})
            tx.insert(rel, {"id": 9, "v": "gone"})
        tx.insert(bag, {"x": 5})
    with b.transaction() as tx:   # a marked row the snapshots copy again
        tx.delete(t, old={"id": 5})
        tx.delete(w, old={"id": 5})
    lake = lake_factory("soft_snapshots", silver={"soft_deletes": ["public.*"]})
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    low = b.snapshot(t, [{"id": 1, "v": "one"}, {"id": 2, "v": "two"}], key_range=KeyRange("id", None, 5, rows=2))
    high = b.snapshot(t, [{"id": 5, "v": "back"}], key_range=KeyRange("id", 5, None, rows=1))
    whole = b.snapshot(w, [{"id": 1, "v": "one"}, {"id": 5, "v": "back"}])
    b.snapshot(bag, [{"x": 5}, {"x": 6}])
    lake.land(b.rows()[done:])
    lake.apply()
    for name, marked_at in (("t", high), ("w", whole)):
        rows = {r.id: r for r in lake.silver("public", name).collect()}
        assert len(lake.silver("public", name).collect()) == len(rows), f"{name}: a key twice"
        assert {i: (r.v, r._cdc_deleted) for i, r in rows.items()} == {
            1: ("one", False), 5: ("back", False), 9: ("gone", True), **({2: ("two", False)} if name == "t" else {})}
        assert rows[9]._cdc_commit_lsn == marked_at
    assert low < high
    bag_rows = lake.silver("public", "bag").collect()
    assert sorted(r.x for r in bag_rows if not r._cdc_deleted) == [5, 6]
    assert [r.x for r in bag_rows if r._cdc_deleted] == [5]


def test_a_table_whose_deletes_become_soft_gains_the_marker_and_keeps_its_rows_live(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "one"})
        tx.insert(t, {"id": 2, "v": "two"})
    lake = lake_factory("soft_later")
    lake.land(b.rows())
    lake.apply()
    assert "_cdc_deleted" not in lake.silver("public", "t").columns
    done = len(b.rows())
    with b.transaction() as tx:
        tx.delete(t, old={"id": 2})
    lake.extra["tables"] = {"public.t": {"deletes": "soft"}}
    lake.land(b.rows()[done:])
    lake.apply()
    rows = {r.id: r._cdc_deleted for r in lake.silver("public", "t").collect()}
    assert rows == {1: None, 2: True}   # written before the marker existed: NULL, read as live
