"""The lander as a small process: start-up, memory under load, and its rate against ``pg_recvlogical``.

    .venv/bin/python -m bench.lander                 # about 2 minutes
    .venv/bin/python -m bench.lander --rate 5000 --seconds 40 --backlog 200000
    .venv/bin/python -m bench.lander --backlog-only      # the backlog part alone (under a minute)

Each run is ``python -m cdc_apply.cli.main land`` in a fresh process against an embedded PostgreSQL 18,
bronze at a local path (delta-rs: no JVM). Keys:

- ``lander_first_message_seconds``: process start to the first bronze commit holding rows (a row is
  waiting in the slot when it starts; the median of ``--reps`` runs, each on a new bronze).
- ``lander_rss_mb``: the lander's peak resident memory (``VmRSS``) while ``--rate`` messages/s (inserts
  of 100 rows per transaction: 102 messages each) stream through it for ``--seconds``.
- ``lander_vs_recvlogical``: ``pg_recvlogical`` (the embedded server's own, same pgoutput options)
  writing a backlog of ``--backlog`` messages to a file, messages/s, over ``land --once`` landing the
  same backlog from a copy of its slot; ours is timed from process start to exit less
  ``land.idle_exit_seconds`` (how long ``--once`` waits to be sure nothing more comes).
- ``lander_reader_floor_vs_recvlogical``: the floor under that ratio for a lander in Python on psycopg2,
  measured in the same run: a fresh process that only reads the same backlog from a third copy of the
  slot with the lander's own reader (``ReplicationReader.read_many``, messages dropped: no sequencing,
  no Parquet, no commit), from process start to its last message.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.results import measured_at, merge_results, read_results

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "lander"
ROWS_PER_TXN = 100
IDLE_EXIT = 0.5
CONFIG = """pipeline = "bench_lander"
[bronze]
path = "{bronze}"
[silver]
path = "{work}/silver"
[state]
path = "{work}/state"
[source]
name = "bench"
dsn = "{dsn}"
slot = "{slot}"
publication = "bench_pub"
snapshot = "never"
[land]
batch_seconds = 1.0
idle_exit_seconds = {idle}
"""


def _config(work: Path, pg, slot: str, bronze: Path) -> Path:
    path = work / f"{slot}-{bronze.name}.toml"
    path.write_text(CONFIG.format(bronze=bronze, work=work, dsn=pg.dsn("bench"), slot=slot, idle=IDLE_EXIT))
    return path


def _land(config: Path, once: bool) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cdc_apply.cli.main", "land", "--config", str(config)]
                            + (["--once"] if once else []), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    out, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"the lander failed (exit {proc.returncode}): {err[-2000:]}")
    return out


def _data_commit(bronze: Path) -> bool:
    log = bronze / "_delta_log"
    if not log.is_dir():
        return False
    for name in sorted(os.listdir(log)):
        if name.endswith(".json") and '"add"' in (log / name).read_text():
            return True
    return False


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _insert(pg, transactions: int, start: int) -> None:
    conn = pg.connect("bench", autocommit=False)
    with conn.cursor() as cur:
        for i in range(transactions):
            first = start + i * ROWS_PER_TXN
            cur.execute("INSERT INTO t SELECT g, 'value ' || g FROM generate_series(%s, %s) g",
                        (first, first + ROWS_PER_TXN - 1))
            conn.commit()
    conn.close()


def first_message(work: Path, pg, reps: int) -> list[float]:
    seconds = []
    for rep in range(reps):
        slot = f"first{rep}"
        pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,), dbname="bench")
        pg.execute(f"INSERT INTO t VALUES ({-1 - rep}, 'first')", dbname="bench")
        bronze = work / f"bronze_first{rep}"
        started = time.monotonic()
        proc = _land(_config(work, pg, slot, bronze), once=False)
        while not _data_commit(bronze):
            if proc.poll() is not None:
                raise SystemExit(f"the lander exited: {proc.stderr.read()[-2000:]}")
            time.sleep(0.01)
        seconds.append(time.monotonic() - started)
        _stop(proc)
        pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,), dbname="bench")
    return seconds


def steady_rss(work: Path, pg, rate: int, seconds: float) -> dict:
    pg.execute("SELECT pg_create_logical_replication_slot('steady', 'pgoutput')", dbname="bench")
    bronze = work / "bronze_steady"
    proc = _land(_config(work, pg, "steady", bronze), once=False)
    while not (bronze / "_delta_log").is_dir():
        time.sleep(0.05)
    per_second = rate / (ROWS_PER_TXN + 2)
    conn = pg.connect("bench", autocommit=False)
    samples, sent, started = [], 0, time.monotonic()
    next_sample = started
    with conn.cursor() as cur:
        while time.monotonic() - started < seconds:
            due = int((time.monotonic() - started) * per_second)
            while sent < due:
                first = 10_000_000 + sent * ROWS_PER_TXN
                cur.execute("INSERT INTO t SELECT g, 'value ' || g FROM generate_series(%s, %s) g",
                            (first, first + ROWS_PER_TXN - 1))
                conn.commit()
                sent += 1
            if time.monotonic() >= next_sample:
                samples.append(_rss_mb(proc.pid))
                next_sample += 0.5
            time.sleep(0.005)
    conn.close()
    elapsed = time.monotonic() - started
    time.sleep(2.0)
    samples.append(_rss_mb(proc.pid))
    out = _stop(proc)
    done = [line for line in out.splitlines() if "done:" in line]
    return {"peak_mb": round(max(samples), 1), "median_mb": round(statistics.median(samples), 1),
            "offered_messages_per_second": round(sent * (ROWS_PER_TXN + 2) / elapsed),
            "seconds": round(elapsed, 1), "done": done[-1] if done else None}


def versus_recvlogical(work: Path, pg, backlog: int) -> dict:
    from cdc_apply.testing.postgres import _bin

    pg.execute("SELECT pg_create_logical_replication_slot('ours', 'pgoutput')", dbname="bench")
    pg.execute("SELECT pg_copy_logical_replication_slot('ours', 'theirs')", dbname="bench")
    pg.execute("SELECT pg_copy_logical_replication_slot('ours', 'floor')", dbname="bench")
    _insert(pg, backlog // (ROWS_PER_TXN + 2), 20_000_000)
    end = pg.execute("SELECT pg_current_wal_lsn()::text", dbname="bench")[0][0]
    options = ["-o", "proto_version=4", "-o", "publication_names=bench_pub", "-o", "messages=true",
               "-o", "streaming=parallel", "-o", "two_phase=on"]
    target = work / "recvlogical.out"
    started = time.monotonic()
    subprocess.run([str(_bin("pg_recvlogical")), "-d", pg.dsn("bench"), "--slot", "theirs", "--start",
                    "--endpos", end, "--no-loop", "-f", str(target), *options], check=True, capture_output=True)
    theirs = time.monotonic() - started
    bronze = work / "bronze_backlog"
    started = time.monotonic()
    proc = _land(_config(work, pg, "ours", bronze), once=True)
    out, err = proc.communicate(timeout=600)
    ours = time.monotonic() - started - IDLE_EXIT
    if proc.returncode != 0:
        raise SystemExit(f"the lander failed: {err[-2000:]}")
    from cdc_apply.delta.files import live_files, open_table
    from cdc_apply.delta.refs import TableRef

    messages = sum(f.records or 0 for f in live_files(open_table(TableRef(path=str(bronze))), ["seq"]))
    floor = reader_floor(pg, messages)
    return {"reader_floor_seconds": round(floor, 2),
            "reader_floor_vs_recvlogical": round(floor / theirs, 2), "lander_vs_reader_floor": round(ours / floor, 2),
            "messages": messages, "recvlogical_seconds": round(theirs, 2), "lander_seconds": round(ours, 2),
            "recvlogical_messages_per_second": round(messages / theirs),
            "lander_messages_per_second": round(messages / ours),
            "recvlogical_file_mb": round(target.stat().st_size / 2 ** 20, 1),
            "ratio": round((messages / theirs) / (messages / ours), 2)}


# The floor process: the lander's reader and nothing else, until ``count`` messages have arrived.
_FLOOR = """
import sys
from cdc_apply.lander.reader import ReplicationReader
dsn, slot, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
options = {"proto_version": "4", "publication_names": "bench_pub", "messages": "true",
           "streaming": "parallel", "two_phase": "on"}
