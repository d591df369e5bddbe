"""A history enabled on a silver table that already has rows (crashes: the history capture's fixture)."""

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
    from cdc_apply.delta.tables import history_ref

    return [r.asDict() for r in history_ref(lake.config, "public", name).read(lake.spark).collect()]


def test_a_history_enabled_later_starts_from_silvers_rows_and_reads_from_before_it_time_travel(lake_factory):
    from cdc_apply import read_as_of
    from cdc_apply.delta.history import PROP_COMPLETE_FROM
    from cdc_apply.delta.tables import history_ref, table_properties

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
    assert sorted(r["id"] for r in history if r["_cdc_operation"] == "snapshot") == [1, 2, 3, 4]
    for lsn, state in states[1:]:
        assert as_of(history, lsn, COLUMNS["public.a"]) == expected(state["public.a"], COLUMNS["public.a"])
    # Before the history is complete, only batch ends: none came before the first batch's last commit.
    early = read_as_of(lake.spark, lake.config, states[0][0], tables=["public.a"])
    assert (early.method, early.lsn, early.exact) == ("time travel", None, False)
    late = read_as_of(lake.spark, lake.config, states[2][0], tables=["public.a"])
    assert (late.method, late.lsn) == ("history", states[2][0])
