"""The slot as the source sees it (``cdc-apply status`` and a scrape of the lander): figures from a real
PostgreSQL, and a reason instead of an exception (or a hang) when the source cannot answer."""

from __future__ import annotations

import socket
import time

from cdc_apply.metrics.source_side import CONNECT_TIMEOUT_SECONDS, read_slot


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_slot_s_retained_wal_grows_with_the_source_s_writes(postgres):
    db = "slot_figures"
    postgres.create_database(db)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=db)
    postgres.execute("SELECT pg_create_logical_replication_slot('figures', 'pgoutput')", dbname=db)
    try:
        before = read_slot(postgres.dsn(db), "figures")
        assert before.reason is None and before.active is False and before.wal_status == "reserved"
        assert before.retained_wal_bytes is not None and before.retained_wal_bytes >= 0
        assert before.confirmed_flush_lsn is not None and before.wal_lsn is not None
        postgres.execute("INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g", dbname=db)
        after = read_slot(postgres.dsn(db), "figures")
        assert after.retained_wal_bytes - before.retained_wal_bytes > 5000 * 200
        assert after.wal_lsn > before.wal_lsn
    finally:
        postgres.execute("SELECT pg_drop_replication_slot('figures')", dbname=db)


def test_a_slot_the_source_does_not_have_is_a_reason_with_null_figures(postgres):
    figures = read_slot(postgres.dsn(), "no_such_slot")
    assert figures.reason == "the source has no replication slot named 'no_such_slot'"
    assert figures.fields()["slot_retained_wal_bytes"] is None and figures.fields()["slot_active"] is None


def test_an_unreachable_source_is_a_reason_not_an_error():
    figures = read_slot(f"host=127.0.0.1 port={_closed_port()} dbname=x user=x", "s")
    assert figures.reason is not None and figures.reason.startswith("source unreachable: ")
    assert figures.retained_wal_bytes is None and figures.wal_status is None


def test_a_source_that_never_answers_costs_the_connect_timeout_not_a_hang():
    # A listening socket that never speaks: libpq waits for the server's first bytes until its timeout.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        figures = read_slot(f"host=127.0.0.1 port={silent.getsockname()[1]} dbname=x user=x", "s")
        took = time.monotonic() - started
    assert figures.reason is not None and figures.reason.startswith("source unreachable: ")
    assert took < CONNECT_TIMEOUT_SECONDS + 2


def test_no_connection_string_is_a_reason():
    assert "no connection string" in (read_slot(None, "s").reason or "")
