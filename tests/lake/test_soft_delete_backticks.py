"""Soft deletes on a table Delta's MERGE cannot write (a column name holding a backtick, Change Data Feed on),
whose rows go through the replacing write of ``replace_rows``: a delete marks the row, an insert revives it."""

from __future__ import annotations

import pytest

from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def test_a_backtick_named_table_marks_deleted_rows_and_revives_them_through_the_replacing_write(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t`b", [("id", "int4", True), ("v`", "text", False)])
    with b.transaction() as tx:
        for i in (1, 2, 3):
            tx.insert(t, {"id": i, "v`": f"v{i}"})
    lake = lake_factory("soft_backticks", silver={"soft_deletes": ["public.*"]})
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    with b.transaction() as tx:
        tx.update(t, {"id": 1, "v`": "one"})
        tx.delete(t, old={"id": 2})
    deleted_at = b.rows()[-1][2]
    lake.land(b.rows()[done:])
    lake.apply()
    rows = {r.id: (r["v`"], r._cdc_deleted) for r in lake.silver("public", "t`b").collect()}
    assert rows == {1: ("one", False), 2: ("v2", True), 3: ("v3", False)}
    assert lake.silver("public", "t`b").where("id = 2").first()._cdc_commit_lsn <= deleted_at
    done = len(b.rows())
    with b.transaction() as tx:
        tx.insert(t, {"id": 2, "v`": "again"})
    lake.land(b.rows()[done:])
    lake.apply()
    rows = sorted((r.id, r["v`"], r._cdc_deleted) for r in lake.silver("public", "t`b").collect())
    assert rows == [(1, "one", False), (2, "again", False), (3, "v3", False)]
    from delta.tables import DeltaTable

    operations = {r.operation for r in DeltaTable.forPath(lake.spark, f"{lake.config.silver.path}/public/t`b")
                  .history().collect()}
    assert "MERGE" not in operations and "DELETE" not in operations   # the replacing writes only
