"""A mixed batch applied to silver made for Spark (the default) and for every reader (``silver.readers =
"delta-rs"``: no deletion vectors, no column mapping), interleaved in one process.

One bronze table (built with ``StreamBuilder``): a base batch of ``--base`` rows into one table, then a mixed
batch of ``--changes`` changes (60 % updates of existing keys, 30 % inserts of new keys, 10 % deletes), each
its own bronze commit, so each is one micro-batch (``max_files_per_trigger = 1``). Each repetition applies
both batches into a fresh silver and state location under one variant; the measured figure is the mixed
batch's seconds (its ``BatchReport``).

    .venv/bin/python -m bench.readers --base 200000 --changes 50000 --reps 3

Keys merged into bench/results.json: ``readers_any_vs_spark`` (delta-rs readers seconds / default seconds,
median of the repetitions' ratios) and the details under ``readers``.
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import statistics
import time
from pathlib import Path

from bench.results import measured_at, merge_results

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "readers"


def build_bronze(spark, path: Path, base: int, changes: int) -> None:
    from cdc_apply.delta.bronze_schema import create_bronze_table, spark_schema
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.testing.stream import StreamBuilder

    rng = random.Random(7)
    b = StreamBuilder("bench")
    t = b.relation("public", "t", [("id", "int8", True), ("v", "text", False), ("n", "int4", False)])
    with b.transaction() as tx:
        for i in range(base):
            tx.insert(t, {"id": i, "v": f"v{i}", "n": i % 1000})
    cut = len(b.rows())
    next_id = base
    with b.transaction() as tx:
        for _ in range(changes):
            roll = rng.random()
            if roll < 0.6:
                i = rng.randrange(base)
                tx.update(t, {"id": i, "v": f"u{rng.random():.6f}", "n": rng.randrange(1000)})
            elif roll < 0.9:
                tx.insert(t, {"id": next_id, "v": f"n{next_id}", "n": 1})
                next_id += 1
            else:
                tx.delete(t, key={"id": rng.randrange(base)})
    rows = b.rows()
    create_bronze_table(spark_tables(spark), str(path))
    for part in (rows[:cut], rows[cut:]):
        spark.createDataFrame([(*r, None) for r in part], spark_schema()).coalesce(1) \
            .write.format("delta").mode("append").save(str(path))


def apply_variant(spark, bronze: Path, root: Path, readers: str) -> float:
    """Both batches into a fresh lake under ``readers``; the mixed batch's seconds."""
    from cdc_apply.config import parse_config
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline

    shutil.rmtree(root, ignore_errors=True)
    config = parse_config({"pipeline": "bench_readers", "bronze": {"path": str(bronze), "max_files_per_trigger": 1},
                           "silver": {"path": str(root / "silver"), "readers": readers},
                           "state": {"path": str(root / "state")}})
    pipeline = ApplyPipeline.open(spark_tables(spark), config, out=io.StringIO())
    pipeline.run(once=True)
    reports = [r for r in pipeline.reports if r.messages]
    assert len(reports) == 2, [r.line() for r in pipeline.reports]
    return reports[-1].seconds


def run(base: int, changes: int, reps: int, write: bool = True) -> dict:
    from cdc_apply.spark import spark_session

    spark = spark_session("cdc_apply-bench-readers")
    shutil.rmtree(WORK, ignore_errors=True)
    bronze = WORK / "bronze"
    build_bronze(spark, bronze, base, changes)
    seconds: dict[str, list[float]] = {"spark": [], "delta-rs": []}
    apply_variant(spark, bronze, WORK / "warm", "spark")   # the JVM's first MERGE, off the clock
    for rep in range(reps):
        for variant in (("spark", "delta-rs") if rep % 2 == 0 else ("delta-rs", "spark")):
            started = time.perf_counter()
            seconds[variant].append(apply_variant(spark, bronze, WORK / variant, variant))
            print(f"[bench readers] rep {rep + 1}/{reps} {variant:8s}: mixed batch {seconds[variant][-1]:.1f} s "
                  f"({time.perf_counter() - started:.1f} s with the base load)", flush=True)
    ratios = [a / s for a, s in zip(seconds["delta-rs"], seconds["spark"])]
    out = {"readers_any_vs_spark": round(statistics.median(ratios), 2),
           "readers": {"base_rows": base, "changes": changes, "reps": reps,
                       "seconds": {k: [round(x, 2) for x in v] for k, v in seconds.items()},
                       "ratios": [round(r, 2) for r in ratios], "measured_at": measured_at()}}
    if write:
        merge_results(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=200_000)
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    print(run(args.base, args.changes, args.reps, write=not args.no_write), flush=True)


if __name__ == "__main__":
    main()
