"""ADD COLUMN ... DEFAULT: rows older than the column read its missing value in silver, as in PostgreSQL
(the source's event trigger announces it with a cdc_apply.column_defaults message; docs/SNAPSHOTS.md)."""

from __future__ import annotations

import json

import pytest

from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def test_rows_older_than_an_added_column_read_its_default_and_newer_rows_their_own_value(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "a"})
        tx.insert(t, {"id": 2, "v": "b"})
    lake = lake_factory("column_defaults")
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    with b.transaction() as tx:                       # before the ALTER, in the next batch
        tx.insert(t, {"id": 3, "v": "c"})
    with b.transaction() as tx:                       # ALTER TABLE t ADD COLUMN n int DEFAULT 7
        tx.message("cdc_apply.column_defaults", json.dumps({"relation_id": t.oid, "columns": {"n": "7"}}).encode())
    t2 = b.relation("public", "t", [("id", "int4", True), ("v", "text", False), ("n", "int4", False)], oid=t.oid)
    with b.transaction() as tx:
        tx.insert(t2, {"id": 4, "v": "d", "n": None})
        tx.update(t2, {"id": 1, "v": "a", "n": 9})
    lake.land(b.rows()[done:])
    lake.apply()
    got = sorted((r.id, r.n) for r in lake.silver("public", "t").collect())
    assert got == [(1, 9), (2, 7), (3, 7), (4, None)]
    history = lake.state("schema_history").where("missing_values IS NOT NULL").collect()
    assert [json.loads(r.missing_values) for r in history] == [{"n": "7"}]


def test_a_default_announced_in_the_transaction_whose_change_brings_the_new_relation_fills_older_rows(lake_factory):
    # ALTER TABLE t ADD COLUMN n int DEFAULT 7; UPDATE t ... in one transaction: the trigger's message and
    # then the Relation of the new definition, both before that transaction's Commit.
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "a"})
        tx.insert(t, {"id": 2, "v": "b"})
    t2 = b.relation("public", "t", [("id", "int4", True), ("v", "text", False), ("n", "int4", False)], oid=t.oid,
                    emit=False)
    with b.transaction() as tx:
        tx.message("cdc_apply.column_defaults", json.dumps({"relation_id": t.oid, "columns": {"n": "7"}}).encode())
        tx.relation(t2)
        tx.update(t2, {"id": 1, "v": "a", "n": 9})
    lake = lake_factory("column_defaults_same_txn")
    lake.land(b.rows())
    lake.apply()
    assert sorted((r.id, r.n) for r in lake.silver("public", "t").collect()) == [(1, 9), (2, 7)]
