"""The plugin's Lake: what it lands, and the configuration it writes (the README runs the rest)."""

from __future__ import annotations

import tomllib

import pytest

from cdc_apply.config import load_config
from cdc_apply.testing.pytest_plugin import Lake, toml_text
from cdc_apply.testing.stream import StreamBuilder


def _builder():
    b = StreamBuilder("shop")
    users = b.relation("public", "users", [("id", "int4", True), ("name", "text", False)])
    with b.transaction() as tx:
        tx.insert(users, {"id": 1, "name": "Ada"})
    return b, users


@pytest.mark.spark
def test_a_builder_landed_twice_adds_only_the_rows_it_gained_in_between(spark, tmp_path):
    lake = Lake(spark, tmp_path)
    b, users = _builder()
    first = lake.land(b)
    with b.transaction() as tx:
        tx.insert(users, {"id": 2, "name": "Brian"})
    second = lake.land(b)
    bronze = spark.read.format("delta").load(lake.bronze_path)
    assert (first, second) == (4, 3)
    assert sorted(r.seq for r in bronze.select("seq").collect()) == list(range(len(b.rows())))


@pytest.mark.spark
def test_a_dataframe_without_landed_at_lands_with_it_empty(spark, tmp_path):
    lake = Lake(spark, tmp_path)
    b, _ = _builder()
    assert lake.land(b.to_bronze(spark).drop("landed_at")) == 4
    assert spark.read.format("delta").load(lake.bronze_path).where("landed_at IS NULL").count() == 4


def test_the_written_configuration_is_the_lakes_own(tmp_path):
    lake = Lake(None, tmp_path, pipeline="p").configure(apply={"on_error": "quarantine"},
                                                        tables={"public.t": {"key": ["id"]}})
    written = load_config(lake.write_config())
    assert (written.pipeline, written.bronze.path, written.apply.on_error, written.key_for("public.t")) == \
        ("p", lake.bronze_path, "quarantine", ("id",))
    assert tomllib.loads(toml_text(lake.raw_config)) == lake.raw_config
