"""A lander's snapshot transaction (docs/SNAPSHOTS.md) resets a silver table to the copied rows, and
transactions committed before the snapshot's LSN but landed after it leave that table alone."""

from __future__ import annotations

import pytest

from cdc_apply.pgoutput import UNCHANGED_TOAST
from cdc_apply.testing.reference import ReferenceApplier
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def test_a_snapshot_replaces_stale_rows_and_older_transactions_landed_after_it_skip_its_table(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    bag = b.relation("public", "bag", [("x", "int4", False)], replica_identity="f")
    u = b.relation("public", "u", [("id", "int4", True)])
    with b.transaction() as tx:          # silver gets stale rows: 9 is gone from the source by the snapshot
        tx.insert(t, {"id": 1, "v": "old"})
        tx.insert(t, {"id": 9, "v": "gone"})
        tx.insert(bag, {"x": 5})
    lake = lake_factory("snapshot_apply")
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    c = b.snapshot(t, [{"id": 1, "v": "one"}, {"id": 2, "v": "two"}, {"id": 3, "v": "three"}], chunk_rows=2)
    b.snapshot(bag, [{"x": 5}, {"x": 5}, {"x": 6}])
    with b.transaction(commit_lsn=c - 0x100) as tx:   # in both copies already
        tx.insert(t, {"id": 2, "v": "two"})
        tx.insert(bag, {"x": 6})
        tx.insert(u, {"id": 7})
    with b.transaction() as tx:                       # after the snapshots: applies
        tx.update(t, {"id": 3, "v": UNCHANGED_TOAST})
        tx.delete(bag, old={"x": 5})
        tx.insert(t, {"id": 4, "v": "four"})
    lake.land(b.rows()[done:])
    _, printed = lake.apply()
    assert sorted((r.id, r.v) for r in lake.silver("public", "t").collect()) == [
        (1, "one"), (2, "two"), (3, "three"), (4, "four")]
    assert sorted(r.x for r in lake.silver("public", "bag").collect()) == [5, 6]
    assert [r.id for r in lake.silver("public", "u").collect()] == [7]
    snapshot_rows = lake.silver("public", "t").where("id = 1").first()
    assert snapshot_rows._cdc_commit_lsn == c
    # The reference applier follows the same rule.
    ref = ReferenceApplier()
    for _, seq, _, payload in b.rows():
        ref.feed(seq, payload)
    assert sorted((int(r["id"]), r["v"]) for r in ref.rows("public.t")) == [
        (1, "one"), (2, "two"), (3, "three"), (4, "four")]
    assert sorted(int(r["x"]) for r in ref.rows("public.bag")) == [5, 6]
