"""Sustained: the lander and the apply job running together against PostgreSQL at fixed offered rates.

    .venv/bin/python -m bench.sustained [--rates 200,1000,4000] [--seconds 90] [--trigger "2 seconds"]
        [--warmup 120] [--key sustained]

An embedded PostgreSQL 18 gets a table ``ev`` (``id int8`` primary key, ``n int4``, ``v text``,
``at timestamptz``) of ``--preload`` rows. One process then runs, concurrently:

* a load thread offering ``rate`` changed rows per second for ``--seconds`` per rate (transactions
  of 10 rows every 100 ms or less: 70 % updates of random rows, 20 % inserts, 10 % deletes);
* the lander (``cdc_apply.lander.Lander``, protocol 4, streaming parallel) in a thread;
* the apply job as a Structured Streaming query (``processingTime`` trigger ``--trigger``).

First ``--warmup`` seconds (120) of load at the first rate, not measured: the job's first batches pay
for the JVM compiling its MERGE (a cold job's first batch took ~20 s, later ones 8–10 s), and a
running job is what the latency is about. After 30 s the job was still speeding up through the
window (p50 of its first third 13.2 s against 9.8 s in its last); after 120 s the thirds agree. Rates then run one after the other with a quiet gap. **Commit-to-silver latency** of a change is the
Delta commit time of the silver version that applied it (Change Data Feed ``_commit_timestamp``)
minus its PostgreSQL commit time (``_cdc_commit_ts``): same machine, same clock, measured after the
run from silver itself. Per rate: the offered and achieved rates, latency p50/p95/max, p50 in the
first and last third of the window (a growing latency is a lag that is not bounded) and how long
silver took to catch up once the load stopped. Results merge into ``bench/results.json`` under
``--key`` (``sustained``), and the 1,000 rows/s window's p50 into ``latency_p50_seconds``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.results import merge_results

ROWS_PER_TXN = 10


class Load(threading.Thread):
    """Offers ``rate`` changed rows per second until stopped; counts what it committed."""

    def __init__(self, conn, rate: int, first_new_id: int, live: list[int], seed: int) -> None:
        super().__init__(daemon=True)
        self.conn, self.rate, self.next_id, self.live = conn, rate, first_new_id, live
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.rows = 0
        self.log: list[tuple[float, str, list[int]]] = []   # (wall time committed, op, ids) per transaction
        self.behind = 0.0  # seconds the generator itself fell behind its schedule (PostgreSQL was the limit)

    def run(self) -> None:
        cur = self.conn.cursor()
        started = time.monotonic()
        while not self.stop.is_set():
            due = started + self.rows / self.rate
            now = time.monotonic()
            if due > now:
                self.stop.wait(due - now)
                continue
            self.behind = max(self.behind, now - due)
            ids = [self.live[self.rng.randrange(len(self.live))] for _ in range(ROWS_PER_TXN)]
            roll = self.rng.random()
            if roll < 0.7:
                cur.execute("UPDATE ev SET n = n + 1, at = now() WHERE id = ANY(%s)", (ids,))
                op = "U"
            elif roll < 0.9:
                ids = list(range(self.next_id, self.next_id + ROWS_PER_TXN))
                self.next_id += ROWS_PER_TXN
                cur.execute("INSERT INTO ev SELECT g, 0, md5(g::text), now() FROM unnest(%s::int8[]) g", (ids,))
                self.live.extend(ids)
                op = "I"
            else:
                gone = set(ids)
                cur.execute("DELETE FROM ev WHERE id = ANY(%s)", (list(gone),))
                self.live[:] = [i for i in self.live if i not in gone]
                op = "D"
            self.log.append((time.time(), op, ids))
            self.rows += ROWS_PER_TXN


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _latencies(spark, silver: str, since, until) -> list[tuple[float, float]]:
    """(PostgreSQL commit time, seconds to silver) of every insert/update applied for commits in the window."""
    from pyspark.sql import functions as F

    cdf = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(silver)
           .where(F.col("_change_type").isin("insert", "update_postimage"))
           .where(F.col("_cdc_commit_ts").between(since, until))
           .select(F.col("_cdc_commit_ts").cast("double").alias("at"),
                   (F.col("_commit_timestamp").cast("double") - F.col("_cdc_commit_ts").cast("double")).alias("s")))
    return [(r.at, r.s) for r in cdf.collect()]


class Landed(list):
    """The lander's reports, each appended with the wall time it was appended (its commit is done)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def append(self, report) -> None:
        self.times.append(time.time())
        super().append(report)


