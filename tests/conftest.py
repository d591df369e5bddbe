"""Shared fixtures: one local[2] Spark session and one PostgreSQL 18 per test run.

Pure tests never touch these fixtures, so they run without a JVM or a server.
"""

from __future__ import annotations

import pytest

# Tests that share the session-scoped ``rules_run`` capture (a minute to build) run in one worker.
_SHARED_CAPTURES = {"test_apply_rules.py": "rules_run", "test_merge.py": "rules_run"}


def pytest_collection_modifyitems(config, items):
    """Under ``pytest -n N --dist loadgroup`` keep each module in one worker (its module-scoped
    fixtures are built once) and the users of one shared capture together."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group(_SHARED_CAPTURES.get(name, str(item.path))))


@pytest.fixture(scope="session")
def spark():
    # The session the installed pytest plugin's `spark` fixture gives (cdc_apply.testing.pytest_plugin),
    # defined here too so the suite does not depend on the plugin's entry point being registered.
    from cdc_apply.testing.pytest_plugin import local_spark_session

    session, _ = local_spark_session("cdc_apply-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    from cdc_apply.testing.postgres import start_postgres

    server = start_postgres(tmp_path_factory.mktemp("pg") / "data")
    yield server
    server.destroy()
