"""Where the Delta jars come from when Delta is not on Spark's class path already (no JVM here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_apply.errors import SetupError
from cdc_apply.spark import jars as jars_module
from cdc_apply.spark.jars import (
    DELTA_ARTIFACT,
    DELTA_RUNTIME_JARS,
    JARS_ENV,
    STAMP,
    find_delta_jars,
    maven_cache_jars,
)

CHECKOUT_JARS = Path(__file__).resolve().parents[2] / ".jars"


def _jar(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"PK")
    return folder / name


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No jars anywhere: no $CDC_APPLY_JARS, an empty fetched folder, an empty Maven repository."""
    monkeypatch.delenv(JARS_ENV, raising=False)
    monkeypatch.setattr(jars_module, "default_jars_dir", lambda: tmp_path / "fetched")
    monkeypatch.setattr(jars_module, "maven_repository", lambda: tmp_path / "m2")
    return tmp_path


def test_any_folder_holding_the_delta_jar_is_used_without_a_stamp(nowhere, monkeypatch):
    folder = nowhere / "my-jars"
    _jar(folder, "delta-spark_4.1_2.13-4.4.0.jar")
    _jar(folder, "delta-storage-4.4.0.jar")
    monkeypatch.setenv(JARS_ENV, str(folder))
    found = find_delta_jars()
    assert [j.name for j in found.jars] == ["delta-spark_4.1_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"]
    assert found.origin.startswith(JARS_ENV)


def test_fetching_into_a_users_own_jars_folder_keeps_what_is_there(nowhere, monkeypatch):
    folder = nowhere / "my-jars"
    kept = [_jar(folder, "delta-spark_4.1_2.13-4.4.0.jar"), _jar(folder, "extra-1.0.jar")]
    monkeypatch.setenv(JARS_ENV, str(folder))
    assert jars_module.fetch_delta_jars(folder, quiet=True) == kept
    assert all(j.exists() for j in kept)


def test_a_cdc_apply_jars_folder_without_the_delta_jar_is_an_error_naming_it(nowhere, monkeypatch):
    folder = nowhere / "wrong"
    _jar(folder, "something-else-1.0.jar")
    monkeypatch.setenv(JARS_ENV, str(folder))
    with pytest.raises(SetupError, match="CDC_APPLY_JARS names a folder without delta-spark_4.1_2.13-4.4.0.jar") as err:
        find_delta_jars()
    assert str(folder) in str(err.value)


def test_the_jars_are_found_in_mavens_local_repository(nowhere):
    for group, artifact, version in DELTA_RUNTIME_JARS:
        _jar(nowhere / "m2" / Path(*group.split(".")) / artifact / version, f"{artifact}-{version}.jar")
    found = find_delta_jars()
    assert len(found.jars) == len(DELTA_RUNTIME_JARS)
    assert "Maven's local repository" in found.origin


def test_an_incomplete_maven_repository_is_not_used(nowhere):
    group, artifact, version = DELTA_RUNTIME_JARS[0]
    _jar(nowhere / "m2" / Path(*group.split(".")) / artifact / version, f"{artifact}-{version}.jar")
    assert maven_cache_jars(nowhere / "m2") == []


def test_a_fetched_folder_counts_only_once_its_fetch_completed(nowhere):
    _jar(nowhere / "fetched", "delta-spark_4.1_2.13-4.4.0.jar")
    assert find_delta_jars().jars == []
    (nowhere / "fetched" / STAMP).write_text(DELTA_ARTIFACT + "\n")
    assert [j.name for j in find_delta_jars().jars] == ["delta-spark_4.1_2.13-4.4.0.jar"]


def test_with_no_jars_anywhere_the_error_says_exactly_what_to_pass(nowhere):
    found = find_delta_jars()
    assert found.jars == []
    message = found.missing_message()
    assert f"--packages {DELTA_ARTIFACT}" in message
    assert "--jars" in message and JARS_ENV in message and "python -m cdc_apply.spark.jars" in message
    assert str(nowhere / "fetched") in message and str(nowhere / "m2") in message


@pytest.mark.skipif(not (CHECKOUT_JARS / STAMP).exists(), reason="needs the jars `make setup` fetches")
def test_the_maven_list_is_what_make_setup_fetched_for_the_pinned_delta():
    fetched = sorted(j.name for j in CHECKOUT_JARS.glob("*.jar"))
    assert fetched == sorted(f"{artifact}-{version}.jar" for _, artifact, version in DELTA_RUNTIME_JARS)
