"""History of rows that did not come from changes: a history enabled on a silver table that already has
rows, and a lander's snapshot (docs/SNAPSHOTS.md) of tables that keep one, whole or a key range at a
time. One lake: each scenario its own tables of one source, applied in the same two batches.
(Crashes: test_history_crash.py.)"""

from __future__ import annotations

import pytest
from history_capture import as_of, expected, reference_states

from cdc_apply.pgoutput import UNCHANGED_TOAST as U
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark

A_COLUMNS = ["id", "v", "doc"]
HISTORY_FROM_THE_START = ["public.t", "public.bag", "public.r"]


def _commit_lsn(b: StreamBuilder) -> int:
    """The commit LSN of the transaction ``b`` emitted last."""
    return b.messages()[-1].commit_lsn


@pytest.fixture(scope="module")
def seeded_lake(lake_factory):
    """Two batches of one source: (lake, rows, marks), ``marks`` the LSNs the scenarios name.

    - public.a (and public.pile, never with history): no history in the first batch, one from the second;
    - public.t and public.bag (history from the start): a snapshot of each in the second batch, and a
      transaction committed below t's snapshot that landed after it;
    - public.r (history from the start): two key-range chunks in the second batch, a change between them.
    """
    from cdc_apply.pgoutput.snapshot import KeyRange

    b = StreamBuilder("src")
    a = b.relation("public", "a", [("id", "int4", True), ("v", "text", False), ("doc", "text", False)])
    pile = b.relation("public", "pile", [("x", "int4", True)], replica_identity="f")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    bag = b.relation("public", "bag", [("x", "int4", False)], replica_identity="f")
    r = b.relation("public", "r", [("id", "int4", True), ("v", "text", False)])
    marks = {}
    # -- batch 1 ----------------------------------------------------------------------------------
    with b.transaction() as tx:          # stale by the snapshot: 1 changed, 9 gone
        tx.insert(t, {"id": 1, "v": "old"})
        tx.insert(t, {"id": 9, "v": "gone"})
        tx.insert(bag, {"x": 5})
    with b.transaction() as tx:
        for i in (1, 2, 3, 7, 8):
            tx.insert(r, {"id": i, "v": "old"})
    with b.transaction() as tx:
        for i in range(1, 5):
            tx.insert(a, {"id": i, "v": f"v{i}", "doc": "doc" * 700 + str(i)})
            tx.insert(pile, {"x": i % 2})
    marks["a first"] = _commit_lsn(b)
    with b.transaction() as tx:
        tx.update(a, {"id": 1, "v": "one", "doc": U})
        tx.insert(pile, {"x": 1})
    marks["first batch end"] = _commit_lsn(b)
    cut = len(b.rows())
    # -- batch 2 ----------------------------------------------------------------------------------
    with b.transaction() as tx:
        tx.update(a, {"id": 2, "v": "two", "doc": U})
        tx.update(a, {"id": 30, "v": "moved", "doc": U}, key={"id": 3})
        tx.delete(a, key={"id": 4})
        tx.delete(pile, old={"x": 0})
    marks["second batch first"] = _commit_lsn(b)
    with b.transaction() as tx:
        tx.update(a, {"id": 30, "v": "moved again", "doc": U})
        tx.truncate([pile])
        tx.insert(pile, {"x": 7})
    marks["bag snapshot"] = b.snapshot(bag, [{"x": 5}, {"x": 6}])
    marks["t snapshot"] = c = b.snapshot(t, [{"id": 1, "v": "one"}, {"id": 2, "v": "two"}])
    # Committed below c, landed after t's snapshot (the slot was behind): in the copy already, skipped.
    # (Anything committed at or past c ends that rule, a later snapshot included: hence bag's first.)
    with b.transaction(commit_lsn=c - 1) as tx:
        tx.insert(t, {"id": 2, "v": "two"})
    with b.transaction() as tx:
        tx.update(t, {"id": 2, "v": "two b"})
    marks["r chunk 1"] = b.snapshot(r, [{"id": 1, "v": "one"}, {"id": 2, "v": "old"}],
                                    key_range=KeyRange("id", None, 5, rows=2))
    with b.transaction() as tx:
        tx.update(r, {"id": 7, "v": "seven"})          # outside the first chunk: a plain update
    marks["r chunk 2"] = b.snapshot(r, [{"id": 7, "v": "seven"}, {"id": 9, "v": "nine"}],
                                    key_range=KeyRange("id", 5, None, rows=2))
    rows = b.rows()

    lake = lake_factory("history_seed", silver={"history": HISTORY_FROM_THE_START})
    lake.land(rows[:cut])
    lake.apply()
    lake.extra = {"silver": {"history": HISTORY_FROM_THE_START + ["public.a"]}}
    lake.land(rows[cut:])
    lake.apply()
    return lake, rows, marks


