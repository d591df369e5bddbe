"""A wide table's MERGE source: what Catalyst's constraint propagation costs, and the window.

    .venv/bin/python bench/wide.py [--columns 120] [--versions 40] [--rows 2000] [--reps 5]
        [--split-rows 100000]

The differential soak alters one table in 1 % of its transactions; by its sixth checkpoint that
table has ~300 columns and a batch holds ~125 of its relation versions. Its MERGE source — the
projection of the decoded rows (value, carried and present per column), the key events, and the
collapse (a window per column) — is a plan with a few expressions per column, and with
``spark.sql.constraintPropagation.enabled`` (Spark's default) the optimizer's time grows much faster
than that. The apply job's table sessions turn it off.

Here the same plan is built through the job's own functions (``project``, ``key_events``,
``collapse``) over ``--rows`` synthetic decoded rows of a ``--columns``-column table with
``--versions`` relation versions (each lacks one column, so positions differ), and timed with the
setting on and off, interleaved: Python build, optimizer, and the run (``localCheckpoint``). The
rows are few on purpose: this measures the per-batch planning cost, which does not depend on them.

Then, with the setting off, the collapse of ``--split-rows`` rows (one key in ten has two events,
the rest one) with the window over every event against the split (single-event keys without the
window: ``collapse(split=True)``, what a table with 20,000+ events in a batch gets), interleaved.
Results merge into ``bench/results.json`` under ``wide``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from bench.apply import _spread  # noqa: E402
from bench.results import merge_results  # noqa: E402

SETTING = "spark.sql.constraintPropagation.enabled"


def _work_and_rows(spark, columns: int, versions: int, rows: int, distinct_keys: int | None = None):
    from pyspark.sql import functions as F

    from cdc_apply.apply.tables import SilverColumn
    from cdc_apply.delta.merge import SlotMap, TableWork
    from cdc_apply.delta.tables import TableRef

    decoded = spark.range(rows).select(
        F.col("id").alias("seq"), F.col("id").alias("commit_lsn"), F.current_timestamp().alias("commit_ts"),
        F.col("id").alias("xid"), F.lit(None).cast("string").alias("origin"),
        F.lit(None).cast("string").alias("user"), F.lit("U").alias("op"), F.lit("K").alias("old_kind"),
        F.array(F.lit(1)).alias("toast"), (F.col("id") % versions).cast("int").alias("slot"),
        *[(F.col("id") % (distinct_keys or rows) if p == 0 else F.col("id")).cast("int").alias(f"{side}_{p}")
          for side in ("new", "old") for p in range(columns)])
    slots = []
    for v in range(versions):
        mapping = tuple(i for i in range(columns) if i != v)
        slots.append(SlotMap(v, mapping, tuple("INT" for _ in mapping), mapping))
    work = TableWork("bench", 1, "public.wide", TableRef(path="/nonexistent"),
                     tuple(SilverColumn(f"c{i}", "INT", i) for i in range(columns)), ("c0",), tuple(slots), None,
                     (("_commit_lsn", "_commit_lsn"),))
    return work, decoded.cache()


def run(columns: int = 120, versions: int = 40, rows: int = 2000, reps: int = 5, split_rows: int = 100_000,
        write: bool = True) -> dict:
    from cdc_apply.delta.merge import collapse, key_events, project
    from cdc_apply.spark import spark_session

    spark = spark_session("cdc_apply-bench-wide")
    work, decoded = _work_and_rows(spark, columns, versions, rows)
    decoded.count()
    times: dict[str, dict[str, list[float]]] = {v: {"build": [], "optimize": [], "run": []} for v in ("on", "off")}
    for rep in range(reps):
        for variant in (("on", "off") if rep % 2 == 0 else ("off", "on")):
            spark.conf.set(SETTING, str(variant == "on").lower())
            t0 = time.perf_counter()
            collapsed = collapse(key_events(project(decoded, work), work), work, True)
            t1 = time.perf_counter()
            collapsed._jdf.queryExecution().optimizedPlan()
            t2 = time.perf_counter()
            collapsed.localCheckpoint().count()
            t3 = time.perf_counter()
            for phase, seconds in (("build", t1 - t0), ("optimize", t2 - t1), ("run", t3 - t2)):
                times[variant][phase].append(seconds)
            print(f"[bench wide] rep {rep + 1}/{reps} constraint propagation {variant:3s}: build {t1 - t0:.1f} s, "
                  f"optimize {t2 - t1:.1f} s, run {t3 - t2:.1f} s", flush=True)
    decoded.unpersist()
    spark.conf.set(SETTING, "false")
    split = _split_vs_window(spark, columns, versions, split_rows, reps)
    spark.conf.unset(SETTING)
    total = {v: [sum(p) for p in zip(*times[v].values())] for v in times}
    out = {"wide": {
        "columns": columns, "versions": versions, "rows": rows, "reps": reps,
        "seconds": {v: {phase: _spread(s) for phase, s in times[v].items()} for v in times},
        "constraint_propagation_on_vs_off": _spread([a / b for a, b in zip(total["on"], total["off"])]),
        "collapse": split,
    }}
    if write:
        merge_results(out)
    w = out["wide"]
    print(f"\nwide table ({columns} columns, {versions} versions): MERGE source build + optimize + run, "
          f"median of {reps}:")
    for v in ("on", "off"):
        print(f"  constraint propagation {v:3s}: " + ", ".join(
            f"{phase} {w['seconds'][v][phase]['median']:.1f} s" for phase in ("build", "optimize", "run")))
    print(f"  on / off: {w['constraint_propagation_on_vs_off']}")
    c = w["collapse"]
    print(f"collapse of {split_rows} rows: window {c['seconds']['window']['median']:.1f} s, split "
          f"{c['seconds']['split']['median']:.1f} s; split / window {c['split_vs_window']}")
    return out


def _split_vs_window(spark, columns: int, versions: int, rows: int, reps: int) -> dict:
    from cdc_apply.delta.merge import collapse, key_events, project

    work, decoded = _work_and_rows(spark, columns, versions, rows, distinct_keys=rows * 9 // 10)
    decoded.count()
    seconds: dict[str, list[float]] = {"window": [], "split": []}
    for rep in range(reps):
        for variant in (("window", "split") if rep % 2 == 0 else ("split", "window")):
            started = time.perf_counter()
            events = key_events(project(decoded, work), work)
            collapse(events, work, True, split=variant == "split").localCheckpoint().count()
            seconds[variant].append(time.perf_counter() - started)
            print(f"[bench wide] rep {rep + 1}/{reps} collapse {variant:6s}: {seconds[variant][-1]:.1f} s", flush=True)
    decoded.unpersist()
    return {"rows": rows, "seconds": {v: _spread(s) for v, s in seconds.items()},
            "split_vs_window": _spread([a / b for a, b in zip(seconds["split"], seconds["window"])])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=120)
    parser.add_argument("--versions", type=int, default=40)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--split-rows", type=int, default=100_000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    run(args.columns, args.versions, args.rows, args.reps, args.split_rows, write=not args.no_write)


if __name__ == "__main__":
    main()
