"""Failures from Spark and Delta reach the user as one named error each, not a JVM traceback."""

from __future__ import annotations

import io

import pytest

from cdc_apply.delta.engine import spark_tables
from cdc_apply.errors import ApplyError, StateError
from cdc_apply.lake.pipeline import ApplyPipeline
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def _one_table():
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "x"})
    return b, t


def test_a_silver_table_changed_outside_cdc_apply_is_an_apply_error_naming_it(lake_factory):
    lake = lake_factory("altered_silver")
    b, t = _one_table()
    lake.land(b.rows())
    lake.apply()
    lake.spark.sql(f"ALTER TABLE delta.`{lake.root}/silver/public/t` DROP COLUMN v")
    done = len(b.rows())
    with b.transaction() as tx:
        tx.update(t, {"id": 1, "v": "y"})
    lake.land(b.rows()[done:])
    with pytest.raises(ApplyError) as info:
        lake.apply()
    text = str(info.value)
    assert "table=public.t" in text and "changed outside cdc_apply" in text
    assert "Traceback" not in text and "\tat " not in text


def test_a_second_apply_job_of_the_same_pipeline_is_a_state_error(lake_factory):
    lake = lake_factory("two_jobs")
    b, _ = _one_table()
    lake.land(b.rows())
    running = ApplyPipeline.open(spark_tables(lake.spark), lake.config, out=io.StringIO()).run(await_termination=False)
    try:
        with pytest.raises(StateError) as info:
            ApplyPipeline.open(spark_tables(lake.spark), lake.config, out=io.StringIO()).run(once=True)
        assert "run one apply job per pipeline" in str(info.value)
    finally:
        running.stop()