def floor_window(spark, silver_root: Path, root: Path, conn, rate: int, seconds: float, next_id: int,
                 live: list[int], landed: Landed) -> tuple[dict, int]:
    """Delta's latency floor under the same load: the apply job stopped, the same load and lander running,
    a loop that does nothing but Delta's MERGE of what has landed. Each cycle starts as soon as the last
    one ended and a lander commit it has not applied exists; it MERGEs (bench.delta_floor: one plain
    MERGE, ``whenMatchedDelete`` / update / insert of every column) the keys of every load transaction
    committed before that lander commit, collapsed on the driver (last change wins), into a copy of
    silver (same schema and Delta properties), rewriting the files it touches rather than marking rows
    in deletion vectors, as the job does in a table this small. A transaction's floor latency is the
    end of the cycle that applied it minus its commit: the least any applier pays that lands through
    bronze and MERGEs each batch, with none of its own planning, decoding, bookkeeping or streaming.
    Returns the floor's figures and the load's next new key."""
    from bench.delta_floor import Floor
    from cdc_apply.lake.silver.merge import PERSISTENT_DVS

    floor = Floor(spark, silver_root, root, ["ev"], hot=None, parallelism=1)
    floor.spark.conf.set(PERSISTENT_DVS, "false")
    floor.set_up(variants=("sustained",))
    path = str(root / "sustained" / "ev")
    warm = floor.source([({"id": -1}, True)], True)
    floor.merge(path, warm)   # the floor's session plans its first MERGE before the window, as the job has
    load = Load(conn, rate, next_id, live, seed=1_000_003)
    applied, cycles, latencies = 0, [], []
    commits_before = len(landed.times)
    load.start()
    started = time.time()
    try:
        while True:
            stopping = time.time() - started >= seconds
            if stopping and not load.stop.is_set():
                load.stop.set()
                load.join()
                stop_at = time.time()
            if stopping and applied == len(load.log):
                break
            if stopping and time.time() - stop_at > max(300.0, 3 * seconds):
                raise RuntimeError(f"Delta's floor applied {applied} of {len(load.log)} transactions "
                                   f"{time.time() - stop_at:.0f} s after the load stopped: the lander stopped landing")
            newest = landed.times[-1] if len(landed.times) > commits_before else 0.0
            upto = applied
            while upto < len(load.log) and load.log[upto][0] < newest:
                upto += 1
            if upto == applied:
                time.sleep(0.02)
                continue
            begun = time.time()
            keys: dict[int, bool] = {}
            for _, op, ids in load.log[applied:upto]:
                for key in ids:
                    keys[key] = op == "D"
            source = floor.source([({"id": k, "n": 0, "v": "x" * 32, "at": None}, deleted)
                                   for k, deleted in sorted(keys.items())], True)
            floor.merge(path, source)
            ended = time.time()
            cycles.append(ended - begun)
            latencies += [ended - at for at, op, _ in load.log[applied:upto] if op != "D"]
            applied = upto
    finally:
        load.stop.set()
    return {"offered_rows_per_s": rate, "achieved_rows_per_s": round(load.rows / (stop_at - started)),
            "transactions": len(load.log), "cycles": len(cycles),
            "cycle_seconds_median": round(_percentile(cycles, 0.5), 2),
            "latency_p50_s": round(_percentile(latencies, 0.5), 2),
            "latency_p95_s": round(_percentile(latencies, 0.95), 2)}, load.next_id


