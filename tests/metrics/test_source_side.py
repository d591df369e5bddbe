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


def test_the_status_api_adds_the_slot_as_the_source_sees_it_to_its_source_s_entry_only(postgres, monkeypatch):
    import cdc_apply
    from cdc_apply.config import parse_config
    from cdc_apply.lake.books import status as status_module

    db = "slot_api"
    postgres.create_database(db)
    postgres.execute("SELECT pg_create_logical_replication_slot('api_slot', 'pgoutput')", dbname=db)
    config = parse_config({"bronze": {"path": "/tmp/never/bronze"}, "silver": {"path": "/tmp/never/silver"},
                           "state": {"path": "/tmp/never/state"},
                           "source": {"name": "pg", "dsn": postgres.dsn(db), "slot": "api_slot"}})
    # The entries' own keys come from the state tables (tests/lake/test_status.py); here, the slot's part.
    from cdc_apply.lake.books.status_rules import KEYS

    entries = [{**dict.fromkeys(KEYS), "source": source, "health": "ok"} for source in ("pg", "other")]
    monkeypatch.setattr(status_module, "read_status", lambda *args: [dict(e) for e in entries])
    try:
        plain = cdc_apply.status(None, config)
        with_slot = cdc_apply.status(None, config, slot=True)
    finally:
        postgres.execute("SELECT pg_drop_replication_slot('api_slot')", dbname=db)
    assert plain == entries
    mine, other = with_slot
    assert list(mine)[:len(KEYS)] == list(KEYS) and mine["slot_active"] is False
    assert mine["slot_wal_status"] == "reserved" and mine["slot_retained_wal_bytes"] >= 0
    assert mine["source_unavailable"] is None
    assert other["slot_active"] is None and "not this configuration's [source]" in other["source_unavailable"]
