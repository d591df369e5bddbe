"""Collapsing a table's changes to one row per key, and how many partitions it takes."""

from __future__ import annotations

import pytest

from cdc_apply.delta import merge
from cdc_apply.delta.merge import collapse_partitions

from test_apply_rules import _build


def test_a_collapse_takes_more_partitions_only_when_its_values_outgrow_the_default():
    assert collapse_partitions(1_000, 10, default=4) is None
    assert collapse_partitions(100_000, 7, default=4) is None            # the bench's narrow tables
    assert collapse_partitions(95_000, 300, default=4) == 15             # the soak's wide table
    assert collapse_partitions(95_000, 600, default=4) > collapse_partitions(95_000, 300, default=4)


def _apply_rules_scenario(lake_factory, name: str) -> dict[str, list]:
    lake = lake_factory(name)
    rows, cuts = _build()
    start = 0
    for cut in cuts:
        lake.land(rows[start:cut])
        start = cut
    lake.apply()
    out = {}
    for table in sorted(p for p in (lake.root / "silver").glob("*/*") if (p / "_delta_log").exists()):
        df = lake.spark.read.format("delta").load(str(table))
        out[f"{table.parent.name}.{table.name}"] = sorted((tuple(r) for r in df.collect()), key=repr)
    return out


@pytest.mark.spark
def test_a_collapse_spread_over_more_partitions_leaves_every_table_as_with_the_default(lake_factory, monkeypatch):
    default = _apply_rules_scenario(lake_factory, "default_partitions")
    monkeypatch.setattr(merge, "CELLS_PER_PARTITION", 1)
    wanted = []
    real = merge.collapse

    def spy(events, work, has_toast, partitions=None):
        wanted.append(partitions)
        return real(events, work, has_toast, partitions)

    monkeypatch.setattr("cdc_apply.delta.silver.collapse", spy)
    spread = _apply_rules_scenario(lake_factory, "more_partitions")
    assert len(default) >= 8
    assert wanted and all(p and p > 4 for p in wanted)
    assert spread == default
