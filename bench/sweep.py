"""Batch-size sweep: apply throughput and per-batch latency from small to very large batches.

    .venv/bin/python -m bench.sweep [--base 1000000] [--changes 1000000]
        [--sizes 1000,10000,100000,1000000] [--reps 3] [--master local[2]] [--tag local2]
        [--variants parallel,nodv,dv,nocdf,serial,serial_nocdf] [--conf spark.key=value ...]

The capture is ``bench/apply.py``'s (same tables, same 70/20/10 mix with key moves and unchanged
TOAST), kept in its own folder (``bench/work/sweep``). The base load is applied once; its lake is
the starting point of every run. For each batch size ``B`` a copy of the base bronze gets the first
``k * B`` change messages appended in commits of ``B`` messages (``k`` = 3 for sizes below 100,000,
else as many as the capture holds, at most 3; a size the capture holds only once — the whole capture —
comes after a batch of ``WARMUP`` messages), and the job reads one commit per micro-batch.

Per size and repetition (sizes interleaved, rotating order) the figures are the per-batch seconds,
change messages (Insert/Update/Delete) per second and seconds per pipeline phase (plan, decode,
tables, logs, progress: :class:`cdc_apply.lake.pipeline.BatchReport`) of the batches after the
first (the first pays the job's start-up). ``parallel`` is the defaults; ``--variants`` adds, at every
size, ``dv`` / ``nodv`` (deletion vectors on / off) and ``nocdf`` (Change Data Feed off) — each
switches the table properties in its copy of the base lake — and ``serial`` at the largest size (one
table at a time, every MERGE timed against a plain append of the same collapsed rows:
``merge_vs_append`` at scale, with Delta's own timings of each MERGE's passes; ``serial_nocdf`` the
same with Change Data Feed off). Delta's MERGE metrics are kept for the largest size per variant.
``--conf`` passes Spark settings to the session.

Results merge into ``bench/results.json`` under ``sweep`` (by ``--tag``). With ``--headline`` the
largest size's median changes/s becomes ``changes_per_second`` and its MERGE/append ratio
``merge_vs_append`` (the sustained figures: a job that keeps up runs batches that large).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
# Before bench.apply is imported: its WORK (the capture folder) is read from this variable.
os.environ.setdefault("CDC_APPLY_BENCH_WORK", str(BENCH / "work" / "sweep"))

from bench.results import merge_results, read_results  # noqa: E402
from bench.apply import (  # noqa: E402
    DELTA_MERGE_TIMES, WORK, MergeTimer, _read, _spread, capture, delta_metrics, lake_config, switch_silver_properties,
    write_bronze,
)

DML = (ord("I"), ord("U"), ord("D"))
WARMUP = 2_000  # messages of the batch before a size that fits the capture only once


def _dml_counts(part: str, commits: list[int]) -> list[int]:
    """Insert/Update/Delete messages in each bronze commit (of ``commits`` messages each)."""
    import numpy as np
    import pyarrow.compute as pc

    table = _read(part).slice(0, sum(commits))
    first = np.frombuffer(pc.binary_slice(table["payload"], 0, 1).combine_chunks().buffers()[2], np.uint8)
    starts = np.cumsum([0, *commits[:-1]])
    return [int(n) for n in np.add.reduceat(np.isin(first, DML).astype(np.int64), starts)]


def _commits(size: int, available: int) -> list[int]:
    """Bronze commits for batches of ``size``: up to three; a size with room for only one batch gets a
    WARMUP-message batch before it, so that it too is measured as a job's second batch (the first
    loads every table's Delta log into the job and compiles its code paths)."""
    k = min(3, available // size)
    return [size] * k if k > 1 else [WARMUP, size - WARMUP]


# Each variant is the defaults with a few settings changed; ``parallel`` is the defaults.
VARIANTS = {"parallel": {}, "serial": {"apply": {"parallelism": 1}},
            "serial_nocdf": {"apply": {"parallelism": 1}, "silver": {"change_data_feed": False}},
            "dv": {"silver": {"deletion_vectors": True}}, "nodv": {"silver": {"deletion_vectors": False}},
            "nocdf": {"silver": {"change_data_feed": False}}}
COMPARED = ("dv", "nodv", "nocdf")  # run at every size and compared with the defaults
SERIAL = ("serial", "serial_nocdf")  # run at the largest size: MERGEs timed against appends


def _run(spark, root: Path, after_base: Path, bronze: Path, variant: str, dml: list[int]) -> dict:
    from cdc_apply.lake.pipeline import ApplyPipeline

    rep_dir = root / f"run_{variant}"
    shutil.rmtree(rep_dir, ignore_errors=True)
    shutil.copytree(after_base, rep_dir)
    config = lake_config(rep_dir, bronze, **VARIANTS[variant])
    switch_silver_properties(spark, config)
    pipeline = ApplyPipeline(spark, config, out=open(os.devnull, "w"))
    # The MERGEs of the batches after the first, like every other figure here.
    timer = MergeTimer(root / "scratch", counting=lambda: bool(pipeline.reports)) if variant in SERIAL else None
    started = time.perf_counter()
    if timer:
        with timer:
            pipeline.run(once=True)
    else:
        pipeline.run(once=True)
    seconds = time.perf_counter() - started
    batches = [r.seconds for r in pipeline.reports]
    if len(batches) != len(dml):
        raise RuntimeError(f"expected {len(dml)} batches, the job ran {len(batches)}")
    out = {"seconds": seconds, "batch_seconds": batches, "dml": dml,
           "rates": [n / s for n, s in zip(dml, batches)], "phases": [r.phases for r in pipeline.reports]}
    if timer:
        out.update(merge_s=timer.merge_s, append_s=timer.append_s, delta_ms=timer.delta_ms)
        shutil.rmtree(root / "scratch", ignore_errors=True)
    if variant not in SERIAL:
        out["delta_metrics"] = {t: delta_metrics(spark, rep_dir / "silver" / "public" / t) for t in ("t0", "t1")}
    shutil.rmtree(rep_dir, ignore_errors=True)
    return out


def _steady(runs: list[dict], key: str) -> list[float]:
    """The batches after each run's first (or the only one, for one-batch runs)."""
    return [v for r in runs for v in (r[key][1:] or r[key])]


def _phases(runs: list[dict]) -> dict[str, float]:
    """Median seconds per pipeline phase over the steady batches (where a batch's time goes)."""
    steady = [p for r in runs for p in (r["phases"][1:] or r["phases"])]
    return {k: round(statistics.median(p.get(k, 0.0) for p in steady), 2) for k in steady[0]} if steady else {}


def _merge_figures(serial: list[dict]) -> dict:
    """MERGE against append for the runs of one serial variant, and Delta's own floor for the MERGE:
    its scan (finding the touched files) plus rewrite passes, against the same append."""
    def floor(r):
        return (r["delta_ms"]["scanTimeMs"] + r["delta_ms"]["rewriteTimeMs"]) / 1000

    return {"merge_vs_append": _spread([r["merge_s"] / r["append_s"] for r in serial]),
            "merge_s": _spread([r["merge_s"] for r in serial]),
            "append_s": _spread([r["append_s"] for r in serial]),
            "delta_scan_rewrite_vs_append": _spread([floor(r) / r["append_s"] for r in serial]),
            "delta_s": {k: _spread([r["delta_ms"][k] / 1000 for r in serial]) for k in DELTA_MERGE_TIMES},
            "serial_changes_per_second": _spread(_steady(serial, "rates"), 0)}


def run(base: int, changes: int, sizes: list[int], reps: int, tag: str, headline: bool, master: str,
        variants: tuple[str, ...] = ("parallel", "nodv", "serial"), conf: dict[str, str] | None = None) -> dict:
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.spark import spark_session

    meta = capture(base, changes, 0)
    available = meta["parts"]["changes"]["messages"]
    sizes = sorted({min(s, available) for s in sizes})  # "1,000,000" is every change the capture has
    print(f"[bench sweep] capture: {json.dumps(meta['parts'])}", flush=True)
    spark = spark_session("cdc_apply-bench-sweep", **{"spark.master": master, **(conf or {})})
    root = WORK / f"lake_{tag}"
    shutil.rmtree(root, ignore_errors=True)
    base_bronze = root / "bronze_base"
    ranges = write_bronze(spark, base_bronze, ["base"])
    after_base = root / "after_base"
    started = time.perf_counter()
    ApplyPipeline(spark, lake_config(after_base, base_bronze, bronze={"max_files_per_trigger": 1000}),
                  out=open(os.devnull, "w")).run(once=True)
    base_s = time.perf_counter() - started
    print(f"[bench sweep] base load: {meta['parts']['base']['messages']} messages in {base_s:.1f} s", flush=True)
    plan = {}
    for size in sizes:
        commits = _commits(size, available)
        bronze = root / f"bronze_{size}"
        shutil.copytree(base_bronze, bronze)  # same table: the base lake's stream checkpoint goes on here
        write_bronze(spark, bronze, ["changes"], first_seq=ranges["base"][1] + 1, commit_sizes=commits)
        plan[size] = (bronze, _dml_counts("changes", commits))
    largest = max(sizes)
    if "parallel" not in variants:
        raise SystemExit("--variants must include parallel (the figures are its)")
    jobs = [(s, v) for s in sizes for v in ("parallel", *COMPARED) if v in variants]
    jobs += [(largest, v) for v in SERIAL if v in variants]
    results: dict[tuple[int, str], list[dict]] = {j: [] for j in jobs}
    for rep in range(reps):
        order = jobs[rep % len(jobs):] + jobs[:rep % len(jobs)]
        for size, variant in order:
            bronze, dml = plan[size]
            r = _run(spark, root, after_base, bronze, variant, dml)
            results[(size, variant)].append(r)
            print(f"[bench sweep] rep {rep + 1}/{reps} {size:>9,} x{len(dml)} {variant:12s}: "
                  f"batches {', '.join(f'{s:.1f}' for s in r['batch_seconds'])} s, "
                  f"{', '.join(f'{x:,.0f}' for x in r['rates'])} changes/s"
                  + (f", merge {r['merge_s']:.1f} s vs append {r['append_s']:.1f} s" if variant in SERIAL else ""),
                  flush=True)
    per_size = {}
    for size in sizes:
        runs = results[(size, "parallel")]
        per_size[str(size)] = {"batches_per_run": len(runs[0]["dml"]),
                               "changes_per_second": _spread(_steady(runs, "rates"), 0),
                               "batch_seconds": _spread(_steady(runs, "batch_seconds")),
                               "first_batch_seconds": _spread([r["batch_seconds"][0] for r in runs]),
                               "phase_seconds": _phases(runs)}
        per_size[str(size)]["variants"] = {
            v: {"changes_per_second": _spread(_steady(other, "rates"), 0),
                "batch_seconds": _spread(_steady(other, "batch_seconds")), "phase_seconds": _phases(other),
                "time_vs_defaults": _spread([a["seconds"] / b["seconds"] for a, b in zip(other, runs)])}
            for v in COMPARED if (other := results.get((size, v)))}
    serial = results.get((largest, "serial"), [])
    out_sweep = {
        "master": master, "conf": conf or {}, "base": meta["parts"]["base"], "changes": meta["parts"]["changes"],
        "base_load_s": round(base_s, 1), "reps": reps, "sizes": per_size,
        "largest": {
            "size": largest,
            **(_merge_figures(serial) if serial else {}),
            **({"no_cdf": _merge_figures(no_cdf)} if (no_cdf := results.get((largest, "serial_nocdf"))) else {}),
            "delta_metrics": {v: results[(largest, v)][-1]["delta_metrics"] for v in ("parallel", *COMPARED)
                              if results.get((largest, v))},
        },
        "cpu_count": os.cpu_count(), "loadavg": os.getloadavg(),
    }
    update = {"sweep": {**read_results().get("sweep", {}), tag: out_sweep}}
    if headline:
        if not serial:
            raise SystemExit("--headline needs the serial variant (merge_vs_append)")
        update["changes_per_second"] = per_size[str(largest)]["changes_per_second"]["median"]
        update["merge_vs_append"] = out_sweep["largest"]["merge_vs_append"]["median"]
        # Delta's own passes of the same MERGEs against the same appends: how far below merge_vs_append
        # any change on our side of the MERGE call could take it.
        update["merge_floor_vs_append"] = out_sweep["largest"]["delta_scan_rewrite_vs_append"]["median"]
    merge_results(update)
    print_table(out_sweep)
    shutil.rmtree(root, ignore_errors=True)
    return out_sweep


def print_table(s: dict) -> None:
    print(f"\nbatch-size sweep ({s['master']}, median [min-max] of the batches after the first, "
          f"{s['reps']} interleaved repetitions)")
    print(f"  {'changes/batch':>13s} {'changes/s':>22s} {'s/batch':>20s}   phases (s)")
    for size, v in s["sizes"].items():
        c, b = v["changes_per_second"], v["batch_seconds"]
        print(f"  {int(size):>13,} {c['median']:>10,.0f} [{c['min']:,.0f}-{c['max']:,.0f}] "
              f"{b['median']:>7.1f} [{b['min']:.1f}-{b['max']:.1f}]   "
              + ", ".join(f"{k} {x}" for k, x in v["phase_seconds"].items()))
        for name, o in v.get("variants", {}).items():
            print(f"  {name:>13s} {o['changes_per_second']['median']:>10,.0f} {'':>11s} {o['batch_seconds']['median']:>7.1f} "
                  f"{'':>12s}   time vs defaults {o['time_vs_defaults']['median']}; "
                  + ", ".join(f"{k} {x}" for k, x in o["phase_seconds"].items()))
    g = s["largest"]
    for name, m in (("", g), (" (Change Data Feed off)", g.get("no_cdf", {}))):
        if "merge_vs_append" in m:
            print(f"  largest{name}: MERGE/append {m['merge_vs_append']}, Delta's scan + rewrite passes/append "
                  f"{m['delta_scan_rewrite_vs_append']}, serial changes/s {m['serial_changes_per_second']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--tag", default=None, help="key under results.json's sweep (default: the master)")
    parser.add_argument("--headline", action="store_true",
                        help="the largest size's figures become changes_per_second and merge_vs_append")
    parser.add_argument("--variants", default="parallel,nodv,serial",
                        help="parallel (the defaults), dv / nodv (deletion vectors on / off), nocdf (Change Data Feed off), "
                             "serial (one table at a time, MERGE timed against an append), serial_nocdf (the same "
                             "with Change Data Feed off)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the benchmark's session (repeatable)")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    tag = args.tag or args.master.replace("[", "").replace("]", "")
    run(args.base, args.changes, sizes, args.reps, tag, args.headline, args.master,
        tuple(v for v in args.variants.split(",") if v), dict(c.split("=", 1) for c in args.conf))


if __name__ == "__main__":
    main()
