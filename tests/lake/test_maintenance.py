"""``cdc-apply optimize`` compacts silver tables by key, and bronze, without changing a row."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

from cdc_apply.cli.main import main
from cdc_apply.delta.refs import history_ref
from cdc_apply.lake.maintenance import optimize_silver
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def test_optimize_compacts_each_silver_and_history_table_by_key_and_keeps_every_row(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    # Rows marked in deletion vectors, as in a table above silver.rewrite_table_bytes: each MERGE adds
    # a file of its own (a table this small is otherwise rewritten whole, into one file, every batch).
    lake = lake_factory("optimize", silver={"history": ["public.t"], "rewrite_table_bytes": 0})
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
    history = history_ref(lake.config, "public", "t")
    before = [sorted(map(tuple, frame.collect())) for frame in (lake.silver("public", "t"), history.read(lake.spark))]
    silver, versions = optimize_silver(lake.spark, lake.config)
    assert (silver.table, silver.key, versions.table, versions.key) == \
        ("public.t", ("id",), "public.t (history)", ("id",))
    assert silver.files_removed >= 3 and silver.files_added == 1
    # A history table is partitioned by whether a version is current: a file for each.
    assert versions.files_removed >= 4 and versions.files_added == 2
    assert [sorted(map(tuple, frame.collect())) for frame in (lake.silver("public", "t"), history.read(lake.spark))] \
        == before


def test_optimize_compacts_bronze_and_the_apply_job_goes_on_applying_each_row_once(lake_factory):
    b = StreamBuilder("src")
    bag = b.relation("public", "bag", [("x", "int4", True), ("y", "text", True)], replica_identity="f")
    lake = lake_factory("optimize_bronze")
    landed = 0

    def land(batch: int) -> None:
        nonlocal landed
        with b.transaction() as tx:
            for i in range(5):
                tx.insert(bag, {"x": i, "y": f"b{batch}"})   # without a key: a row applied twice is two copies
        lake.land(b.rows()[landed:])
        landed = len(b.rows())

    for batch in range(3):
        land(batch)
    lake.apply()
    land(3)
    land(4)                         # landed, not applied yet: compacted before the job reads them
    path = lake.root / "pipeline.toml"
    path.write_text('[bronze]\npath = "bronze"\n[silver]\npath = "silver"\n[state]\npath = "state"\n')
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["optimize", "--config", str(path), "--bronze"]) == 0
    assert out.getvalue() == "bronze: 5 files -> 1 (bin-packing)\n"
    land(5)
    lake.apply()
    rows = sorted(map(tuple, lake.silver("public", "bag").select("x", "y").collect()))
    assert rows == sorted((i, f"b{batch}") for batch in range(6) for i in range(5))
