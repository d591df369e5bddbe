"""``cdc-apply status`` reads without a JVM only when delta-rs opens every table it reads (a local path, or
object storage the environment holds credentials for): a catalog table, or object storage whose credentials
only Spark's configuration holds, keeps the Spark read. Decided from the configuration and the environment."""

from __future__ import annotations

import pytest

from cdc_apply.config import parse_config
from cdc_apply.delta.storage import CONFIGURING, ENGINE_VARIABLE
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


def test_status_of_tables_on_object_storage_without_credentials_in_the_environment_reads_with_spark(
        tmp_path, monkeypatch):
    for name in (*CONFIGURING["s3"], ENGINE_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    config = _config(tmp_path, state={"path": "s3://bucket/state"})
    assert needs_spark(config)


def test_status_of_tables_on_object_storage_with_aws_credentials_in_the_environment_reads_without_spark(
        tmp_path, monkeypatch):
    monkeypatch.delenv(ENGINE_VARIABLE, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    config = _config(tmp_path, state={"path": "s3a://bucket/state"}, bronze={"path": "s3a://bucket/bronze"})
    assert not needs_spark(config)
