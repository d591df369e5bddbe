"""The keys changes past the point touched, decoded from their pgoutput bytes (pure: no JVM)."""

from __future__ import annotations

import pytest

from cdc_apply.errors import VerifyError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.encoder import encode
from cdc_apply.planning.schema import RelationHistory
from cdc_apply.verification.bronze_keys import changed_keys, key_positions

COLS = (m.RelationColumn(1, "id", 23, -1), m.RelationColumn(0, "v", 25, -1))
RENAMED = (m.RelationColumn(1, "ident", 23, -1), m.RelationColumn(0, "v", 25, -1))


def _history(*shapes) -> RelationHistory:
    history = RelationHistory(16400)
    for seq, columns in shapes:
        history.add(m.Relation(None, 16400, "public", "t", "d", columns), seq, seq)
    return history


def _unit(*messages, start: int = 10, xid=None):
    return (xid, [(start + i, encode(msg)) for i, msg in enumerate(messages)])


def test_inserts_updates_and_deletes_give_their_keys_old_and_new():
    history = _history((1, COLS))
    unit = _unit(m.Begin(0, 0, 7), m.Insert(None, 16400, ("1", "a")),
                 m.Update(None, 16400, ("2", None), None, ("3", "b")), m.Update(None, 16400, None, None, ("4", m.UNCHANGED_TOAST)),
                 m.Delete(None, 16400, ("5", None), None), m.Insert(None, 99, ("6", "x")), m.Commit(0, 0, 0, 0))
    assert changed_keys([unit], history, key_positions(history, ["id"])) == {("1",), ("2",), ("3",), ("4",), ("5",)}


def test_a_key_column_renamed_since_the_change_is_followed_by_its_lineage():
    history = _history((1, COLS), (20, RENAMED))
    unit = _unit(m.Begin(0, 0, 7), m.Delete(None, 16400, ("8", None), None), m.Commit(0, 0, 0, 0))
    assert changed_keys([unit], history, key_positions(history, ["ident"])) == {("8",)}


def test_a_streamed_transaction_keeps_only_its_own_messages():
    history = _history((1, COLS))
    unit = _unit(m.StreamStart(70, True), m.Insert(70, 16400, ("1", "a")), m.Insert(71, 16400, ("2", "b")),
                 m.StreamStop(), xid=70)
    assert changed_keys([unit], history, key_positions(history, ["id"])) == {("1",)}


def test_a_truncate_past_the_point_cannot_be_verified():
    history = _history((1, COLS))
    unit = _unit(m.Begin(0, 0, 7), m.Truncate(None, 0, (16400,)), m.Commit(0, 0, 0, 0))
    with pytest.raises(VerifyError, match="truncated at or past the source's point"):
        changed_keys([unit], history, key_positions(history, ["id"]))


def test_a_binary_key_value_asks_for_a_history_table():
    history = _history((1, COLS))
    unit = _unit(m.Begin(0, 0, 7), m.Insert(None, 16400, (b"\x00\x00\x00\x01", "a")), m.Commit(0, 0, 0, 0))
    with pytest.raises(VerifyError, match="keep a history table"):
        changed_keys([unit], history, key_positions(history, ["id"]))
