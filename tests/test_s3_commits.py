"""The start-up check for exclusive Delta commits on S3 (cdc_apply.spark.s3_commits), without Spark."""

from __future__ import annotations

import logging

from cdc_apply.spark.s3_commits import DYNAMODB_LOG_STORE, EXCLUSIVE_SETTINGS, LOG_STORE_CLASS, check_exclusive_commits


class _Conf:
    def __init__(self, settings):
        self.settings = settings

    def get(self, key, default=None):
        return self.settings.get(key, default)


class _Session:
    def __init__(self, settings):
        self.conf = _Conf(settings)


def test_an_s3_path_with_delta_s_default_log_store_is_warned_about_naming_the_setting(caplog):
    with caplog.at_level(logging.WARNING, logger="cdc_apply.spark"):
        message = check_exclusive_commits(_Session({}), ("/local/silver", "s3a://lake/state"), "optimize")
    assert message and "spark.delta.logStore.s3a.impl=" + LOG_STORE_CLASS in message and "s3a://lake/state" in message
    assert caplog.records[0].getMessage() == message


def test_exclusive_log_stores_and_other_paths_pass_silently():
    assert check_exclusive_commits(_Session(EXCLUSIVE_SETTINGS), ("s3a://lake/silver", "s3://lake/b"), "apply") is None
    dynamo = {"spark.delta.logStore.s3a.impl": DYNAMODB_LOG_STORE}
    assert check_exclusive_commits(_Session(dynamo), ("s3a://lake/silver",), "apply") is None
    assert check_exclusive_commits(_Session({}), ("/data/silver", "abfss://c@a/x", None), "apply") is None
    other = {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore"}
    assert check_exclusive_commits(_Session(other), ("s3a://lake/silver",), "land")