def _history_rows(lake, name):
    from cdc_apply.delta.refs import history_ref

    return [r.asDict() for r in history_ref(lake.config, "public", name).read(lake.spark).collect()]


def test_a_history_enabled_later_starts_from_silvers_rows_and_reads_from_before_it_time_travel(seeded_lake):
    from cdc_apply import read_as_of
    from cdc_apply.delta.ddl import table_properties
    from cdc_apply.delta.refs import history_ref
    from cdc_apply.lake.history.tables import PROP_COMPLETE_FROM

    lake, rows, marks = seeded_lake
    first_end = marks["first batch end"]
    ref = history_ref(lake.config, "public", "a")
    assert table_properties(lake.spark, ref)[PROP_COMPLETE_FROM] == str(first_end)
    history = _history_rows(lake, "a")
    assert sorted(r["id"] for r in history if r["_cdc_operation"] == "seed") == [1, 2, 3, 4]
    states = [(lsn, state) for lsn, state in reference_states(rows) if lsn >= first_end]
    assert states[0][0] == first_end and len(states) > 2
    for lsn, state in states:
        assert as_of(history, lsn, A_COLUMNS) == expected(state["public.a"], A_COLUMNS), f"as of {lsn:X}"
    # Before the history is complete, only batch ends: none came before the first batch's last commit.
    early = read_as_of(lake.spark, lake.config, marks["a first"], tables=["public.a"])
    assert (early.method, early.lsn, early.exact) == ("time travel", None, False)
    late = read_as_of(lake.spark, lake.config, marks["second batch first"], tables=["public.a"])
    assert (late.method, late.lsn) == ("history", marks["second batch first"])


def test_a_snapshot_closes_every_open_version_at_its_lsn_and_opens_the_copied_rows_there(seeded_lake):
    lake, _, marks = seeded_lake
    c, c_bag = marks["t snapshot"], marks["bag snapshot"]
    history = _history_rows(lake, "t")
    versions = sorted((r["id"], r["v"], r["_cdc_valid_from_lsn"], r["_cdc_valid_to_lsn"] or 0, r["_cdc_operation"],
                       r["_cdc_closed_by"]) for r in history)
    first = next(v[2] for v in versions if v[1] == "old")
    update_lsn = next(v[2] for v in versions if v[1] == "two b")
    assert [v[:2] + v[3:] for v in versions] == [
        (1, "old", c, "insert", "snapshot"), (1, "one", 0, "snapshot", None),
        (2, "two", update_lsn, "snapshot", "update"), (2, "two b", 0, "update", None),
        (9, "gone", c, "insert", "snapshot")]
    assert {v[2] for v in versions if v[4] == "snapshot"} == {c} and first < c < update_lsn
    bag_rows = _history_rows(lake, "bag")
    assert sorted((r["x"], r["_cdc_valid_from_lsn"], r["_cdc_operation"], r["_cdc_closed_by"], r["_cdc_copies"])
                  for r in bag_rows) == [(5, first, "insert", "snapshot", 1), (5, c_bag, "snapshot", None, 1),
                                         (6, c_bag, "snapshot", None, 1)]
    # As of any LSN before the snapshot the old rows, from it on the copy (then the change after it).
    assert as_of(history, c - 1, ["id", "v"]) == {("1", "old"): 1, ("9", "gone"): 1}
    assert as_of(history, c, ["id", "v"]) == {("1", "one"): 1, ("2", "two"): 1}
    current = sorted((r["id"], r["v"]) for r in history if r["_cdc_is_current"])
    assert current == sorted((r.id, r.v) for r in lake.silver("public", "t").collect())


def test_a_key_range_chunk_closes_only_the_open_versions_in_its_range(seeded_lake):
    lake, _, marks = seeded_lake
    c1, c2 = marks["r chunk 1"], marks["r chunk 2"]
    history = _history_rows(lake, "r")
    versions = sorted((r["id"], r["v"], r["_cdc_valid_to_lsn"] or 0, r["_cdc_operation"], r["_cdc_closed_by"])
                      for r in history)
    assert [v for v in versions if v[0] in (1, 2, 3)] == [
        (1, "old", c1, "insert", "snapshot"), (1, "one", 0, "snapshot", None),
        (2, "old", 0, "snapshot", None), (2, "old", c1, "insert", "snapshot"),
        (3, "old", c1, "insert", "snapshot")]           # gone at the source: closed by the chunk, none opened
    update = next(v for v in versions if v[:2] == (7, "seven") and v[3] == "update")
    assert update[2:] == (c2, "update", "snapshot")    # closed by the second chunk only, not the first
    assert (8, "old", c2, "insert", "snapshot") in versions and (9, "nine", 0, "snapshot", None) in versions
    current = sorted((r["id"], r["v"]) for r in history if r["_cdc_is_current"])
    assert current == sorted((r.id, r.v) for r in lake.silver("public", "r").collect()) == [
        (1, "one"), (2, "old"), (7, "seven"), (9, "nine")]
