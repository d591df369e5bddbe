"""The apply job's batch: the session settings it runs under, and leaves behind."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import ArrayType, MapType, StructType

from cdc_apply.lake.pipeline import BATCH_SETTINGS
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


def test_a_batch_runs_delta_log_queries_with_whole_stage_code_generation(lake_factory):
    # Delta's log actions have more nested fields than Spark's default limit (100): without the
    # batch's limit every task of a log query would generate its projections' code again.
    fields = "spark.sql.codegen.maxFields"
    lake = lake_factory("codegen")
    log_schema = StructType.fromJson(json.loads(
        lake.spark.sparkContext._jvm.org.apache.spark.sql.delta.actions.SingleAction.encoder().schema().json()))
    assert _nested_fields(log_schema) > 100
    assert int(BATCH_SETTINGS[fields]) >= _nested_fields(log_schema)
    b = StreamBuilder("src")
    users = b.relation("public", "users", [("id", "int4", True), ("name", "text", False)])
    with b.transaction() as tx:
        tx.insert(users, {"id": 1, "name": "a"})
    lake.land(b.rows())
    seen = []
    lake.apply(fault_hook=lambda point: seen.append((point, lake.spark.conf.get(fields))))
    assert ("table:public.users", BATCH_SETTINGS[fields]) in seen
    assert [tuple(r) for r in lake.silver("public", "users").select("id", "name").collect()] == [(1, "a")]


def _nested_fields(data_type) -> int:
    """A type's fields as Spark counts them against the whole-stage codegen limit (leaves of structs,
    map keys and values, array elements)."""
    if isinstance(data_type, StructType):
        return sum(_nested_fields(f.dataType) for f in data_type.fields)
    if isinstance(data_type, MapType):
        return _nested_fields(data_type.keyType) + _nested_fields(data_type.valueType)
    if isinstance(data_type, ArrayType):
        return _nested_fields(data_type.elementType)
    return 1


def test_a_batch_behind_a_local_bronze_reads_its_lag_without_a_spark_query(lake_factory, monkeypatch):
    from datetime import datetime, timezone

    from cdc_apply.lake import pipeline as pipeline_module
    from cdc_apply.pgoutput.messages import pg_timestamp_to_datetime
    from cdc_apply.testing.stream import BASE_TIMESTAMP

    lake = lake_factory("local_lag")
    b = StreamBuilder("src")
    users = b.relation("public", "users", [("id", "int4", True), ("name", "text", False)])
    landed = 0
    for i in range(2):   # two bronze commits, one micro-batch each: the first batch has the second behind it
        with b.transaction() as tx:
            tx.insert(users, {"id": i, "name": f"u{i}"})
        lake.land(b.rows()[landed:])
        landed = len(b.rows())
    asked = []
    monkeypatch.setattr(pipeline_module, "unapplied_ages", lambda *a, **k: asked.append(a) or {})
    pipeline, _ = lake.apply()
    first, last = pipeline.reports[0], pipeline.reports[-1]
    assert len(pipeline.reports) == 2 and not asked     # delta-rs answered
    # The builder's commits are stamped from BASE_TIMESTAMP on: the second one's age, give or take the run.
    age = (datetime.now(timezone.utc) - pg_timestamp_to_datetime(BASE_TIMESTAMP)).total_seconds()
    assert first.lag_seq > 0 and age - 600 < first.lag_seconds <= age
    assert last.lag_seconds == 0 and last.lag_seq == 0
