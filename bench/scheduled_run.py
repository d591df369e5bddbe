"""A scheduled run: ``cdc-apply apply --once`` as a fresh process, start to exit, on a backlog of 1,000
changes over ten tables, against a fresh process doing Delta's own MERGEs of the same rows.

Set up once (not timed): an embedded PostgreSQL 18 with ten tables ``t0..t9`` (int key, bigint, text)
of 2,000 rows each in one publication; the real lander (``cdc-apply land --once``, ``snapshot =
"initial"``) copies them into bronze and ``cdc-apply apply --once`` into silver; then 1,000 changes
(transactions of 10: 70 % updates, 20 % inserts, 10 % deletes, random tables) are made in PostgreSQL
and landed by a second ``cdc-apply land --once``. That lake (bronze holding the backlog, silver and the
state tables as the last run left them) is the template every repetition copies.

Each repetition runs every process once, in an order rotated by repetition:

* **job** — ``python -m cdc_apply.cli.main apply --once --config ...`` on a fresh copy of the template,
  timed from the process's start to its exit (the JVM, the session, the job's reads of its state and
  silver logs, the batch, the logs and progress, the shutdown);
* **floor** — ``python -m bench.scheduled_run --floor-child ...`` on a fresh copy of the template's
  silver tables: a Python process that builds its own Spark session with the same Delta jars and
  configuration (``cdc_apply.spark_session``, as a spark-submit job with ``--packages`` would get), reads
  the batch's collapsed rows (one per key, last change wins; written by the set-up as JSON), holds them
  in the JVM (``bench.delta_floor.materialized``: no MERGE scans them through Python workers) and runs
  one plain ``DeltaTable.merge`` per table (delete / update every column / insert), then exits; one
  process with four MERGEs at once (the job's ``apply.parallelism``) and one with one at a time
  (``--floors``), and each repetition's faster one is its floor. It has no reading of bronze, planning, decoding or
  bookkeeping: what any applier that knows its rows pays at least in a fresh process.

    .venv/bin/python -m bench.scheduled_run --reps 5

Keys merged into bench/results.json: ``scheduled_run_seconds`` and ``scheduled_run_floor_seconds``
(medians), ``scheduled_run_vs_floor`` (job / floor per repetition, median) and the details under
``scheduled_run`` (every repetition's seconds, the job's batch line seconds and phases, the part of the
process outside the batch, the floor's session and MERGE seconds, the row counts of both).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.pipeline_toml import pipeline_toml
from bench.results import merge_results

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("CDC_APPLY_BENCH_WORK", ROOT / "bench" / "work")) / "scheduled_run"
TABLES = 10
BASE_ROWS = 2_000
CHANGES = 1_000
PARALLELISM = 4  # the job's default apply.parallelism


def _cli(*args: str) -> tuple[float, str]:
    """``cdc-apply ARGS`` in a fresh process from this checkout; (wall seconds, stdout)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cdc_apply.cli.main", *args], capture_output=True, text=True,
                          cwd=str(ROOT))
    seconds = time.monotonic() - started
    if proc.returncode:
        raise RuntimeError(f"cdc-apply {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return seconds, proc.stdout


def _changes(pg, rng: random.Random, names: list[str], base: int, changes: int) -> list[tuple]:
    """``changes`` changes in transactions of 10 (70 % updates, 20 % inserts, 10 % deletes) over ``names``,
    each table starting with keys ``0..base-1``; returns ``[(table, op, id, a, t)]`` in commit order."""
    live = {n: list(range(base)) for n in names}
    nexts = {n: base for n in names}
    out = []
    conn = pg.connect("bench", autocommit=False)
    try:
        with conn.cursor() as cur:
            for txn in range(changes // 10):
                for _ in range(10):
                    name, roll = rng.choice(names), rng.random()
                    if roll < 0.7:
                        i = rng.choice(live[name])
                        cur.execute(f"UPDATE {name} SET a = %s, t = %s WHERE id = %s", (txn, f"update {txn}", i))
                        out.append((name, "U", i, txn, f"update {txn}"))
                    elif roll < 0.9:
                        i = nexts[name]
                        nexts[name] += 1
                        live[name].append(i)
                        cur.execute(f"INSERT INTO {name} VALUES (%s, %s, %s)", (i, txn, f"insert {txn}"))
                        out.append((name, "I", i, txn, f"insert {txn}"))
                    else:
                        i = live[name].pop(rng.randrange(len(live[name])))
                        cur.execute(f"DELETE FROM {name} WHERE id = %s", (i,))
                        out.append((name, "D", i, None, None))
                conn.commit()
    finally:
        conn.close()
    return out


def set_up(seed: int) -> dict:
    """The template lake (bronze with the backlog landed, silver and state after the base load) and the
    floor's rows; returns what was built."""
    from cdc_apply.testing.postgres import start_postgres

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    pg = start_postgres(WORK / "pg" / "data")
    try:
        pg.create_database("bench")
        names = [f"t{k}" for k in range(TABLES)]
        for name in names:
            pg.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, a bigint, t text)", dbname="bench")
            pg.execute(f"INSERT INTO {name} SELECT g, g, 'base ' || g FROM generate_series(0, {BASE_ROWS - 1}) g",
                       dbname="bench")
        pg.execute(f"CREATE PUBLICATION bench_pub FOR TABLE {', '.join(names)}", dbname="bench")
        toml = WORK / "template.toml"
        toml.write_text(pipeline_toml("bench_scheduled", WORK / "template", pg.dsn("bench")))
        land_base, _ = _cli("land", "--once", "--config", str(toml))
        apply_base, _ = _cli("apply", "--once", "--config", str(toml))
        changes = _changes(pg, random.Random(seed), names, BASE_ROWS, CHANGES)
        land_backlog, _ = _cli("land", "--once", "--config", str(toml))
        counts = {n: int(pg.execute(f"SELECT count(*) FROM {n}", dbname="bench")[0][0]) for n in names}
    finally:
        pg.stop()
    collapsed: dict[str, dict[int, list]] = {}
    for name, op, i, a, t in changes:
        collapsed.setdefault(name, {})[i] = [op, a, t]
    (WORK / "rows.json").write_text(json.dumps({n: [[i, *v] for i, v in sorted(rows.items())]
                                                 for n, rows in collapsed.items()}))
    (WORK / "run.toml").write_text(pipeline_toml("bench_scheduled", WORK / "run", "postgresql://unused/bench"))
    return {"tables": TABLES, "base_rows": BASE_ROWS, "changes": len(changes),
            "collapsed_rows": sum(map(len, collapsed.values())), "postgres_rows": counts,
            "set_up_seconds": {"land_base": land_base, "apply_base": apply_base, "land_backlog": land_backlog}}


def _fresh_lake() -> Path:
    run = WORK / "run"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(WORK / "template", run)
    return run


BATCH = re.compile(r"\| ([0-9.]+)s \(([^)]*)\)\s*$")


def run_job() -> dict:
    """One ``cdc-apply apply --once`` on a fresh copy of the template: wall seconds, the batch line's."""
    _fresh_lake()
    seconds, stdout = _cli("apply", "--once", "--config", str(WORK / "run.toml"))
    lines = [ln for ln in stdout.splitlines() if ln.startswith("batch ")]
    out = {"seconds": seconds, "batches": len(lines), "batch_seconds": 0.0, "phases": {}}
    for line in lines:
        m = BATCH.search(line)
        if m:
            out["batch_seconds"] += float(m.group(1))
            for part in m.group(2).split(", "):
                k, v = part.rsplit(" ", 1)
                out["phases"][k] = out["phases"].get(k, 0.0) + float(v)
    counts = {"inserted": 0, "updated": 0, "deleted": 0}
    for ins, upd, dele in re.findall(r"public\.t\d+ \+(\d+)/~(\d+)/-(\d+)", "\n".join(lines)):
        counts["inserted"] += int(ins)
        counts["updated"] += int(upd)
        counts["deleted"] += int(dele)
    out["counts"] = counts
    out["outside_batch_seconds"] = seconds - out["batch_seconds"]
    return out


def run_floor(parallelism: int) -> dict:
    """One floor process on a fresh copy of the template's silver tables, ``parallelism`` MERGEs at once:
    wall seconds and its own figures."""
    run = _fresh_lake()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bench.scheduled_run", "--floor-child", str(run / "silver"),
                           "--parallelism", str(parallelism)],
                          capture_output=True, text=True, cwd=str(ROOT))
    seconds = time.monotonic() - started
    if proc.returncode:
        raise RuntimeError(f"floor child failed:\n{proc.stderr[-4000:]}")
    return {"seconds": seconds, **json.loads(proc.stdout.strip().splitlines()[-1])}