reader = ReplicationReader(dsn, slot, options, {})
reader.start()
seen = 0
while seen < count:
    got = reader.read_many(30.0, 2000)
    if not got:
        raise SystemExit(f"the reader floor stopped at {seen} of {count} messages")
    seen += len(got)
reader.close()
"""


def reader_floor(pg, messages: int) -> float:
    """Seconds from process start to the ``messages``-th message for the lander's reader alone."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", _FLOOR, pg.dsn("bench"), "floor", str(messages)], check=True,
                   cwd=ROOT, timeout=600)
    return time.monotonic() - started


def run(reps: int, rate: int, seconds: float, backlog: int, write: bool, backlog_only: bool = False) -> dict:
    """``backlog_only``: the backlog against ``pg_recvlogical`` alone; the other keys keep their recorded values."""
    from cdc_apply.testing.postgres import start_postgres

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    pg = start_postgres(WORK / "pg" / "data")
    try:
        pg.create_database("bench")
        pg.execute("CREATE TABLE t (id bigint PRIMARY KEY, v text)", dbname="bench")
        pg.execute("CREATE PUBLICATION bench_pub FOR TABLE t", dbname="bench")
        first = None if backlog_only else first_message(WORK, pg, reps)
        rss = None if backlog_only else steady_rss(WORK, pg, rate, seconds)
        versus = versus_recvlogical(WORK, pg, backlog)
    finally:
        pg.destroy()
    out = {
        "lander_vs_recvlogical": versus["ratio"],
        "lander_reader_floor_vs_recvlogical": versus["reader_floor_vs_recvlogical"],
    }
    if first is None or rss is None:
        # the other parts' figures stay as measured, with the commit they were measured at
        lander = dict(read_results().get("lander", {}))
        lander.update(backlog=versus, backlog_measured_at=measured_at())
    else:
        out.update(lander_first_message_seconds=round(statistics.median(first), 2), lander_rss_mb=rss["peak_mb"])
        lander = {"first_message_seconds": [round(s, 2) for s in first], "steady": rss, "backlog": versus,
                  "bronze": "local path (delta-rs, no JVM)", "measured_at": measured_at()}
    out["lander"] = lander
    if write:
        merge_results(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lander", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rate", type=int, default=5000, help="messages/s offered while memory is sampled")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--backlog", type=int, default=200_000, help="messages landed against pg_recvlogical")
    parser.add_argument("--backlog-only", action="store_true", help="only the backlog against pg_recvlogical")
    parser.add_argument("--no-write", action="store_true", help="print, do not merge into bench/results.json")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.reps, args.rate, args.seconds, args.backlog, not args.no_write,
                               args.backlog_only), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
