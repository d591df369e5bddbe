"""Shared fixtures: one local[2] Spark session, one local Spark Connect server with Delta and one
PostgreSQL 18 per test run.

Pure tests never touch these fixtures, so they run without a JVM or a server.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

# Property tests fail on wrong answers, not on slow ones: a loaded machine (or two test workers on two
# cores) makes single examples slow. Failing examples print their reproduce blob.
settings.register_profile("cdc_apply", deadline=None, print_blob=True)
settings.load_profile("cdc_apply")


@pytest.fixture(scope="session")
def spark():
    # The session the installed pytest plugin's `spark` fixture gives (cdc_apply.testing.pytest_plugin),
    # defined here too so the suite does not depend on the plugin's entry point being registered.
    from cdc_apply.testing.pytest_plugin import local_spark_session

    session, _ = local_spark_session("cdc_apply-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    # A local Spark Connect server with Delta in a child process (its own JVM, local[2]): see
    # cdc_apply/testing/connect_server.py for why a child, and docs/CONNECT.md.
    from cdc_apply.testing.connect_server import start_connect_server

    server = start_connect_server(tmp_path_factory.mktemp("connect"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def connect_session(connect_server):
    # The Connect client for the whole run; a test using it with the classic `spark` too enters
    # cdc_apply.testing.connect_server.connect_mode() around its Connect calls.
    from cdc_apply.spark.connect import stop_child_sessions

    session = connect_server.session()
    yield session
    stop_child_sessions()   # before the server stops: an open client retries its exit call for minutes
    session.stop()


@pytest.fixture
def connect_spark(connect_session):
    """A Spark Connect session of the local server, with this process in Connect mode for the test
    (pyspark's functions and Delta's DeltaTable build Connect plans), classic again after it."""
    from cdc_apply.testing.connect_server import connect_mode

    with connect_mode():
        yield connect_session


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    from cdc_apply.testing.postgres import start_postgres

    server = start_postgres(tmp_path_factory.mktemp("pg") / "data")
    yield server
    log = server.datadir / "server.log"
    if log.exists():  # kept for a failed run: the data folder goes with the server
        (tmp_path_factory.getbasetemp() / "postgres-server.log").write_bytes(log.read_bytes())
    server.destroy()


@pytest.fixture(scope="session")
def s3_store(tmp_path_factory):
    """An S3-compatible server on 127.0.0.1 (moto's: the ``cluster`` extra); the test skips without moto."""
    pytest.importorskip("moto", reason="moto[server] (the cluster extra) runs the S3-compatible server")
    from cdc_apply.testing.object_store import start_s3_server

    server = start_s3_server(tmp_path_factory.mktemp("s3-store"))
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_store, monkeypatch):
    """The standard AWS variables pointing delta-rs at :func:`s3_store` for one test."""
    for name in ("AWS_PROFILE", "AWS_CONDITIONAL_PUT", "AWS_S3_CONDITIONAL_PUT", "CDC_APPLY_OBJECT_STORE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_store.environment().items():
        monkeypatch.setenv(name, value)
    return s3_store


# Fixtures that start a JVM or a PostgreSQL server, and the marker a test using any of them (directly or
# through another fixture) carries, so `make test-fast` (-m "not spark and not postgres") never starts one.
# A test on the Spark Connect server also carries `connect`: `make test` leaves those to `make system`,
# which starts the server once, in one worker.
_MARKERS_OF_FIXTURE = {"spark": ("spark",), "lake": ("spark",), "connect_spark": ("spark", "connect"),
                       "connect_session": ("spark", "connect"), "connect_server": ("spark", "connect"),
                       "postgres": ("postgres",)}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            for marker in _MARKERS_OF_FIXTURE.get(fixture, ()):
                if item.get_closest_marker(marker) is None:
                    item.add_marker(marker)


# `make system` runs a module's tests in one worker (their module fixture starts several JVMs: with plain
# `load` both workers built it), every Connect test in one worker (one Connect server: a module listed
# here brings only its `connect` tests to make system), and each crash
# seed on its own, so the seeds spread over both workers. (xdist's `loadgroup` would do this from markers,
# but under pytest 9 its renamed node ids are not seen by the scheduler.)
_CONNECT_MODULES = ("tests/lake/test_apply_connect.py", "tests/lake/test_connect_entry_points.py",
                    "tests/spark/test_connect_session.py", "tests/delta/test_log_connect.py",
                    "tests/lake/test_local_batch.py", "tests/lake/test_bronze_contract.py")
_ONE_PER_TEST_MODULES = ("tests/crash/test_kill_anywhere.py",)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SystemScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module in _CONNECT_MODULES:
                return "connect"
            return nodeid if module in _ONE_PER_TEST_MODULES else module

    return SystemScheduling(config, log)