def floor_child(silver: Path, parallelism: int) -> dict:
    """The floor process's work: its own session, the rows, one Delta MERGE per table, ``parallelism`` at
    once (1: one after the other)."""
    started = time.monotonic()
    from pyspark.sql.types import StructField, StructType

    from bench.delta_floor import Floor, materialized
    from cdc_apply.spark import spark_session

    spark = spark_session("bench-scheduled-floor")
    session = time.monotonic() - started
    rows = json.loads((WORK / "rows.json").read_text())
    names = sorted(rows)
    floor = Floor(spark, silver, silver, names, None, max(parallelism, 1))
    floor.schema = StructType([StructField(f.name, f.dataType, f.nullable) for f in
                               floor.spark.read.format("delta").load(str(silver / "public" / names[0])).schema])
    sources = {n: materialized(floor.source([({"id": i, "a": a, "t": t} if op != "D" else {"id": i}, op == "D")
                                             for i, op, a, t in rows[n]], True)) for n in names}
    merged = floor._each("public", floor.merge, sources, parallelism > 1)
    counts = {k: sum(floor.counts[str(silver / "public" / n)][k] for n in names)
              for k in ("updated", "deleted", "inserted")}
    return {"session_seconds": session, "merge_seconds": merged["seconds"],
            "in_process_seconds": time.monotonic() - started, "counts": counts}


