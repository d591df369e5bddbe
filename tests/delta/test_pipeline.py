"""The apply job's batch: the session settings it runs under, and leaves behind."""

from __future__ import annotations

import pytest

from cdc_apply.delta.pipeline import BATCH_SETTINGS
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark

KEY = "spark.sql.constraintPropagation.enabled"


def test_a_batch_runs_with_its_settings_and_gives_the_session_back_as_it_was(lake_factory):
    assert BATCH_SETTINGS[KEY] == "false"
    lake = lake_factory("settings")
    b = StreamBuilder("src")
    users = b.relation("public", "users", [("id", "int4", True), ("name", "text", False)])
    with b.transaction() as tx:
        tx.insert(users, {"id": 1, "name": "a"})
    lake.land(b.rows())
    seen = []
    lake.spark.conf.set(KEY, "true")
    try:
        lake.apply(fault_hook=lambda point: seen.append((point, lake.spark.conf.get(KEY))))
        assert ("table:public.users", "false") in seen
        assert lake.spark.conf.get(KEY) == "true"
    finally:
        lake.spark.conf.unset(KEY)
    assert [tuple(r) for r in lake.silver("public", "users").select("id", "name").collect()] == [(1, "a")]
