"""The cluster tests' Spark session: the suite's local one, plus the s3a file system pointed at an
S3-compatible server on 127.0.0.1 when the s3a jars were fetched (``python -m cdc_apply.spark.jars --s3``;
``make cluster`` does). Silver on ``s3a://`` is read through it when compared with PostgreSQL."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """``(S3Server, s3a jars)``, or None when the s3a jars are not fetched (the S3 tests then skip). The jars
    include cdc_apply's S3 log store (built with javac on first use), so Spark's commits are exclusive."""
    from cdc_apply.errors import SetupError
    from cdc_apply.spark.jars import find_delta_jars
    from cdc_apply.spark.s3_jars import installed_s3_jars, log_store_jar
    from cdc_apply.testing.object_store import start_s3_server

    jars = installed_s3_jars()
    if not jars:
        yield None
        return
    try:
        store = log_store_jar(find_delta_jars().jars)
    except SetupError:
        store = None   # no JDK: Delta's default log store (the race test skips)
    jars = [*jars, store] if store else jars
    server = start_s3_server(tmp_path_factory.mktemp("s3"))
    try:
        yield server, jars
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark(s3_server):
    from cdc_apply.spark.session import classic_session as spark_session

    conf = s3_server[0].spark_conf(s3_server[1]) if s3_server else {}
    session = spark_session("cdc_apply-cluster-tests", **conf)
    yield session
    session.stop()
