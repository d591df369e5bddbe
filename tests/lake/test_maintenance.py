"""``cdc-apply optimize`` compacts silver tables by key without changing a row."""

from __future__ import annotations

import pytest

from cdc_apply.lake.maintenance import optimize_silver
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def test_optimize_compacts_each_silver_table_by_key_and_keeps_every_row(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    lake = lake_factory("optimize")
    done = 0
    for batch in range(3):
        with b.transaction() as tx:
            for i in range(batch * 50, batch * 50 + 50):
                tx.insert(t, {"id": i, "v": f"v{i}"})
            if batch:
                tx.update(t, {"id": batch, "v": "changed"})
        lake.land(b.rows()[done:])
        done = len(b.rows())
        lake.apply()
    before = sorted(map(tuple, lake.silver("public", "t").collect()))
    (result,) = optimize_silver(lake.spark, lake.config)
    assert result.table == "public.t" and result.key == ("id",)
    assert result.files_removed >= 3 and result.files_added == 1
    assert sorted(map(tuple, lake.silver("public", "t").collect())) == before
