"""spark_session keeps the configuration the user already has, and refuses Spark Connect in one sentence.

Pure: the settings are planned from dicts and Connect is recognised on stand-in objects; no JVM starts.
(That spark-submit's --master local[1] reaches the job is shown end to end in tests/packaging.)
"""

from __future__ import annotations

import pytest

from cdc_apply.errors import SetupError
from cdc_apply.spark.session import (
    CONNECT_UNSUPPORTED,
    DELTA_EXTENSION,
    _connect_requested,
    is_spark_connect,
    plan_settings,
    require_classic,
    spark_defaults_conf,
    submit_args_conf,
)


def test_under_spark_submit_the_users_master_memory_and_jars_are_kept():
    user = {"spark.master": "yarn", "spark.driver.memory": "16g", "spark.executor.memory": "8g",
            "spark.jars.packages": "io.delta:delta-spark_4.1_2.13:4.4.0"}
    settings = plan_settings(user, {}, launching=False)
    assert not {"spark.master", "spark.driver.memory", "spark.executor.memory", "spark.jars.packages",
                "spark.ui.enabled"} & settings.keys()
    assert settings["spark.sql.extensions"] == DELTA_EXTENSION
    assert settings["spark.sql.session.timeZone"] == "UTC"
    assert "spark.sql.shuffle.partitions" not in settings  # not a local master: Spark's own default stays


def test_a_local_master_given_to_spark_submit_sets_one_task_per_core():
    settings = plan_settings({"spark.master": "local[1]"}, {}, launching=False)
    assert settings["spark.sql.shuffle.partitions"] == "1"
    assert settings["spark.default.parallelism"] == "1"
    assert "spark.master" not in settings


def test_task_counts_the_user_set_are_not_replaced():
    settings = plan_settings({"spark.master": "local[4]", "spark.sql.shuffle.partitions": "64"}, {}, launching=False)
    assert "spark.sql.shuffle.partitions" not in settings
    assert settings["spark.default.parallelism"] == "4"


def test_a_session_started_here_gets_local_2_and_4g_unless_the_user_set_them():
    fresh = plan_settings({}, {}, launching=True)
    assert (fresh["spark.master"], fresh["spark.driver.memory"], fresh["spark.sql.shuffle.partitions"]) == \
        ("local[2]", "4g", "2")
    chosen = plan_settings({"spark.master": "local[3]", "spark.driver.memory": "2g"}, {}, launching=True)
    assert "spark.master" not in chosen and "spark.driver.memory" not in chosen
    assert chosen["spark.sql.shuffle.partitions"] == "3"


def test_delta_joins_the_users_own_session_extensions():
    settings = plan_settings({"spark.sql.extensions": "com.example.Ext"}, {}, launching=False)
    assert settings["spark.sql.extensions"] == f"com.example.Ext,{DELTA_EXTENSION}"
    assert "spark.sql.extensions" not in plan_settings({"spark.sql.extensions": DELTA_EXTENSION}, {}, launching=False)


def test_keyword_arguments_win_over_the_users_configuration_and_the_defaults():
    settings = plan_settings({"spark.master": "local[4]"}, {"spark.master": "local[1]", "spark.ui.enabled": True},
                             launching=True)
    assert settings["spark.master"] == "local[1]"
    assert settings["spark.ui.enabled"] == "True"
    assert settings["spark.sql.shuffle.partitions"] == "1"


def test_pyspark_submit_args_options_and_conf_pairs_are_read_as_settings():
    conf = submit_args_conf("--master local[3] --driver-memory=2g --jars a.jar,b.jar "
                            "--conf spark.sql.shuffle.partitions=5 -c spark.x=a=b pyspark-shell")
    assert conf == {"spark.master": "local[3]", "spark.driver.memory": "2g", "spark.jars": "a.jar,b.jar",
                    "spark.sql.shuffle.partitions": "5", "spark.x": "a=b"}


def test_spark_defaults_conf_is_read_as_spark_submit_reads_it(tmp_path):
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.master   local[3]\nspark.driver.memory=6g\n\nnot.spark.key x\n")
    assert spark_defaults_conf(tmp_path) == {"spark.master": "local[3]", "spark.driver.memory": "6g"}
    assert spark_defaults_conf(tmp_path / "missing") == {}


class _Conf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class _ClassicStandIn:
    conf = _Conf({})
    sparkContext = object()


class _NoJvmStandIn:
    conf = _Conf({})

    @property
    def sparkContext(self):
        raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] Attribute `sparkContext` is not supported in Spark Connect")


def _connect_class():
    cls = type("SparkSession", (), {"conf": _Conf({}), "sparkContext": object()})
    cls.__module__ = "pyspark.sql.connect.session"
    return cls


def test_a_classic_session_is_not_taken_for_spark_connect():
    assert not is_spark_connect(_ClassicStandIn())
    require_classic(_ClassicStandIn())


@pytest.mark.parametrize("stand_in", [
    pytest.param(lambda: _connect_class()(), id="its class is pyspark.sql.connect's"),
    pytest.param(lambda: type("S", (), {"conf": _Conf({"spark.remote": "sc://host"}), "sparkContext": 1})(),
                 id="spark.remote is set"),
    pytest.param(_NoJvmStandIn, id="it has no sparkContext"),
])
def test_a_spark_connect_session_is_refused_with_what_is_needed(stand_in):
    with pytest.raises(SetupError) as err:
        require_classic(stand_in())
    assert CONNECT_UNSUPPORTED in str(err.value)
    assert "dedicated (single user) access mode" in str(err.value)


@pytest.mark.parametrize(("env", "conf", "named"), [
    ({"SPARK_REMOTE": "sc://host"}, {}, "SPARK_REMOTE"),
    ({}, {"spark.remote": "sc://host"}, "spark.remote"),
    ({"SPARK_API_MODE": "connect"}, {}, "spark.api.mode=connect"),
    ({}, {}, None),
])
def test_settings_that_would_start_spark_connect_are_named_before_a_session_is_built(monkeypatch, env, conf, named):
    for key in ("SPARK_REMOTE", "SPARK_API_MODE", "SPARK_CONNECT_MODE_ENABLED"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert _connect_requested(conf) == named
