"""Object storage for delta-rs from the standard environment: which paths it opens, options that never hold a
credential, settings that would make commits non-exclusive refused by name, secrets masked in text."""

from __future__ import annotations

import pytest

from cdc_apply.delta import storage
from cdc_apply.delta.files import rs_uri
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import ConfigError

AWS = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
       "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEXAMPLETOKEN", "AWS_REGION": "eu-west-1",
       "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}
ALL = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
       "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ALLOW_HTTP", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
       "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONDITIONAL_PUT",
       "AWS_S3_CONDITIONAL_PUT", storage.ENGINE_VARIABLE, *storage.CONFIGURING["azure"], *storage.CONFIGURING["gs"])


@pytest.fixture
def env(monkeypatch):
    for name in ALL:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_s3a_paths_are_given_to_delta_rs_as_s3_and_other_schemes_are_not_object_storage():
    assert storage.object_uri("s3a://lake/bronze") == "s3://lake/bronze"
    assert storage.object_uri("s3://lake/x") == "s3://lake/x"
    assert storage.object_uri("abfss://c@acct.dfs.core.windows.net/b") == "abfss://c@acct.dfs.core.windows.net/b"
    assert storage.object_uri("gs://bucket/b") == "gs://bucket/b"
    assert [storage.object_uri(p) for p in ("/lake/bronze", "dbfs:/lake", "hdfs://nn/lake")] == [None] * 3


def test_a_path_carrying_credentials_is_refused_without_repeating_them():
    with pytest.raises(ConfigError, match="must not carry credentials") as info:
        storage.object_uri("s3a://AKIAEXAMPLE:topsecret@bucket/bronze")
    assert "topsecret" not in str(info.value)


def test_storage_options_hold_the_endpoint_and_region_but_never_a_credential(env):
    for name, value in AWS.items():
        env.setenv(name, value)
    options = storage.storage_options("s3://lake/bronze")
    assert options == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true"}
    secrets = {AWS["AWS_ACCESS_KEY_ID"], AWS["AWS_SECRET_ACCESS_KEY"], AWS["AWS_SESSION_TOKEN"]}
    assert not set(options.values()) & secrets


def test_the_s3_endpoint_variable_wins_and_the_default_region_is_passed_when_no_region_is_set(env):
    env.setenv("AWS_ENDPOINT_URL", "https://elsewhere.example")
    env.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example")
    env.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert storage.storage_options("s3://b/p") == {"AWS_ENDPOINT_URL": "https://s3.example", "AWS_REGION": "ap-south-1"}


def test_azure_and_gcs_options_are_left_to_delta_rs_s_own_reading_of_their_variables(env):
    env.setenv("AZURE_STORAGE_ACCOUNT_KEY", "azure-key")
    assert storage.storage_options("abfss://c@a.dfs.core.windows.net/p") == {}
    assert storage.storage_options("gs://b/p") == {}


def test_object_storage_goes_to_delta_rs_only_when_the_environment_configures_it(env):
    ref = TableRef(path="s3a://lake/bronze")
    assert rs_uri(ref) is None                         # credentials only in Spark's configuration: Spark's
    env.setenv("AWS_PROFILE", "lander")
    assert rs_uri(ref) == "s3://lake/bronze"
    env.setenv(storage.ENGINE_VARIABLE, "spark")
    assert rs_uri(ref) is None
    env.delenv("AWS_PROFILE")
    env.setenv(storage.ENGINE_VARIABLE, "delta-rs")   # an instance role: nothing in the environment shows it
    assert rs_uri(ref) == "s3://lake/bronze"
    assert rs_uri(TableRef(path="gs://b/bronze")) == "gs://b/bronze"


def test_an_unknown_engine_choice_is_refused_naming_the_variable(env):
    env.setenv(storage.ENGINE_VARIABLE, "jvm")
    with pytest.raises(ConfigError, match=storage.ENGINE_VARIABLE):
        storage.rs_reachable("s3://b/p")


def test_conditional_put_turned_off_is_refused_by_name_on_s3_only(env):
    env.setenv("AWS_CONDITIONAL_PUT", "disabled")
    with pytest.raises(ConfigError, match="AWS_CONDITIONAL_PUT='disabled' turns off the conditional put"):
        storage.check_exclusive_settings("s3://b/p")
    storage.check_exclusive_settings("gs://b/p")
    env.setenv("AWS_CONDITIONAL_PUT", "etag")
    storage.check_exclusive_settings("s3://b/p")


def test_secret_values_are_masked_in_text(env):
    for name, value in AWS.items():
        env.setenv(name, value)
    text = f"signature with {AWS['AWS_SECRET_ACCESS_KEY']} and token {AWS['AWS_SESSION_TOKEN']} at eu-west-1"
    assert storage.redact(text) == "signature with *** and token *** at eu-west-1"