def run(rates: list[int], seconds: float, trigger: str, preload: int, gap: float, warmup: float = 0.0,
        key: str = "sustained", land_seconds: float = 1.0, floor: bool = False) -> dict:
    from datetime import datetime, timezone

    from cdc_apply.config import parse_config
    from cdc_apply.delta.bronze_schema import create_bronze_table
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.lander.lander import Lander
    from cdc_apply.spark import spark_session
    from cdc_apply.testing.postgres import start_postgres

    root = Path(tempfile.mkdtemp(prefix="cdc_apply_sustained_"))
    pg = start_postgres(root / "pg" / "data")
    spark = spark_session("cdc_apply-bench-sustained")
    out: dict = {"rates": {}, "seconds_per_rate": seconds, "trigger": trigger, "preload": preload,
                 "warmup_s": warmup, "land_batch_seconds": land_seconds}
    try:
        pg.create_database("bench")
        pg.execute("CREATE TABLE ev (id int8 PRIMARY KEY, n int4, v text, at timestamptz)", dbname="bench")
        pg.execute(f"INSERT INTO ev SELECT g, 0, md5(g::text), now() FROM generate_series(1, {preload}) g",
                   dbname="bench")
        pg.execute("CREATE PUBLICATION sus FOR TABLE ev", dbname="bench")
        # The slot starts after the preload, so the measured windows carry only the offered load. Silver
        # starts empty: an update of a preloaded row arrives whole (no TOAST here) and is inserted.
        pg.execute("SELECT pg_create_logical_replication_slot('sus', 'pgoutput', false, true)", dbname="bench")
        raw = {"pipeline": "sustained", "bronze": {"path": str(root / "bronze")},
               "silver": {"path": str(root / "silver")}, "state": {"path": str(root / "state")},
               "apply": {"trigger_interval": trigger},
               "source": {"name": "pg", "dsn": pg.dsn("bench"), "slot": "sus", "publication": "sus"},
               "land": {"batch_seconds": land_seconds}}
        config = parse_config(raw)
        create_bronze_table(spark_tables(spark), str(root / "bronze"))
        silver = str(root / "silver" / "public" / "ev")
        stop_land = threading.Event()
        lander = Lander(config, spark, out=io.StringIO(), stop=stop_land)
        lander.reports = landed = Landed()
        land_thread = threading.Thread(target=lander.run, daemon=True)
        land_thread.start()
        pipeline = ApplyPipeline.open(spark_tables(spark), config, out=io.StringIO())
        query = pipeline.run(await_termination=False)
        conn = pg.connect("bench")
        live = list(range(1, preload + 1))
        next_id = preload + 1
        offered_txns = 0
        if warmup > 0:   # the first rate, unmeasured: a running job's JVM has compiled its MERGE by now
            load = Load(conn, rates[0], next_id, live, seed=-1)
            load.start()
            time.sleep(warmup)
            load.stop.set()
            load.join()
            next_id = load.next_id
            offered_txns += load.rows // ROWS_PER_TXN
            until = time.monotonic() + max(300.0, 3 * warmup)
            while sum(r.transactions for r in list(pipeline.reports)) < offered_txns and time.monotonic() < until:
                time.sleep(0.5)
            time.sleep(gap)
        warm_batches = len(pipeline.reports)
        for k, rate in enumerate(rates):
            load = Load(conn, rate, next_id, live, seed=k)
            since = datetime.now(timezone.utc)
            started = time.monotonic()
            load.start()
            time.sleep(seconds)
            load.stop.set()
            load.join()
            offered_s = time.monotonic() - started
            until = datetime.now(timezone.utc)
            next_id = load.next_id
            offered_txns += load.rows // ROWS_PER_TXN  # every transaction changes at least one row
            stopped = time.monotonic()
            caught = None
            while time.monotonic() - stopped < max(300.0, 3 * seconds):
                if sum(r.transactions for r in list(pipeline.reports)) >= offered_txns:
                    caught = time.monotonic() - stopped
                    break
                if not query.isActive:
                    raise RuntimeError(f"the apply query stopped: {query.exception()}")
                time.sleep(0.5)
            lat = _latencies(spark, silver, since, until)
            values = [s for _, s in lat]
            third = (until - since).total_seconds() / 3
            t0 = since.timestamp()
            first = [s for at, s in lat if at < t0 + third]
            last = [s for at, s in lat if at >= t0 + 2 * third]
            out["rates"][str(rate)] = {
                "offered_rows_per_s": rate, "achieved_rows_per_s": round(load.rows / offered_s),
                "generator_behind_s": round(load.behind, 2), "rows": load.rows, "changes_seen": len(values),
                "latency_p50_s": round(_percentile(values, 0.5), 2), "latency_p95_s": round(_percentile(values, 0.95), 2),
                "latency_max_s": round(max(values), 2) if values else None,
                "p50_first_third_s": round(_percentile(first, 0.5), 2),
                "p50_last_third_s": round(_percentile(last, 0.5), 2),
                "catch_up_s": None if caught is None else round(caught, 1),
            }
            print(f"[bench sustained] {rate} rows/s offered: {json.dumps(out['rates'][str(rate)])}", flush=True)
            time.sleep(gap)
        query.stop()
        if floor:   # the job stopped, the same load and lander: Delta's MERGE alone at the same rate
            time.sleep(gap)
            out["floor"], next_id = floor_window(spark, root / "silver" / "public", root / "floor", conn,
                                                 1000 if "1000" in out["rates"] else rates[0], seconds,
                                                 next_id, live, landed)
            print(f"[bench sustained] Delta's floor: {json.dumps(out['floor'])}", flush=True)
        conn.close()
        stop_land.set()
        land_thread.join(60)
        measured = list(pipeline.reports)[warm_batches:]
        out["batches"] = len(measured)
        appends = [r.seconds for r in list(lander.reports)]
        out["land_commits"] = len(appends)
        out["land_append_seconds_median"] = round(_percentile(appends, 0.5), 3)   # the lander's Delta commit
        out["batch_seconds_median"] = round(_percentile([r.seconds for r in measured], 0.5), 2)
        # Between one batch's end and the next one's start: the streaming query's own work (offsets, commit
        # log, the Delta source's planning), and the trigger's wait when the job is idle.
        ends = [(r.clock - sum(r.phases.values()), r.clock) for r in measured]
        out["between_batches_seconds_median"] = round(_percentile([b[0] - a[1] for a, b in zip(ends, ends[1:])], 0.5), 2)
        # Where a measured batch's time goes: the median of each phase over the measured batches.
        phases = sorted({name for r in measured for name in r.phases})
        out["phase_seconds_median"] = {name: round(_percentile([r.phases.get(name, 0.0) for r in measured], 0.5), 2)
                                       for name in phases}
        for r in out["rates"].values():
            r["bounded"] = lag_bounded(r, out["batch_seconds_median"])
        bounded = [r["achieved_rows_per_s"] for r in out["rates"].values() if r["bounded"]]
        out["highest_bounded_rows_per_s"] = max(bounded) if bounded else None
    finally:
        pg.destroy()
        shutil.rmtree(root, ignore_errors=True)
    out["cpu_count"], out["loadavg"] = os.cpu_count(), os.getloadavg()
    out["measured_at"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    result = {key: out}
    if "1000" in out["rates"] and land_seconds == 1.0:   # the latency target: 1,000 rows/s, a bronze commit a second
        result["latency_p50_seconds"] = out["rates"]["1000"]["latency_p50_s"]
        if "floor" in out:
            result["latency_p50_floor_seconds"] = out["floor"]["latency_p50_s"]
            result["latency_vs_floor"] = round(out["rates"]["1000"]["latency_p50_s"] / out["floor"]["latency_p50_s"], 2)
    merge_results(result)
    return out


def lag_bounded(window: dict, batch_seconds: float) -> bool:
    """Whether a window's lag stayed bounded: silver caught up once the load stopped, and the latency
    of the window's last third is not above its first third's by more than one batch cycle (a third
    of a 60 s window holds only one or two batches, so a single slow batch moves its median). A third
    with no changes seen has a NaN median, which compares false: not bounded."""
    if window["catch_up_s"] is None:
        return False
    return window["p50_last_third_s"] <= window["p50_first_third_s"] + batch_seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sustained", description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,1000,4000", help="changed rows per second, one window each")
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--trigger", default="2 seconds")
    parser.add_argument("--preload", type=int, default=20_000)
    parser.add_argument("--gap", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=120.0,
                        help="seconds of load at the first rate before the measured windows (not measured)")
    parser.add_argument("--key", default="sustained", help="where in bench/results.json the run goes")
    parser.add_argument("--land-seconds", type=float, default=1.0,
                        help="the lander's land.batch_seconds: a bronze commit at most this often")
    parser.add_argument("--floor", action="store_true",
                        help="then Delta's latency floor: the job stopped, the same load at 1,000 rows/s "
                             "(or the first rate) applied by nothing but Delta's MERGE of what landed")
    args = parser.parse_args(argv)
    out = run([int(r) for r in args.rates.split(",")], args.seconds, args.trigger, args.preload, args.gap,
              args.warmup, args.key, args.land_seconds, args.floor)
    print("\nsustained (lander + apply together):")
    print(f"  {'offered':>8s} {'achieved':>9s} {'p50 s':>7s} {'p95 s':>7s} {'max s':>7s} "
          f"{'p50 1st/3rd':>12s} {'catch-up s':>10s}")
    for rate, r in out["rates"].items():
        print(f"  {rate:>8s} {r['achieved_rows_per_s']:>9,} {r['latency_p50_s']:>7} {r['latency_p95_s']:>7} "
              f"{r['latency_max_s']!s:>7} {r['p50_first_third_s']!s:>5}/{r['p50_last_third_s']!s:<6} "
              f"{r['catch_up_s']!s:>10}" + ("" if r.get("bounded") else "  lag not bounded"))
    print(f"  highest achieved rate with bounded lag: {out.get('highest_bounded_rows_per_s')} rows/s")
    if "floor" in out:
        f = out["floor"]
        print(f"  Delta's floor at {f['offered_rows_per_s']} rows/s: p50 {f['latency_p50_s']} s, p95 "
              f"{f['latency_p95_s']} s, MERGE cycle {f['cycle_seconds_median']} s ({f['cycles']} cycles)")


if __name__ == "__main__":
    main()
