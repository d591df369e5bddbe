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


# Fixtures that start a JVM or a PostgreSQL server, and the marker a test using any of them (directly or
# through another fixture) carries, so `make test-fast` (-m "not spark and not postgres") never starts one.
_MARKER_OF_FIXTURE = {"spark": "spark", "lake": "spark", "connect_spark": "spark", "connect_session": "spark",
                      "postgres": "postgres"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            marker = _MARKER_OF_FIXTURE.get(fixture)
            if marker is not None and item.get_closest_marker(marker) is None:
                item.add_marker(marker)


# Both `make test` and `make system` run with `--dist loadscope` and this scheduler: a module's tests run
# in one worker (its module fixtures are built once; under `make system` they start several JVMs), every
# Connect test in one worker (one local Connect server a run, not one a worker), and each crash seed on its
# own, so the seeds spread over both workers. (xdist's `loadgroup` would do this from markers, but under
# pytest 9 its renamed node ids are not seen by the scheduler.)
_CONNECT_MODULES = ("tests/lake/test_apply_connect.py", "tests/lake/test_connect_entry_points.py",
                    "tests/spark/test_connect_session.py", "tests/delta/test_log_connect.py")
_CONNECT_TESTS = (
    "tests/lake/test_local_batch.py::"
    "test_a_capture_applied_over_spark_connect_runs_its_small_batches_on_the_driver_and_leaves_the_same_tables",
    "tests/lake/test_bronze_contract.py::test_runs_prove_a_batch_unique_over_spark_connect",
)
_ONE_PER_TEST_MODULES = ("tests/crash/test_kill_anywhere.py",)
# The scopes that take longest, longest first (worker seconds in a two-worker `make test`, ~100 to ~450):
# started first, so that the many short modules fill the end of the run on both workers. xdist's own
# order (most tests first) left the heaviest few modules to the end, one worker busy for minutes after
# the other ran out of work. Any other scope follows in xdist's order.
_LONGEST_FIRST = ("tests/lake/test_local_batch.py", "tests/lake/test_status.py", "tests/lake/test_differential.py",
                  "connect", "tests/lake/test_history.py", "tests/verify/test_verify_spark.py",
                  "tests/lake/test_snapshot_loads.py", "tests/lake/test_bronze_contract.py",
                  "tests/lake/test_backtick_names.py", "tests/lake/test_apply_rules.py",
                  "tests/lake/test_history_seed.py", "tests/lake/test_soft_deletes.py",
                  "tests/lake/test_column_rules.py", "tests/lake/test_state_loss.py",
                  "tests/lake/test_exactly_once.py", "tests/lake/test_maintenance.py",
                  "tests/verify/test_verify_without_history.py", "tests/lake/test_golden_spark.py",
                  "tests/lander/test_lander_snapshot.py", "tests/lake/test_as_of_columns.py")


def _scope_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    if module in _CONNECT_MODULES or nodeid.split("[", 1)[0] in _CONNECT_TESTS:
        return "connect"
    return nodeid if module in _ONE_PER_TEST_MODULES else module


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            # The work queue in _LONGEST_FIRST's order before the first unit leaves it.
            if not getattr(self, "_ordered", False):
                self._ordered = True
                rank = {scope: i for i, scope in enumerate(_LONGEST_FIRST)}
                ordered = sorted(self.workqueue.items(), key=lambda kv: rank.get(kv[0], len(rank)))
                self.workqueue.clear()
                self.workqueue.update(ordered)
            super()._assign_work_unit(node)

    return SuiteScheduling(config, log)
