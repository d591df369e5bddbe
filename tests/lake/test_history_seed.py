"""History of rows that did not come from changes: a history enabled on a silver table that already has
rows, and a lander's snapshot (docs/SNAPSHOTS.md) of a table that keeps one. (Crashes: the history
capture's fixture.)"""

from __future__ import annotations

import pytest

from cdc_apply.pgoutput import UNCHANGED_TOAST as U
from cdc_apply.testing.stream import StreamBuilder
from history_capture import as_of, expected, reference_states

pytestmark = pytest.mark.spark

COLUMNS = {"public.a": ["id", "v", "doc"], "public.bag": ["x"]}


def _stream():
    b = StreamBuilder("crashy")
    a = b.relation("public", "a", [("id", "int4", True), ("v", "text", False), ("doc", "text", False)])
    bag = b.relation("public", "bag", [("x", "int4", True)], replica_identity="f")
    cuts = []
    with b.transaction() as tx:
        for i in range(1, 5):
            tx.insert(a, {"id": i, "v": f"v{i}", "doc": "doc" * 700 + str(i)})
            tx.insert(bag, {"x": i % 2})
    with b.transaction() as tx:
        tx.update(a, {"id": 1, "v": "one", "doc": U})
        tx.insert(bag, {"x": 1})
    cuts.append(len(b.rows()))
    with b.transaction() as tx:
        tx.update(a, {"id": 2, "v": "two", "doc": U})
        tx.update(a, {"id": 30, "v": "moved", "doc": U}, key={"id": 3})
        tx.delete(a, key={"id": 4})
        tx.delete(bag, old={"x": 0})
    with b.transaction() as tx:
        tx.update(a, {"id": 30, "v": "moved again", "doc": U})
        tx.truncate([bag])
        tx.insert(bag, {"x": 7})
    cuts.append(len(b.rows()))
    return b.rows(), cuts


def _history_rows(lake, name):
    from cdc_apply.delta.refs import history_ref

    return [r.asDict() for r in history_ref(lake.config, "public", name).read(lake.spark).collect()]


def test_a_history_enabled_later_starts_from_silvers_rows_and_reads_from_before_it_time_travel(lake_factory):
    from cdc_apply import read_as_of
    from cdc_apply.lake.history.tables import PROP_COMPLETE_FROM
    from cdc_apply.delta.ddl import table_properties
    from cdc_apply.delta.refs import history_ref

    lake = lake_factory("history_later")
    rows, cuts = _stream()
    lake.land(rows[:cuts[0]])    # a batch without history
    lake.apply()
    lake.extra = {"silver": {"history": ["public.a"]}}
    lake.land(rows[cuts[0]:])
    lake.apply()

    states = reference_states(rows)
    first_end = states[1][0]
    ref = history_ref(lake.config, "public", "a")
    assert table_properties(lake.spark, ref)[PROP_COMPLETE_FROM] == str(first_end)
    history = _history_rows(lake, "a")
    assert sorted(r["id"] for r in history if r["_cdc_operation"] == "seed") == [1, 2, 3, 4]
    for lsn, state in states[1:]:
        assert as_of(history, lsn, COLUMNS["public.a"]) == expected(state["public.a"], COLUMNS["public.a"])
    # Before the history is complete, only batch ends: none came before the first batch's last commit.
    early = read_as_of(lake.spark, lake.config, states[0][0], tables=["public.a"])
    assert (early.method, early.lsn, early.exact) == ("time travel", None, False)
    late = read_as_of(lake.spark, lake.config, states[2][0], tables=["public.a"])
    assert (late.method, late.lsn) == ("history", states[2][0])


def test_a_snapshot_closes_every_open_version_at_its_lsn_and_opens_the_copied_rows_there(lake_factory):
    from cdc_apply.testing.stream import StreamBuilder

    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    bag = b.relation("public", "bag", [("x", "int4", False)], replica_identity="f")
    with b.transaction() as tx:          # stale by the snapshot: 1 changed, 9 gone
        tx.insert(t, {"id": 1, "v": "old"})
        tx.insert(t, {"id": 9, "v": "gone"})
        tx.insert(bag, {"x": 5})
    lake = lake_factory("snapshot_history", silver={"history": ["public.*"]})
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    c_bag = b.snapshot(bag, [{"x": 5}, {"x": 6}])
    c = b.snapshot(t, [{"id": 1, "v": "one"}, {"id": 2, "v": "two"}])
    # Committed below c, landed after t's snapshot (the slot was behind): in the copy already, skipped.
    # (Anything committed at or past c ends that rule, a later snapshot included: hence bag's first.)
    with b.transaction(commit_lsn=c - 1) as tx:
        tx.insert(t, {"id": 2, "v": "two"})
    with b.transaction() as tx:
        tx.update(t, {"id": 2, "v": "two b"})
    lake.land(b.rows()[done:])
    lake.apply()

    versions = sorted((r["id"], r["v"], r["_cdc_valid_from_lsn"], r["_cdc_valid_to_lsn"] or 0, r["_cdc_operation"],
                       r["_cdc_closed_by"]) for r in _history_rows(lake, "t"))
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
    assert as_of(_history_rows(lake, "t"), c - 1, ["id", "v"]) == {("1", "old"): 1, ("9", "gone"): 1}
    assert as_of(_history_rows(lake, "t"), c, ["id", "v"]) == {("1", "one"): 1, ("2", "two"): 1}
    current = sorted((r["id"], r["v"]) for r in _history_rows(lake, "t") if r["_cdc_is_current"])
    assert current == sorted((r.id, r.v) for r in lake.silver("public", "t").collect())


def test_a_key_range_chunk_closes_only_the_open_versions_in_its_range(lake_factory):
    from cdc_apply.pgoutput.snapshot import KeyRange

    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        for i in (1, 2, 3, 7, 8):
            tx.insert(t, {"id": i, "v": "old"})
    lake = lake_factory("range_history", silver={"history": ["public.*"]})
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    c1 = b.snapshot(t, [{"id": 1, "v": "one"}, {"id": 2, "v": "old"}], key_range=KeyRange("id", None, 5, rows=2))
    with b.transaction() as tx:
        tx.update(t, {"id": 7, "v": "seven"})          # outside the first chunk: a plain update
    c2 = b.snapshot(t, [{"id": 7, "v": "seven"}, {"id": 9, "v": "nine"}], key_range=KeyRange("id", 5, None, rows=2))
    lake.land(b.rows()[done:])
    lake.apply()

    versions = sorted((r["id"], r["v"], r["_cdc_valid_to_lsn"] or 0, r["_cdc_operation"], r["_cdc_closed_by"])
                      for r in _history_rows(lake, "t"))
    assert [v for v in versions if v[0] in (1, 2, 3)] == [
        (1, "old", c1, "insert", "snapshot"), (1, "one", 0, "snapshot", None),
        (2, "old", 0, "snapshot", None), (2, "old", c1, "insert", "snapshot"),
        (3, "old", c1, "insert", "snapshot")]           # gone at the source: closed by the chunk, none opened
    update = next(v for v in versions if v[:2] == (7, "seven") and v[3] == "update")
    assert update[2:] == (c2, "update", "snapshot")    # closed by the second chunk only, not the first
    assert (8, "old", c2, "insert", "snapshot") in versions and (9, "nine", 0, "snapshot", None) in versions
    current = sorted((r["id"], r["v"]) for r in _history_rows(lake, "t") if r["_cdc_is_current"])
    assert current == sorted((r.id, r.v) for r in lake.silver("public", "t").collect()) == [
        (1, "one"), (2, "old"), (7, "seven"), (9, "nine")]
