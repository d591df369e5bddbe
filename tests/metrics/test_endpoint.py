"""The endpoint of ``[metrics]``: ``/metrics`` in Prometheus' text, ``/healthz`` 200 or 503 with the reason,
fed by the hooks the lander and the apply job call."""

from __future__ import annotations

import io
import socket
from types import SimpleNamespace

import pytest
from scrape import assert_counters_grew, health, scrape, value

from cdc_apply.config import parse_config
from cdc_apply.errors import ConfigError
from cdc_apply.metrics import registry
from cdc_apply.metrics.server import MetricsServer
from cdc_apply.metrics.serving import serving

MINIMAL = {"bronze": {"path": "b"}, "silver": {"path": "s"}, "state": {"path": "st"}}


@pytest.fixture
def server():
    # The registry is the process's: a pipeline another test of this worker ran may have left a failure.
    registry.HEALTH.clear()
    served = MetricsServer("127.0.0.1", 0)
    yield served
    served.close()


def _landed(messages: int, nbytes: int, flush_lsn: int) -> SimpleNamespace:
    return SimpleNamespace(messages=messages, nbytes=nbytes, flush_lsn=flush_lsn, seconds=0.2)


def test_landed_batches_are_counted_by_source_and_only_grow(server):
    before = scrape(server.url)
    registry.record_landed_batch("endpoint_src", _landed(5, 500, 14), b"BICcK")
    after = scrape(server.url)
    assert_counters_grew(before, after)
    was = lambda name: value(before, name, source="endpoint_src") or 0.0  # noqa: E731
    assert value(after, "cdc_lander_messages_total", source="endpoint_src") == was("cdc_lander_messages_total") + 5
    assert value(after, "cdc_lander_bytes_total", source="endpoint_src") == was("cdc_lander_bytes_total") + 500
    # Commit, Stream Commit and Commit Prepared each end one committed transaction.
    assert value(after, "cdc_lander_transactions_total", source="endpoint_src") == \
        was("cdc_lander_transactions_total") + 3
    assert value(after, "cdc_lander_bronze_commit_seconds_count", source="endpoint_src") == \
        was("cdc_lander_bronze_commit_seconds_count") + 1
    assert value(after, "cdc_lander_confirmed_flush_lsn_bytes", source="endpoint_src") == 14


def test_healthz_turns_503_with_the_reason_when_the_source_is_lost_and_200_when_it_is_back(server):
    assert health(server.url) == (200, "ok\n")
    registry.record_connection_lost("healthz_src", "server closed the connection unexpectedly")
    code, body = health(server.url)
    assert code == 503 and "lander healthz_src: connection to the source lost: server closed" in body
    registry.record_connected("healthz_src")
    assert health(server.url) == (200, "ok\n")


def test_an_applied_batch_gives_rows_per_table_phases_and_lag_per_source(server):
    stats = SimpleNamespace(inserted=3, updated=2, deleted=1, changes=9)
    report = SimpleNamespace(messages=20, transactions=4, quarantined=1, seconds=1.5,
                             phases={"plan": 0.5, "tables": 1.0}, written=[("pg", 16384, "public.t", stats)],
                             lag_by_source={"pg": (7, 2.5), "other": (0, 0.0)}, applied_commit_age_seconds=3.0)
    before = scrape(server.url)
    registry.record_apply_batch("endpoint_pipe", report)
    after = scrape(server.url)
    assert_counters_grew(before, after)
    got = lambda name, **labels: value(after, name, pipeline="endpoint_pipe", **labels)  # noqa: E731
    assert got("cdc_apply_rows_total", table="public.t", operation="updated") == 2
    assert got("cdc_apply_rows_total", source="pg", table="public.t") == 6
    assert got("cdc_apply_changes_total", source="pg", table="public.t") == 9
    assert got("cdc_apply_batch_phase_seconds_count", phase="plan") == 1
    assert (got("cdc_apply_lag_messages", source="pg"), got("cdc_apply_lag_seconds", source="pg")) == (7, 2.5)
    assert got("cdc_apply_lag_seconds", source="other") == 0
    assert got("cdc_apply_quarantined_messages_total") == 1 and got("cdc_apply_transactions_total") == 4


def test_table_labels_stop_at_the_bound_but_a_configured_table_keeps_its_own(monkeypatch):
    monkeypatch.setattr(registry, "MAX_TABLE_LABELS", 2)
    assert [registry.table_label("bound_pipe", f"public.t{i}") for i in range(3)] == \
        ["public.t0", "public.t1", registry.OTHER_TABLE]
    assert registry.table_label("bound_pipe", "public.t0") == "public.t0"
    assert registry.table_label("bound_pipe", "public.kept", configured={"public.kept"}) == "public.kept"


def test_a_failed_batch_is_counted_and_makes_healthz_503_until_a_batch_applies(server):
    registry.record_apply_failure("failing_pipe", "DecodeError: bad tuple\nmore")
    code, body = health(server.url)
    assert code == 503 and "apply failing_pipe: the last batch failed: DecodeError: bad tuple" in body
    assert value(scrape(server.url), "cdc_apply_failures_total", pipeline="failing_pipe") >= 1
    registry.record_apply_batch("failing_pipe", SimpleNamespace(
        messages=0, transactions=0, quarantined=0, seconds=0.1, phases={}, written=[], lag_by_source={},
        applied_commit_age_seconds=None))
    assert health(server.url)[0] == 200


def test_no_port_configured_serves_nothing():
    config = parse_config(MINIMAL)
    out = io.StringIO()
    with serving(config, "apply", out) as served:
        assert served is None
    assert out.getvalue() == ""


def test_a_configured_port_serves_while_the_command_runs_and_frees_it_after():
    registry.HEALTH.clear()   # as in the fixture: other tests of this worker may have left a failure
    config = parse_config({**MINIMAL, "metrics": {"apply_port": 0}})
    out = io.StringIO()
    with serving(config, "apply", out) as served:
        assert served is not None and f"{served.url}/metrics" in out.getvalue()
        assert health(served.url)[0] == 200
        port = served.port
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0   # closed with the command


def test_a_command_ending_in_an_error_says_so_on_healthz_until_the_process_exits():
    config = parse_config({**MINIMAL, "pipeline": "ends_badly", "metrics": {"apply_port": 0}})
    with pytest.raises(RuntimeError):
        with serving(config, "apply", io.StringIO()):
            raise RuntimeError("bronze vanished")
    assert "apply ends_badly: stopped: bronze vanished" in registry.HEALTH.reasons()
    registry.HEALTH.set_healthy("apply ends_badly")


def test_a_port_in_use_is_a_config_error_naming_the_key():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = parse_config({**MINIMAL, "metrics": {"land_port": taken.getsockname()[1]}})
        with pytest.raises(ConfigError) as info:
            with serving(config, "land", io.StringIO()):
                pass
    assert info.value.context["key"] == "metrics.land_port"
