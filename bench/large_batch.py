"""Large batches: changes per second on a ~1M-change batch over ten tables, mixed (70/20/10 updates,
inserts, deletes) and mostly new keys (80/15/5 inserts, updates, deletes), each a running job's batch.

The batches are built once with ``StreamBuilder`` (ten tables of ``id int4`` key, ``a int8``, ``t text``:
a base of ``--base`` rows per table, then the two measured batches, transactions of 10 changes) and kept
as Parquet in bench/work/large_batch. Each repetition is one child process (its own JVM) running one
apply job over a bronze table holding them, one bronze commit per micro-batch. ``--previous REV`` runs
the same children on another commit of cdc_apply (see bench.small_batch), interleaved with the current
code: ``large_mixed_vs_previous`` is current / previous changes per second, same run. (The sweep's
``changes_per_second`` is a real capture's batch, with key moves and unchanged TOAST; this one is
synthetic, so that another commit can take the very same batches.)

    .venv/bin/python -m bench.large_batch --reps 1 --previous c9068a9 --floor

``--floor`` adds one more child of the current code in which, before each measured batch, Delta Lake
alone writes the batch's changes (bench.delta_floor: each key's last change, one plain MERGE per table
and one plain append per table, four tables at once) into copies of silver as the job's previous batch
left it.

Keys merged into bench/results.json: ``large_mixed_changes_per_second``, ``large_new_keys_changes_per_second``,
``large_identity_floor_changes_per_second`` (the new-keys batch's bronze rows through an identity
``mapInArrow``: what any Python decode of the batch costs at least), with ``--previous``
``large_mixed_vs_previous`` and ``large_new_keys_vs_previous``, with ``--floor``
``large_{mixed,new_keys}_delta_merge_floor_seconds``, ``large_{...}_tables_vs_delta_merge_floor`` (our
tables phase against Delta's ten MERGEs) and ``large_{...}_vs_delta_merge_floor`` (the whole batch
against them); the details under ``large_batch``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import merge_results
from bench.small_batch import _checkout, _import_path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "large_batch"
TABLES = 10
SHAPES = {"mixed": (0.7, 0.2, 0.1), "new_keys": (0.15, 0.8, 0.05)}   # updates, inserts, deletes


def build(base: int, changes: int, seed: int) -> list[tuple[str, int]]:
    """Write the batches as Parquet files of bronze rows; returns ``[(name, changes)]`` in landing order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cdc_apply.testing.stream import StreamBuilder

    WORK.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    b = StreamBuilder("bench")
    rels = [b.relation("public", f"t{k}", [("id", "int4", True), ("a", "int8", False), ("t", "text", False)])
            for k in range(TABLES)]
    out, mark = [], 0
    changes_log: list[tuple] = []   # (table, op, id, a, t) of the batch being built: Delta's floor's input

    def cut(name: str, n: int) -> None:
        nonlocal mark
        rows = b.rows()[mark:]
        mark = len(b.rows())
        pq.write_table(pa.table({"source": [r[0] for r in rows], "seq": pa.array([r[1] for r in rows], pa.int64()),
                                 "lsn": pa.array([r[2] for r in rows], pa.int64()),
                                 "payload": pa.array([r[3] for r in rows], pa.binary())}), WORK / f"{name}.parquet")
        out.append((name, n))
        if changes_log:
            pq.write_table(pa.table(dict(zip(("table", "op", "id", "a", "t"), map(list, zip(*changes_log))))),
                           WORK / f"{name}.changes.parquet")
            changes_log.clear()

    for rel in rels:
        for start in range(0, base, 1000):
            with b.transaction() as tx:
                for i in range(start, min(base, start + 1000)):
                    tx.insert(rel, [i, i, f"base {i}"])
    cut("base", base * TABLES)
    nexts = {rel.oid: base for rel in rels}
    live = {rel.oid: list(range(base)) for rel in rels}
    for name, (updates, inserts, _) in SHAPES.items():
        for t in range(changes // 10):
            with b.transaction() as tx:
                for _ in range(10):
                    rel = rng.choice(rels)
                    ids, roll = live[rel.oid], rng.random()
                    if roll < updates:
                        i = ids[rng.randrange(len(ids))]
                        tx.update(rel, [i, t, f"{name} {t}"])
                        changes_log.append((rel.message.name, "U", i, t, f"{name} {t}"))
                    elif roll < updates + inserts:
                        i = nexts[rel.oid]
                        nexts[rel.oid] += 1
                        ids.append(i)
                        tx.insert(rel, [i, t, f"{name} {t}"])
                        changes_log.append((rel.message.name, "I", i, t, f"{name} {t}"))
                    else:
                        at = rng.randrange(len(ids))
                        ids[at], ids[-1] = ids[-1], ids[at]
                        gone = ids.pop()
                        tx.delete(rel, key={"id": gone})
                        changes_log.append((rel.message.name, "D", gone, None, None))
        cut(name, changes)
    return out


def child(batches: list[tuple[str, int]], floor: bool = False) -> dict:
    """One job over the batches; seconds, changes per second and phases per batch. With ``floor``, Delta's
    own floor (bench.delta_floor) of each measured batch, run just before the job's batch on copies of
    silver as the job's previous batch left it."""
    from pyspark.sql import functions as F

    import cdc_apply
    from cdc_apply import spark_session
    from cdc_apply.config import parse_config

    if (Path(cdc_apply.__file__).parent / "lake").is_dir():
        from cdc_apply.delta.bronze_schema import create_bronze_table
        from cdc_apply.delta.engine import spark_tables
        from cdc_apply.lake.pipeline import ApplyPipeline
    else:  # a commit before the lake layer's rename (c9068a9): cdc_apply.delta
        from cdc_apply.delta.bronze import create_bronze_table
        from cdc_apply.delta.pipeline import ApplyPipeline

    spark = spark_session("cdc_apply-bench-large")
    root = Path(tempfile.mkdtemp(prefix="large-batch-", dir=os.environ.get("CDC_APPLY_BENCH_TMP")))
    bronze = str(root / "bronze")
    create_bronze_table(spark_tables(spark), bronze)
    for name, _ in batches:   # one file per bronze commit: one micro-batch each
        (spark.read.parquet(str(WORK / f"{name}.parquet")).withColumn("landed_at", F.lit(None).cast("timestamp"))
         .coalesce(1).write.format("delta").mode("append").save(bronze))
    config = parse_config({"pipeline": "bench", "bronze": {"path": bronze, "max_files_per_trigger": 1},
                           "silver": {"path": str(root / "silver")}, "state": {"path": str(root / "state")}})
    pipeline = ApplyPipeline.open(spark_tables(spark), config, out=io.StringIO())
    floors: dict = {}
    if floor:
        _floor_before_batches(spark, pipeline, root, [name for name, _ in batches], config.apply.parallelism, floors)
    pipeline.run(once=True)
    out = {name: {"seconds": r.seconds, "changes": n, "changes_per_second": n / r.seconds, "phases": r.phases}
           for (name, n), r in zip(batches, pipeline.reports)}
    for name, f in floors.items():
        out[name]["floor"] = f
    # The floor under any Python decode of a batch: its bronze rows through an identity mapInArrow (Spark's
    # Arrow transfer to a Python worker and back), the new-keys batch's rows, twice (the second counted).
    rows = spark.read.parquet(str(WORK / "new_keys.parquet"))
    for _ in range(2):
        started = time.monotonic()
        rows.mapInArrow(_identity, rows.schema).write.format("noop").mode("overwrite").save()
        out["identity_floor_seconds"] = time.monotonic() - started
    return out


def _floor_before_batches(spark, pipeline, root: Path, names: list[str], parallelism: int, out: dict) -> None:
    """Before each measured batch (after the one before it), Delta's ten MERGEs and ten appends of the
    batch's collapsed rows, four at once, on copies of silver (bench.delta_floor): ``out[batch]``."""
    import pyarrow.parquet as pq

    from bench.delta_floor import PARALLEL, Floor

    process = pipeline.process
    tables = [f"t{k}" for k in range(TABLES)]

    def process_then_floor(df, batch_id):
        report = process(df, batch_id)
        done = len(pipeline.reports)
        if pipeline.reports and pipeline.reports[-1] is report and done < len(names):
            name = names[done]
            floor = Floor(spark, root / "silver" / "public", root / f"floor_{name}", tables, None, parallelism)
            layout = floor.set_up(PARALLEL)
            changes = pq.read_table(WORK / f"{name}.changes.parquet").to_pylist()
            result = floor.small_batch([(c["table"], c["op"], c["id"], c["a"], c["t"]) for c in changes], serial=False)
            out[name] = {"layout": layout, "rows": result["rows"], "deletes": result["deletes"],
                         "merge_seconds": result["merge_parallel"]["seconds"],
                         "append_seconds": result["append_parallel"]["seconds"],
                         "merge_counts": result["merge_counts"]}
        return report

    pipeline.process = process_then_floor


def _identity(batches):
    yield from batches


def _run_child(code: Path | None, batches, floor: bool = False) -> dict:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = f"{code}{os.pathsep}{ROOT}"
        env["CDC_APPLY_JARS"] = str(ROOT / ".jars")
    proc = subprocess.run([sys.executable, "-m", "bench.large_batch", "--child", json.dumps(batches)]
                          + (["--child-floor"] if floor else []),
                          capture_output=True, text=True, env=env, cwd=str(code or ROOT))
    if proc.returncode:
        raise RuntimeError(f"bench child failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(reps: int, previous: str | None, base: int, changes: int, seed: int = 26, floor: bool = False) -> dict:
    started = time.monotonic()
    batches = build(base, changes, seed)
    print(f"built {len(batches)} batches in {time.monotonic() - started:.0f} s", flush=True)
    code_previous = _import_path(_checkout(previous)) if previous else None
    runs: dict[str, list[dict]] = {"current": [], "previous": []}
    for rep in range(reps):
        order = [("current", None), ("previous", code_previous)] if previous else [("current", None)]
        for name, code in (order if rep % 2 == 0 else order[::-1]):
            result = _run_child(code, batches)
            runs[name].append(result)
            print(f"rep {rep} {name}: " + ", ".join(f"{b} {r['seconds']:.1f} s ({r['changes_per_second']:,.0f}/s)"
                                                   for b, r in result.items() if isinstance(r, dict))
                  + f"; identity floor {result.get('identity_floor_seconds', 0):.1f} s", flush=True)

    def median(who: str, batch: str) -> float:
        return statistics.median(r[batch]["changes_per_second"] for r in runs[who])

    identity = statistics.median(r["identity_floor_seconds"] for r in runs["current"])
    out = {"large_mixed_changes_per_second": round(median("current", "mixed")),
           "large_identity_floor_changes_per_second": round(changes / identity),
           "large_new_keys_changes_per_second": round(median("current", "new_keys")),
           "large_batch": {"base_rows_per_table": base, "changes": changes, "tables": TABLES, "reps": reps,
                           "cpus": os.cpu_count(), "runs": runs,
                           "measured_at": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                                         capture_output=True, text=True).stdout.strip()}}
    if previous:
        out["large_mixed_vs_previous"] = round(median("current", "mixed") / median("previous", "mixed"), 2)
        out["large_new_keys_vs_previous"] = round(median("current", "new_keys") / median("previous", "new_keys"), 2)
        out["large_batch"]["previous"] = previous
    if floor:
        out.update(_floor_run(batches))
        out["large_batch"]["floor_run"] = out.pop("_floor_run")
    merge_results(out)
    print(json.dumps({k: v for k, v in out.items() if k != "large_batch"}, indent=2))
    return out


def _floor_run(batches) -> dict:
    """One more child of the current code, with Delta's floor before each measured batch (its own run, so
    the floor's writes between batches touch none of the timings above): our tables phase and whole
    batch against Delta's ten MERGEs of the same collapsed rows, four at once."""
    result = _run_child(None, batches, floor=True)
    out: dict = {"_floor_run": result}
    for name in SHAPES:
        ours, floor = result[name], result[name]["floor"]
        print(f"floor run {name}: batch {ours['seconds']:.1f} s, tables {ours['phases']['tables']:.1f} s; Delta's ten "
              f"MERGEs {floor['merge_seconds']:.1f} s, ten appends {floor['append_seconds']:.1f} s", flush=True)
        out[f"large_{name}_delta_merge_floor_seconds"] = round(floor["merge_seconds"], 1)
        out[f"large_{name}_tables_vs_delta_merge_floor"] = round(ours["phases"]["tables"] / floor["merge_seconds"], 2)
        out[f"large_{name}_vs_delta_merge_floor"] = round(ours["seconds"] / floor["merge_seconds"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large_batch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--previous", default=None, help="a commit to measure in the same run (e.g. c9068a9)")
    parser.add_argument("--base", type=int, default=100_000, help="rows per table before the batches")
    parser.add_argument("--changes", type=int, default=1_000_000, help="changes per measured batch")
    parser.add_argument("--floor", action="store_true",
                        help="also one run with Delta's own floor of each measured batch (bench.delta_floor)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child([tuple(b) for b in json.loads(args.child)], floor=args.child_floor)))
        return 0
    run(args.reps, args.previous, args.base, args.changes, floor=args.floor)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
