"""The lander into bronze on S3 (delta-rs, no JVM) beside the same landing into a local path.

    .venv/bin/python -m bench.lander_s3                  # about a minute
    .venv/bin/python -m bench.lander_s3 --backlog 200000

One backlog of ``--backlog`` messages (inserts of 100 rows per transaction) is waiting in two copies of a
slot of an embedded PostgreSQL 18; ``land --once`` lands one copy into a local bronze path and the other
into ``s3://`` on the S3-compatible server of ``cdc_apply.testing.object_store`` (moto's, on 127.0.0.1:
the ``cluster`` extra), each in a fresh process, timed from process start to exit less
``land.idle_exit_seconds``. Keys:

- ``lander_s3_messages_per_second``: messages landed into S3 per second;
- ``lander_s3_vs_local``: that rate over the local landing's in the same run (1.0: as fast).

moto answers from a Python process on this machine: no network latency, but a slower server per request
than S3's; the ratio is what the lander's S3 path costs here, not a forecast for a region's S3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.lander import CONFIG, IDLE_EXIT, ROWS_PER_TXN, _insert
from bench.results import merge_results

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "lander_s3"


def _land_once(work: Path, pg, slot: str, bronze: str, env: dict[str, str]) -> tuple[float, str]:
    config = work / f"{slot}.toml"
    config.write_text(CONFIG.format(bronze=bronze, work=work, dsn=pg.dsn("bench"), slot=slot, idle=IDLE_EXIT)
                      .replace("batch_seconds = 1.0", "batch_seconds = 1.0\nbatch_messages = 20000"))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cdc_apply.cli.main", "land", "--config", str(config), "--once"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}, timeout=900)
    seconds = time.monotonic() - started - IDLE_EXIT
    if proc.returncode != 0:
        raise SystemExit(f"the lander failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    done = [line for line in proc.stdout.splitlines() if "done:" in line]
    return seconds, done[-1] if done else ""


def _messages(bronze: str, env: dict[str, str]) -> int:
    from cdc_apply.delta.files import live_files, open_table
    from cdc_apply.delta.refs import TableRef

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return sum(f.records or 0 for f in live_files(open_table(TableRef(path=bronze)), ["seq"]))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run(backlog: int, write: bool) -> dict:
    from cdc_apply.testing.object_store import start_s3_server
    from cdc_apply.testing.postgres import start_postgres

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    pg = start_postgres(WORK / "pg" / "data")
    s3 = start_s3_server(WORK / "s3")
    try:
        pg.create_database("bench")
        pg.execute("CREATE TABLE t (id bigint PRIMARY KEY, v text)", dbname="bench")
        pg.execute("CREATE PUBLICATION bench_pub FOR TABLE t", dbname="bench")
        pg.execute("SELECT pg_create_logical_replication_slot('local', 'pgoutput')", dbname="bench")
        pg.execute("SELECT pg_copy_logical_replication_slot('local', 'on_s3')", dbname="bench")
        _insert(pg, backlog // (ROWS_PER_TXN + 2), 0)
        local_bronze, s3_bronze = str(WORK / "bronze"), s3.url("bench/bronze")
        local_s, local_done = _land_once(WORK, pg, "local", local_bronze, {})
        s3_s, s3_done = _land_once(WORK, pg, "on_s3", s3_bronze, s3.environment())
        local_n, s3_n = _messages(local_bronze, {}), _messages(s3_bronze, s3.environment())
    finally:
        s3.stop()
        pg.destroy()
    if local_n != s3_n:
        raise SystemExit(f"the two landings differ: {local_n} messages locally, {s3_n} on S3")
    local_rate, s3_rate = local_n / local_s, s3_n / s3_s
    out = {
        "lander_s3_messages_per_second": round(s3_rate),
        "lander_s3_vs_local": round(s3_rate / local_rate, 2),
        "lander_s3": {"messages": s3_n, "s3_seconds": round(s3_s, 2), "local_seconds": round(local_s, 2),
                      "local_messages_per_second": round(local_rate), "s3_done": s3_done, "local_done": local_done,
                      "store": "moto_server on 127.0.0.1 (S3-compatible), delta-rs, no JVM",
                      "measured_at": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                                    capture_output=True, text=True).stdout.strip()},
    }
    if write:
        merge_results(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lander_s3", description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=100_000, help="messages waiting in the slot")
    parser.add_argument("--no-write", action="store_true", help="print, do not merge into bench/results.json")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.backlog, not args.no_write), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
