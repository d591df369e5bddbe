"""``status_seconds``: process start to exit of ``cdc-apply status --json`` on a lake of a few sources.

    .venv/bin/python -m bench.status                  # builds the lake (Spark, once), then times 7 runs
    .venv/bin/python -m bench.status --reps 11 --sources 5

The lake (``bench/work/status``, kept between runs; ``--rebuild`` makes it again): ``--sources``
sources of ``--transactions`` transactions each, applied by ``cdc_apply.apply`` with ``apply.on_error =
"quarantine"``; every source's last transaction holds a malformed message (a quarantine row each), and
one more transaction per source is landed and left unapplied (so status measures a lag). Each run is
``python -m cdc_apply.cli.main status --config ... --json`` in a fresh process; local paths, so it reads
without a JVM. Keys: ``status_seconds`` (median wall seconds), ``status`` (reps, min/max, the exit code
and entries of the last run, the lake's shape, the commit measured).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.results import merge_results

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "status"


def _config_file(work: Path) -> Path:
    path = work / "pipeline.toml"
    path.write_text('[bronze]\npath = "bronze"\n[silver]\npath = "silver"\n[state]\npath = "state"\n'
                    '[apply]\non_error = "quarantine"\n')
    return path


def build(work: Path, sources: int, transactions: int) -> Path:
    """The lake: applied sources with quarantined messages, one more transaction each landed after."""
    import cdc_apply
    from cdc_apply.delta.bronze_schema import create_bronze_table
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.testing.pytest_plugin import append_bronze
    from cdc_apply.testing.stream import StreamBuilder

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = _config_file(work)
    spark = cdc_apply.spark_session("cdc_apply-bench-status")
    bronze = str(work / "bronze")
    create_bronze_table(spark_tables(spark), bronze)
    builders = []
    for n in range(sources):
        b = StreamBuilder(f"src{n}")
        t = b.relation("public", f"t{n}", [("id", "int4", True), ("v", "text", False)])
        for i in range(transactions):
            with b.transaction() as tx:
                tx.insert(t, {"id": i, "v": "x"})
                if i == transactions - 1:
                    tx.insert(t, {"id": -1, "v": "bad"})
        rows = b.rows()
        # The last Insert's payload malformed: quarantined, the rest of its transaction applies.
        bad = max(i for i, r in enumerate(rows) if r[3][:1] == b"I")
        rows[bad] = (*rows[bad][:3], b"I\x00\x00")
        append_bronze(spark, bronze, rows)
        builders.append((b, t, len(rows)))
    cdc_apply.apply(spark, str(config))
    for b, t, done in builders:
        with b.transaction() as tx:
            tx.insert(t, {"id": 10 ** 6, "v": "late"})
        append_bronze(spark, bronze, b.rows()[done:])
    spark.stop()
    return config


def run(reps: int = 7, sources: int = 3, transactions: int = 20, rebuild: bool = False,
        write: bool = True) -> dict:
    config = WORK / "pipeline.toml"
    if rebuild or not (WORK / "state" / "progress").exists():
        config = build(WORK, sources, transactions)
    seconds, proc = [], None
    for _ in range(reps):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "cdc_apply.cli.main", "status", "--config", str(config), "--json"],
                              cwd=ROOT, capture_output=True, text=True)
        seconds.append(time.monotonic() - started)
    entries = [json.loads(line) for line in proc.stdout.splitlines()]
    out = {
        "status_seconds": round(statistics.median(seconds), 3),
        "status": {"reps": reps, "seconds": {"median": round(statistics.median(seconds), 3),
                                             "min": round(min(seconds), 3), "max": round(max(seconds), 3)},
                   "exit_code": proc.returncode, "sources": len(entries),
                   "quarantined": sum(e["quarantined"] or 0 for e in entries),
                   "lag_seq": {e["source"]: e["lag_seq"] for e in entries},
                   "stderr": proc.stderr.strip()[-500:],
                   "measured_at": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                                 capture_output=True, text=True).stdout.strip()},
    }
    if write:
        merge_results(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.status", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--sources", type=int, default=3)
    parser.add_argument("--transactions", type=int, default=20)
    parser.add_argument("--rebuild", action="store_true", help="build the lake again")
    parser.add_argument("--no-write", action="store_true", help="print, do not merge into bench/results.json")
    args = parser.parse_args(argv)
    out = run(args.reps, args.sources, args.transactions, args.rebuild, not args.no_write)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
