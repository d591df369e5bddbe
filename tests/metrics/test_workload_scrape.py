"""``cdc-apply land`` and the continuous ``cdc-apply apply`` serve ``/metrics`` and ``/healthz`` during a
real workload (PostgreSQL, the lander, the apply job, each command in its own process), scraped over HTTP
and read with prometheus_client's parser: counters only grow, the lander's ``/healthz`` turns 503 while
the source is down and 200 again after, and the slot's retained WAL grows while the lander is stopped
(``cdc-apply status``) and falls once it has caught up (the lander's scrape)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from scrape import assert_counters_grew, health, scrape, value

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.system]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """pipeline = "scraped"
[bronze]
path = "{root}/bronze"
[silver]
path = "{root}/silver"
[state]
path = "{root}/state"
[apply]
trigger_interval = "1 second"
[source]
name = "pg"
dsn = "{dsn}"
slot = "scraped"
publication = "pub"
create_slot = true
[land]
batch_seconds = 0.3
idle_exit_seconds = 1.0
keepalive_seconds = 1.0
retries = 100
backoff_seconds = 0.2
backoff_max_seconds = 1.0
[metrics]
land_port = {land_port}
apply_port = {apply_port}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["JAVA_TOOL_OPTIONS"] = "-XX:TieredStopAtLevel=1"   # a short-lived JVM: C1 saves most of its CPU
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cdc_apply.cli.main", *args]


def _start(work: Path, name: str, *args: str) -> subprocess.Popen:
    out = open(work / f"{name}.out", "w")
    return subprocess.Popen(_cli(*args), env=_env(), cwd=work, stdout=out, stderr=subprocess.STDOUT)


def _wait(what: str, check: Callable[[], object], timeout: float, procs: tuple = ()) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args[3]} exited with {proc.returncode} while waiting for {what}"
        try:
            got = check()
        except OSError:    # the endpoint not up yet
            got = None
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _status(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cli("status", "--config", str(config), *args), env=_env(), capture_output=True,
                          text=True, timeout=120)


class Scrapes:
    """Every scrape of one endpoint, each checked against the one before: counters never fall."""

    def __init__(self, url: str) -> None:
        self.url, self.last = url, {}

    def __call__(self) -> dict:
        now = scrape(self.url)
        assert_counters_grew(self.last, now)
        self.last = now
        return now


