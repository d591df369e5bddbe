"""Many tables: a publication of ``--tables`` tables (500), batches touching 10, 50 and 200 of them with
5 changes each, against Delta's own MERGEs of the same rows at the best parallelism found for them.

One process, one running apply job over a bronze table built with ``StreamBuilder``: a base batch
(``--base-rows`` rows in every table, which creates every silver table), a warm-up batch touching ten
tables (the measured batches are then a running job's, not the JVM's first MERGE batch), then one batch
per ``--touched`` size, each touching that many tables picked at random, one transaction of 5 changes
per table (3 updates, 1 insert, 1 delete). Each measured batch is its own micro-batch.

Delta's floor for each measured batch runs in the job's Spark session, before the job's batch for the
first and third sizes and after it for the second: the batch's collapsed rows (one per key) as one plain
``DeltaTable.merge`` per touched table (delete / update every column / insert; ``bench.delta_floor``)
into copies of the touched silver tables taken before the batch (a file copy of each table's folder),
one variant per ``--floor-parallelism`` value (MERGEs at once; 1: one after the other), each into its
own copies. The floor is the fastest variant.

    .venv/bin/python -m bench.many_tables                       # 500 tables; 10, 50, 200 touched
    .venv/bin/python -m bench.many_tables --tables 100 --touched 10,50,100

Keys merged into bench/results.json: ``many_tables_vs_delta_merge_floor`` (the largest batch's seconds /
its fastest floor's), ``many_tables_seconds`` (the largest batch's seconds) and the details under
``many_tables`` (per size: the job's seconds and phases, every floor variant's seconds, the counts).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import merge_results

ROOT = Path(__file__).resolve().parents[1]
CHANGES_PER_TABLE = 5


def _bronze(tables: int, base_rows: int, sizes: list[int], seed: int):
    """``[(name, rows, touched tables, changes)]`` in landing order; changes as ``(table, op, id, a, t)``."""
    from cdc_apply.testing.stream import StreamBuilder

    rng = random.Random(seed)
    b = StreamBuilder("bench")
    rels = [b.relation("public", f"t{k}", [("id", "int4", True), ("a", "int8", False), ("t", "text", False)])
            for k in range(tables)]
    batches, mark = [], 0
    live = {k: list(range(base_rows)) for k in range(tables)}
    nexts = {k: base_rows for k in range(tables)}
    with b.transaction() as tx:
        for rel in rels:
            for i in range(base_rows):
                tx.insert(rel, [i, i, f"base {i}"])
    batches.append(("base", b.rows(), [], []))
    mark = len(b.rows())
    for name, touched in [("warm", 10)] + [(f"touched_{n}", n) for n in sizes]:
        picked = sorted(rng.sample(range(tables), touched))
        changes = []
        for k in picked:
            rel, ids = rels[k], live[k]
            with b.transaction() as tx:
                for _ in range(CHANGES_PER_TABLE - 2):
                    i = rng.choice(ids)
                    tx.update(rel, [i, -i, f"update {i}"])
                    changes.append((f"t{k}", "U", i, -i, f"update {i}"))
                i = nexts[k]
                nexts[k] += 1
                ids.append(i)
                tx.insert(rel, [i, i, f"insert {i}"])
                changes.append((f"t{k}", "I", i, i, f"insert {i}"))
                i = ids.pop(rng.randrange(len(ids)))
                tx.delete(rel, key={"id": i})
                changes.append((f"t{k}", "D", i, None, None))
        batches.append((name, b.rows()[mark:], [f"t{k}" for k in picked], changes))
        mark = len(b.rows())
    return batches


def run(tables: int, base_rows: int, sizes: list[int], parallelisms: list[int], seed: int) -> dict:
    from pyspark.sql.types import StructField, StructType

    from bench.delta_floor import Floor, collapse, materialized
    from cdc_apply import spark_session
    from cdc_apply.config import parse_config
    from cdc_apply.delta.bronze_schema import create_bronze_table
    from cdc_apply.delta.bronze_schema import spark_schema as bronze_schema
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline

    spark = spark_session("cdc_apply-bench-many-tables")
    root = Path(tempfile.mkdtemp(prefix="many-tables-", dir=os.environ.get("CDC_APPLY_BENCH_TMP")))
    bronze = str(root / "bronze")
    create_bronze_table(spark_tables(spark), bronze)
    started = time.monotonic()
    batches = _bronze(tables, base_rows, sizes, seed)
    for _, rows, _, _ in batches:
        spark.createDataFrame([(*r, None) for r in rows], bronze_schema()).coalesce(1) \
            .write.format("delta").mode("append").save(bronze)
    bronze_seconds = time.monotonic() - started
    config = parse_config({"pipeline": "bench", "bronze": {"path": bronze, "max_files_per_trigger": 1},
                           "silver": {"path": str(root / "silver")}, "state": {"path": str(root / "state")}})
    pipeline = ApplyPipeline.open(spark_tables(spark), config, out=io.StringIO())
    silver = root / "silver" / "public"
    floor = Floor(spark, silver, root / "floor", [], None, 1)
    names = [name for name, _, _, _ in batches]
    by_name = {name: (touched, changes) for name, _, touched, changes in batches}
    floors: dict[str, dict] = {}
    order: dict[str, str] = {}

    def run_floor(name: str, sources: dict) -> None:
        touched = by_name[name][0]
        out = {}
        k = len(floors)
        for p in parallelisms[k % len(parallelisms):] + parallelisms[:k % len(parallelisms)]:
            floor.tables, floor.parallelism = touched, max(p, 1)
            out[str(p)] = floor._each(f"{name}/p{p}", floor.merge, sources, p > 1)["seconds"]
        out["counts"] = {c: sum(floor.counts[str(root / "floor" / f"{name}/p{parallelisms[0]}" / t)][c]
                                for t in touched) for c in ("updated", "deleted", "inserted")}
        floors[name] = out

    process = pipeline.process

    def process_with_floor(df, batch_id):
        name = names[len(pipeline.reports)] if len(pipeline.reports) < len(names) else None
        if name is None or not name.startswith("touched_"):
            return process(df, batch_id)
        touched, changes = by_name[name]
        if floor.schema is None:
            floor.schema = StructType([StructField(f.name, f.dataType, f.nullable) for f in
                                       spark.read.format("delta").load(str(silver / touched[0])).schema])
        for p in parallelisms:
            for t in touched:
                shutil.copytree(silver / t, root / "floor" / f"{name}/p{p}" / t)
        collapsed = collapse(changes)
        sources = {t: materialized(floor.source([({"id": i, "a": a, "t": t_} if op != "D" else {"id": i}, op == "D")
                                                 for i, (op, a, t_) in sorted(collapsed[t].items())], True))
                   for t in touched}   # built and held in the JVM before the clock
        floor_first = sizes.index(int(name.split("_")[1])) % 2 == 0
        order[name] = "floor first" if floor_first else "job first"
        if floor_first:
            run_floor(name, sources)
        report = process(df, batch_id)
        if not floor_first:
            run_floor(name, sources)
        print(f"{name}: job {report.seconds:.1f} s {report.phases}, floor {floors[name]}", flush=True)
        return report

    pipeline.process = process_with_floor
    pipeline.run(once=True)
    reports = dict(zip(names, pipeline.reports))
    per_size = {}
    for n in sizes:
        name = f"touched_{n}"
        r = reports[name]
        best = min((floors[name][str(p)], p) for p in parallelisms)
        per_size[str(n)] = {
            "seconds": r.seconds, "phases": r.phases, "tables": len(r.tables),
            "counts": {c: sum(getattr(t, c) for t in r.tables.values()) for c in ("updated", "deleted", "inserted")},
            "table_seconds_median": sorted(t.seconds for t in r.tables.values())[len(r.tables) // 2],
            "floor_seconds": {f"parallelism_{p}": floors[name][str(p)] for p in parallelisms},
            "floor_best_seconds": best[0], "floor_best_parallelism": best[1],
            "floor_counts": floors[name]["counts"], "vs_delta_merge_floor": r.seconds / best[0],
            "order": order[name]}
    largest = per_size[str(sizes[-1])]
    return {
        "many_tables_vs_delta_merge_floor": largest["vs_delta_merge_floor"],
        "many_tables_seconds": largest["seconds"],
        "many_tables": {
            "tables": tables, "base_rows": base_rows, "changes_per_table": CHANGES_PER_TABLE,
            "parallelism": config.apply.parallelism, "floor_parallelisms": parallelisms,
            "bronze_build_seconds": bronze_seconds,
            "base_batch_seconds": reports["base"].seconds, "warm_batch_seconds": reports["warm"].seconds,
            "by_touched": per_size,
            "cpu_count": os.cpu_count(), "loadavg": os.getloadavg(),
            "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=500)
    parser.add_argument("--base-rows", type=int, default=100)
    parser.add_argument("--touched", default="10,50,200")
    parser.add_argument("--floor-parallelism", default="1,2,4")
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--no-write", action="store_true", help="print the keys, do not merge them into results.json")
    args = parser.parse_args()
    out = run(args.tables, args.base_rows, [int(n) for n in args.touched.split(",")],
              [int(p) for p in args.floor_parallelism.split(",")], args.seed)
    print(json.dumps(out, indent=2))
    if not args.no_write:
        merge_results(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