def _median(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(reps: int, seed: int, floors: list[int]) -> dict:
    built = set_up(seed)
    print(f"set up: {built}", flush=True)
    kinds = ["job", *(f"floor_{p}" for p in floors)]
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    ratios, best, order = [], [], []
    for rep in range(reps):
        k = rep % len(kinds)
        rotated = kinds[k:] + kinds[:k]
        results = {kind: run_job() if kind == "job" else run_floor(int(kind.split("_")[1])) for kind in rotated}
        for kind in kinds:
            runs[kind].append(results[kind])
        floor_kind = min(kinds[1:], key=lambda kind: results[kind]["seconds"])
        best.append(results[floor_kind]["seconds"])
        ratios.append(results["job"]["seconds"] / best[-1])
        order.append(rotated)
        job = results["job"]
        print(f"rep {rep}: job {job['seconds']:.1f} s (batch {job['batch_seconds']:.1f} s {job['phases']} "
              f"{job['counts']}), " + ", ".join(
                  f"{kind} {results[kind]['seconds']:.1f} s (session {results[kind]['session_seconds']:.1f} s, "
                  f"merges {results[kind]['merge_seconds']:.1f} s {results[kind]['counts']})" for kind in kinds[1:])
              + f", x{ratios[-1]:.2f} of {floor_kind}", flush=True)
    jobs = runs["job"]
    job_s = [j["seconds"] for j in jobs]
    phases = {k: statistics.median(j["phases"].get(k, 0.0) for j in jobs) for k in jobs[0]["phases"]}
    out = {
        "scheduled_run_seconds": statistics.median(job_s),
        "scheduled_run_floor_seconds": statistics.median(best),
        "scheduled_run_vs_floor": statistics.median(ratios),
        "scheduled_run": {
            **built, "reps": reps, "order": order,
            "job": {**_median(job_s), "batch_seconds": _median([j["batch_seconds"] for j in jobs]),
                    "outside_batch_seconds": _median([j["outside_batch_seconds"] for j in jobs]),
                    "phases_median": phases, "counts": jobs[-1]["counts"], "runs": jobs},
            "floor_best_of_rep": _median(best),
            **{kind: {**_median([f["seconds"] for f in runs[kind]]),
                      "session_seconds": _median([f["session_seconds"] for f in runs[kind]]),
                      "merge_seconds": _median([f["merge_seconds"] for f in runs[kind]]),
                      "counts": runs[kind][-1]["counts"], "runs": runs[kind]} for kind in kinds[1:]},
            "vs_floor": _median(ratios),
            "cpu_count": os.cpu_count(), "loadavg": os.getloadavg(),
            "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip(),
        },
    }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--no-write", action="store_true", help="print the keys, do not merge them into results.json")
    parser.add_argument("--floors", default="4,1",
                        help="the floor's MERGEs at once, one floor process per value and repetition (4,1)")
    parser.add_argument("--floor-child", help=argparse.SUPPRESS)
    parser.add_argument("--parallelism", type=int, default=PARALLELISM, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        print(json.dumps(floor_child(Path(args.floor_child), args.parallelism)))
        return 0
    out = run(args.reps, args.seed, [int(p) for p in args.floors.split(",")])
    print(json.dumps({k: v for k, v in out.items() if k != "scheduled_run"}, indent=2))
    if not args.no_write:
        merge_results(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
