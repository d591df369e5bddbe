"""The embedded server's lifecycle as tests drive it: a stop really stops the server (a test of an outage
relies on it), and stopping a stopped server is no error."""

from __future__ import annotations

import psycopg2
import pytest

from cdc_apply.testing.postgres import start_postgres

pytestmark = pytest.mark.postgres


def test_a_stop_stops_the_server_and_a_second_stop_is_no_error(tmp_path):
    pg = start_postgres(tmp_path / "data")
    try:
        pg.stop()
        assert not pg.is_running()
        with pytest.raises(psycopg2.OperationalError):
            psycopg2.connect(pg.dsn("postgres"), connect_timeout=3).close()
        pg.stop()   # already stopped
        pg.start()
        assert pg.is_running()
    finally:
        pg.destroy()
