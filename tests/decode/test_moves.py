"""Where a moved row's unchanged TOAST value comes from: the one-pass resolution of key moves."""

from __future__ import annotations

import pyarrow as pa

from cdc_apply.decode.moves import resolve_move_sources


def _events(*rows):
    """rows: (seq, kind, key, old key or None, doc or None, doc carried); lsn = seq, sub 1 for move-ins."""
    cols = {"_commit_lsn": [], "_seq": [], "_sub": [], "_kind": [], "k_0": [], "_src_k_0": [],
            "n_0": [], "x_0": [], "p_0": [], "n_1": [], "x_1": [], "p_1": []}
    for seq, kind, key, old, doc, carried in rows:
        for c, v in (("_commit_lsn", seq), ("_seq", seq), ("_sub", 1 if kind == "M" else 0), ("_kind", kind),
                     ("k_0", key), ("_src_k_0", old), ("n_0", None if kind == "D" else key),
                     ("x_0", kind != "D"), ("p_0", kind != "D"), ("n_1", doc), ("x_1", carried),
                     ("p_1", kind != "D")):
            cols[c].append(v)
    types = {"_commit_lsn": pa.int64(), "_seq": pa.int64(), "_sub": pa.int32(), "_kind": pa.string(),
             "k_0": pa.int32(), "_src_k_0": pa.int32(), "n_0": pa.int32(), "n_1": pa.string()}
    return pa.table({c: pa.array(v, types.get(c, pa.bool_())) for c, v in cols.items()})


def _move(seq, old, new, doc=None):
    """The two events of an Update that changes the key: move-out of ``old``, move-in to ``new``."""
    return [(seq, "D", old, None, None, False), (seq, "M", new, old, doc, doc is not None)]


def _resolved(table):
    out = resolve_move_sources(table, nk=1, columns=(0, 1)).to_pylist()
    return {r["_m_seq"]: ("batch", r["r_1"]) if r["f_1"] else ("silver", r["_sk_0"]) if r["s_1"] else None
            for r in out}


def test_a_move_without_earlier_changes_takes_the_value_silver_has_for_the_old_key():
    assert _resolved(_events(*_move(10, old=1, new=2))) == {10: ("silver", 1)}


def test_a_move_after_an_update_that_carried_the_value_takes_that_value():
    t = _events((5, "U", 1, None, "fresh", True), (7, "U", 1, None, None, False), *_move(10, old=1, new=2))
    assert _resolved(t) == {10: ("batch", "fresh")}


def test_a_chain_of_moves_reads_silver_where_the_chain_started():
    t = _events(*_move(10, old=1, new=2), *_move(11, old=2, new=3), *_move(12, old=3, new=4))
    assert _resolved(t) == {10: ("silver", 1), 11: ("silver", 1), 12: ("silver", 1)}


def test_a_chain_picks_up_a_value_carried_halfway():
    t = _events(*_move(10, old=1, new=2), (11, "U", 2, None, "mid", True), *_move(12, old=2, new=3),
                *_move(13, old=3, new=4))
    assert _resolved(t) == {10: ("silver", 1), 12: ("batch", "mid"), 13: ("batch", "mid")}


def test_a_key_reused_after_its_row_moved_away_gives_the_new_rows_value():
    t = _events(*_move(10, old=1, new=2), (11, "I", 1, None, "second", True), *_move(12, old=1, new=3))
    assert _resolved(t) == {10: ("silver", 1), 12: ("batch", "second")}


def test_a_move_that_carries_its_value_needs_nothing():
    assert _resolved(_events(*_move(10, old=1, new=2, doc="sent"))) == {}


def test_events_are_taken_in_commit_order_whatever_order_they_arrive_in():
    t = _events((5, "U", 1, None, "fresh", True), *_move(10, old=1, new=2))
    assert _resolved(t.take(pa.array([2, 0, 1]))) == {10: ("batch", "fresh")}


def test_only_the_columns_with_gaps_travel_and_come_back():
    t = _events((5, "U", 1, None, "fresh", True), *_move(10, old=1, new=2)).drop_columns(["n_0", "x_0", "p_0"])
    out = resolve_move_sources(t, nk=1, columns=(1,))
    assert [n for n in out.column_names if n[:2] in ("r_", "f_", "s_")] == ["r_1", "f_1", "s_1"]
    assert out.to_pylist()[0]["r_1"] == "fresh"
