"""The lander into bronze on S3 (delta-rs, no JVM) beside the same landing into a local path.

    .venv/bin/python -m bench.lander_s3                  # about two minutes
    .venv/bin/python -m bench.lander_s3 --backlog 200000

One backlog of ``--backlog`` messages (inserts of 100 rows per transaction) is waiting in ``2 × --reps``
copies of a slot of an embedded PostgreSQL 18; ``land --once`` lands one copy into a local bronze path and
another into ``s3://`` on the S3-compatible server of ``cdc_apply.testing.object_store`` (moto's, on
127.0.0.1: the ``cluster`` extra), each in a fresh process and a new bronze, timed from process start to
exit less ``land.idle_exit_seconds``; the two alternate which goes first (the first reads WAL the page
cache may not hold yet). Keys:

- ``lander_s3_messages_per_second``: messages landed into S3 per second (median of the reps);
- ``lander_s3_vs_local``: that rate over the local landings' median in the same run (1.0: as fast).

moto answers from a Python process on this machine: no network latency, but a slower server per request
than S3's; the ratio is what the lander's S3 path costs here, not a forecast for a region's S3.
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

from bench.lander import CONFIG, IDLE_EXIT, ROWS_PER_TXN, _insert
from bench.results import measured_at, merge_results

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


def run(backlog: int, reps: int, write: bool) -> dict:
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
        pg.execute("SELECT pg_create_logical_replication_slot('local0', 'pgoutput')", dbname="bench")
        for rep in range(reps):
            for kind in ("local", "s3"):
                if f"{kind}{rep}" != "local0":
                    pg.execute("SELECT pg_copy_logical_replication_slot('local0', %s)", (f"{kind}{rep}",),
                               dbname="bench")
        _insert(pg, backlog // (ROWS_PER_TXN + 2), 0)
        seconds: dict[str, list[float]] = {"local": [], "s3": []}
        done: dict[str, str] = {}
        counts = set()
        for rep in range(reps):
            for kind in (("local", "s3") if rep % 2 == 0 else ("s3", "local")):
                env = s3.environment() if kind == "s3" else {}
                bronze = s3.url(f"bench/bronze{rep}") if kind == "s3" else str(WORK / f"bronze{rep}")
                took, done[kind] = _land_once(WORK, pg, f"{kind}{rep}", bronze, env)
                seconds[kind].append(took)
                counts.add(_messages(bronze, env))
    finally:
        s3.stop()
        pg.destroy()
    if len(counts) != 1:
        raise SystemExit(f"the landings differ: {sorted(counts)} messages")
    messages = counts.pop()
    local_rate, s3_rate = messages / statistics.median(seconds["local"]), messages / statistics.median(seconds["s3"])
    out = {
        "lander_s3_messages_per_second": round(s3_rate),
        "lander_s3_vs_local": round(s3_rate / local_rate, 2),
        "lander_s3": {"messages": messages, "s3_seconds": [round(x, 2) for x in seconds["s3"]],
                      "local_seconds": [round(x, 2) for x in seconds["local"]],
                      "local_messages_per_second": round(local_rate), "s3_done": done["s3"],
                      "local_done": done["local"],
                      "store": "moto_server on 127.0.0.1 (S3-compatible), delta-rs, no JVM",
                      "measured_at": measured_at()},
    }
    if write:
        merge_results(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lander_s3", description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=100_000, help="messages waiting in the slot")
    parser.add_argument("--reps", type=int, default=3, help="landings of each kind")
    parser.add_argument("--no-write", action="store_true", help="print, do not merge into bench/results.json")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.backlog, args.reps, not args.no_write), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
