"""Collapsing a table's changes to one row per key: the same silver whichever way it is computed."""

from __future__ import annotations

import pytest

from cdc_apply.delta import merge

from test_apply_rules import _build

pytestmark = pytest.mark.spark


def _apply_rules_scenario(lake_factory, name: str) -> dict[str, list]:
    lake = lake_factory(name)
    rows, cuts = _build()
    start = 0
    for cut in cuts:
        lake.land(rows[start:cut])
        start = cut
    lake.apply()
    silver = lake.root / "silver"
    out = {}
    for table in sorted(p for p in silver.glob("*/*") if (p / "_delta_log").exists()):
        df = lake.spark.read.format("delta").load(str(table))
        out[f"{table.parent.name}.{table.name}"] = sorted(
            (tuple(r) for r in df.collect()), key=repr)
    return out


def test_reducing_single_event_keys_without_the_window_leaves_every_table_as_the_window_does(lake_factory,
                                                                                               monkeypatch):
    windowed = _apply_rules_scenario(lake_factory, "windowed")
    monkeypatch.setattr(merge, "SPLIT_MIN_EVENTS", 0)
    monkeypatch.setattr("cdc_apply.delta.silver.SPLIT_MIN_EVENTS", 0)
    splits = []
    real = merge._split_single_events
    monkeypatch.setattr(merge, "_split_single_events", lambda *a: splits.append(real(*a)) or splits[-1])
    split = _apply_rules_scenario(lake_factory, "split")
    assert len(windowed) >= 8
    assert splits and all(parts is not None for parts in splits)
    assert split == windowed
