"""A wide table's MERGE source: what Catalyst's constraint propagation costs, measured in one run.

    .venv/bin/python -m bench.wide [--columns 120] [--versions 40] [--rows 2000] [--reps 5]

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
Results merge into ``bench/results.json`` under ``wide``.
"""

from __future__ import annotations

import argparse
import time

from bench.apply import _spread
from bench.results import merge_results

SETTING = "spark.sql.constraintPropagation.enabled"


def _work_and_rows(spark, columns: int, versions: int, rows: int):
    from pyspark.sql import functions as F

    from cdc_apply.planning.tables import SilverColumn
    from cdc_apply.planning.table_plan import SlotMap, TableWork
    from cdc_apply.delta.refs import TableRef

    decoded = spark.range(rows).select(
        F.col("id").alias("seq"), F.col("id").alias("commit_lsn"), F.current_timestamp().alias("commit_ts"),
        F.col("id").alias("xid"), F.lit(None).cast("string").alias("origin"),
        F.lit(None).cast("string").alias("user"), F.lit("U").alias("op"), F.lit("K").alias("old_kind"),
        F.array(F.lit(1)).alias("toast"), (F.col("id") % versions).cast("int").alias("slot"),
        *[F.col("id").cast("int").alias(f"{side}_{p}") for side in ("new", "old") for p in range(columns)])
    slots = []
    for v in range(versions):
        mapping = tuple(i for i in range(columns) if i != v)
        slots.append(SlotMap(v, mapping, tuple("INT" for _ in mapping), mapping))
    work = TableWork("bench", 1, "public.wide", TableRef(path="/nonexistent"),
                     tuple(SilverColumn(f"c{i}", "INT", i) for i in range(columns)), ("c0",), tuple(slots), None,
                     (("_commit_lsn", "_commit_lsn"),))
    return work, decoded.cache()


def run(columns: int = 120, versions: int = 40, rows: int = 2000, reps: int = 5, write: bool = True) -> dict:
    from cdc_apply.lake.silver.collapse import collapse, key_events
    from cdc_apply.lake.silver.merge import project
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
    spark.conf.unset(SETTING)
    total = {v: [sum(p) for p in zip(*times[v].values())] for v in times}
    out = {"wide": {
        "columns": columns, "versions": versions, "rows": rows, "reps": reps,
        "seconds": {v: {phase: _spread(s) for phase, s in times[v].items()} for v in times},
        "constraint_propagation_on_vs_off": _spread([a / b for a, b in zip(total["on"], total["off"])]),
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
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wide", description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=120)
    parser.add_argument("--versions", type=int, default=40)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    run(args.columns, args.versions, args.rows, args.reps, write=not args.no_write)


if __name__ == "__main__":
    main()
