"""A snapshot's rows go from bronze straight into the emptied silver table (one append after its
Truncate), the batch's later changes merge on top, and a re-run batch loads nothing twice."""

from __future__ import annotations

import json

import pytest

from cdc_apply.pgoutput import UNCHANGED_TOAST
from cdc_apply.testing.reference import ReferenceApplier
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark

DOC = "d" * 3000


class Crash(RuntimeError):
    pass


def _stream():
    b = StreamBuilder("loads")
    t = b.relation("public", "t", [("id", "int8", True), ("v", "text", False), ("doc", "text", False)])
    bag = b.relation("public", "bag", [("x", "int4", False)], replica_identity="f")
    with b.transaction() as tx:                  # silver's rows before the snapshot: all replaced
        tx.insert(t, {"id": 1, "v": "stale", "doc": "old"})
        tx.insert(t, {"id": 99, "v": "gone", "doc": "old"})
        tx.insert(bag, {"x": 0})
    first = len(b.rows())
    b.snapshot(t, [{"id": i, "v": f"v{i}", "doc": DOC + str(i)} for i in range(1, 6)], chunk_rows=2)
    b.snapshot(bag, [{"x": 1}, {"x": 1}])
    with b.transaction() as tx:                  # after the snapshots, in the same batch
        tx.update(t, {"id": 2, "v": "two", "doc": UNCHANGED_TOAST})   # the loaded row's value stays
        tx.delete(t, key={"id": 3})
        tx.insert(t, {"id": 6, "v": "six", "doc": "new"})
        tx.insert(bag, {"x": 5})
    b.snapshot(bag, [{"x": 2}, {"x": 2}, {"x": 3}])   # replaces the first copy of bag and the insert
    return b.rows(), first, t


def _expected(rows):
    ref = ReferenceApplier()
    for _, seq, _, payload in rows:
        ref.feed(seq, payload)
    return (sorted((int(r["id"]), r["v"], r["doc"]) for r in ref.rows("public.t")),
            sorted(int(r["x"]) for r in ref.rows("public.bag")))


def _silver(lake):
    t = sorted((r.id, r.v, r.doc) for r in lake.silver("public", "t").collect())
    bag = sorted(r.x for r in lake.silver("public", "bag").collect())
    return t, bag


def _snapshot_inserts(lake) -> list[int]:
    """The transactions log's inserts per snapshot transaction (xid 2), in commit order."""
    rows = lake.state("transactions").where("xid = 2").orderBy("commit_seq").collect()
    return [sum(t.inserts for t in r.tables) for r in rows]


def test_a_snapshot_is_loaded_by_one_append_after_its_truncate_and_later_changes_merge_on_top(lake_factory):
    lake = lake_factory("snapshot_loads")
    rows, first, t = _stream()
    lake.land(rows[:first])
    lake.apply()
    lake.land(rows[first:])
    _, printed = lake.apply()
    assert _silver(lake) == _expected(rows)
    assert (2, "two", DOC + "2") in _silver(lake)[0]
    from cdc_apply.lake.tables import silver_ref

    history = (silver_ref(lake.config, "public", "t").delta_table(lake.spark).history()
               .where("userMetadata IS NOT NULL").orderBy("version").collect())
    steps = [(h.operation, json.loads(h.userMetadata)["cdc_apply"].get("apply_step", 0) % 64) for h in history]
    # The batch: the snapshot's Truncate (1), its rows in one append (2), the later changes' MERGE (3).
    assert steps[-3:] == [("DELETE", 1), ("WRITE", 2), ("MERGE", 3)]
    assert _snapshot_inserts(lake) == [5, 2, 3]
    assert "public.t +" in printed


def test_a_batch_run_again_after_its_snapshot_load_loads_nothing_twice(lake_factory):
    from cdc_apply.lake.pipeline import ApplyPipeline

    lake = lake_factory("snapshot_loads_crash", apply={"parallelism": 1})
    rows, first, _ = _stream()
    lake.land(rows[:first])
    lake.apply()
    lake.land(rows[first:])
    state = {}

    def hook(point):
        if point == "logs" and state["pipeline"].version == 1:
            raise Crash("injected crash after the tables")

    pipeline = ApplyPipeline(lake.spark, lake.config, fault_hook=hook)
    state["pipeline"] = pipeline
    with pytest.raises(Exception, match="injected crash"):
        pipeline.run(once=True)
    lake.apply()
    assert _silver(lake) == _expected(rows)
    assert _snapshot_inserts(lake) == [5, 2, 3]
