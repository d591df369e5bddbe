"""``cdc-apply status`` reads without a JVM only when every table it reads is a local path: a catalog table
(or a path on object storage, whose credentials are Spark's) keeps the Spark read. Decided from the
configuration alone."""

from __future__ import annotations

import pytest

from cdc_apply.config import parse_config
from cdc_apply.errors import ConfigError
from cdc_apply.lake.books.status import needs_spark, read_status


def _config(tmp_path, **sections):
    raw = {"bronze": {"path": str(tmp_path / "bronze")}, "silver": {"path": str(tmp_path / "silver")},
           "state": {"path": str(tmp_path / "state")}}
    raw.update(sections)
    return parse_config(raw)


def test_status_of_local_paths_reads_without_spark_and_answers_with_no_session(tmp_path):
    config = _config(tmp_path)
    assert not needs_spark(config)
    assert read_status(None, config) == []   # no progress table yet: nothing applied


def test_status_of_catalog_state_tables_reads_with_spark(tmp_path):
    config = _config(tmp_path, state={"schema": "cdc_state", "checkpoint": str(tmp_path / "chk")},
                     silver={"table_template": "lake.{namespace}.{name}"})
    assert needs_spark(config)
    with pytest.raises(ConfigError, match="with Spark") as info:
        read_status(None, config)   # no session: the Spark read is what was chosen
    assert "cdc_state" in str(info.value) and info.value.context["key"] == "state.schema"


def test_status_of_a_catalog_bronze_table_reads_with_spark(tmp_path):
    config = _config(tmp_path, bronze={"table": "raw.bronze"})
    assert needs_spark(config)


def test_status_of_tables_on_object_storage_reads_with_spark(tmp_path):
    config = _config(tmp_path, state={"path": "s3://bucket/state"})
    assert needs_spark(config)