def test_the_endpoints_during_a_workload_outage_and_a_stopped_lander(postgres, tmp_path):
    db = "metrics_workload"
    postgres.create_database(db)
    sql = lambda text: postgres.execute(text, dbname=db)  # noqa: E731
    sql("CREATE TABLE t (id int PRIMARY KEY, v text)")
    sql("CREATE PUBLICATION pub FOR TABLE t")
    sql("INSERT INTO t SELECT g, 'first' FROM generate_series(1, 100) g")
    land_port, apply_port = _free_port(), _free_port()
    land_url, apply_url = f"http://127.0.0.1:{land_port}", f"http://127.0.0.1:{apply_port}"
    config = tmp_path / "scraped.toml"
    config.write_text(CONFIG.format(root=tmp_path, dsn=postgres.dsn(db), land_port=land_port, apply_port=apply_port))
    lander = _start(tmp_path, "land1", "land", "--config", str(config))
    apply = None
    try:
        landed = Scrapes(land_url)
        # The initial snapshot: one table, its 100 rows.
        _wait("the snapshot's rows", lambda: value(landed(), "cdc_lander_snapshot_rows_total", source="pg") == 100,
              60, (lander,))
        apply = _start(tmp_path, "apply", "apply", "--config", str(config), "--progress-seconds", "0")
        applied = Scrapes(apply_url)
        for i in range(5):
            sql(f"INSERT INTO t SELECT g, 'txn {i}' FROM generate_series({1000 + 10 * i}, {1009 + 10 * i}) g")
        _wait("five landed transactions", lambda: (value(landed(), "cdc_lander_transactions_total", source="pg") or 0) >= 5,
              60, (lander,))
        rows = lambda: value(applied(), "cdc_apply_rows_total", pipeline="scraped", table="public.t")  # noqa: E731
        _wait("the applied rows", lambda: (rows() or 0) >= 50, 240, (lander, apply))
        now = applied.last
        assert value(now, "cdc_apply_batches_total", pipeline="scraped") >= 1
        assert value(now, "cdc_apply_changes_total", pipeline="scraped", table="public.t") >= 50
        assert value(now, "cdc_apply_lag_messages", pipeline="scraped", source="pg") is not None
        assert value(now, "cdc_apply_batch_phase_seconds_count", pipeline="scraped", phase="tables") >= 1
        assert value(landed(), "cdc_slot_active", source="pg", slot="scraped") == 1
        assert value(landed.last, "cdc_slot_wal_status", wal_status="reserved") == 1
        assert health(land_url) == (200, "ok\n") and health(apply_url) == (200, "ok\n")

        # The source goes away: the lander's /healthz says so; the apply job's, which needs no source, does not.
        postgres.stop()
        try:
            code, body = _wait("the lander's 503", lambda: (got := health(land_url))[0] == 503 and got, 60, (lander,))
            assert "lander pg: connection to the source lost" in body, body
            assert value(landed(), "cdc_source_up", source="pg") == 0
            assert value(landed.last, "cdc_lander_reconnects_total", source="pg") >= 1
            assert health(apply_url)[0] == 200
        finally:
            postgres.start()
        _wait("the lander's 200", lambda: health(land_url) == (200, "ok\n"), 90, (lander,))
        assert value(landed(), "cdc_source_up", source="pg") == 1

        # The lander stopped: the slot holds WAL back, more with every write (status asks the source).
        assert _stop(lander) == 0
        first = json.loads(_status(config, "--json").stdout.splitlines()[0])
        sql("INSERT INTO t SELECT g, repeat('w', 500) FROM generate_series(10000, 13000) g")
        grown = _status(config, "--json", "--max-retained-wal-bytes", "1")
        assert grown.returncode == 6, grown.stdout + grown.stderr
        second = json.loads(grown.stdout.splitlines()[0])
        assert second["slot_active"] is False and second["source_unavailable"] is None
        assert second["slot_retained_wal_bytes"] - first["slot_retained_wal_bytes"] > 3000 * 500
        text = _status(config, "--prometheus").stdout
        families = {f.name: f for f in text_string_to_metric_families(text)}
        retained = families["cdc_slot_retained_wal_bytes"].samples[0].value
        assert retained >= second["slot_retained_wal_bytes"]
        assert families["cdc_apply_lag_seconds"].samples[0].labels == {"pipeline": "scraped", "source": "pg"}

        # Started again, it catches up and the slot's restart point moves on: the retained WAL falls.
        lander = _start(tmp_path, "land2", "land", "--config", str(config))
        landed = Scrapes(land_url)

        def fallen():
            # A running-xacts record past the rows lets the slot's restart_lsn move up to it once the lander
            # confirms a commit after it: the one written here (without it, the lander confirms the rows'
            # commit only, and the record a slow host's bgwriter logs past it is never confirmed).
            sql("SELECT pg_log_standby_snapshot()")
            sql("INSERT INTO t VALUES (20000, 'tick') ON CONFLICT (id) DO UPDATE SET v = 'tick'")
            figure = value(landed(), "cdc_slot_retained_wal_bytes", source="pg")
            return figure is not None and figure < retained

        _wait("the retained WAL to fall", fallen, 90, (lander,))
        _wait("the last rows applied", lambda: (rows() or 0) >= 3051, 240, (lander, apply))
    finally:
        codes = [_stop(p) for p in (lander, apply) if p is not None]
        for name in ("land1", "land2", "apply"):
            if (tmp_path / f"{name}.out").exists():
                print(f"--- {name}\n" + (tmp_path / f"{name}.out").read_text(errors="replace")[-3000:])
    assert codes == [0, 0], codes
