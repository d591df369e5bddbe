"""The apply job over Spark Connect against the same job on a classic session: small batches.

Each mode runs in a child process of its own (``python -m bench.connect --child classic|connect``): a
classic ``local[2]`` session, or ``SPARK_REMOTE=local[2]`` through ``cdc_apply.spark_session()`` (a local
Connect server with Delta in the child's process). Both build the same bronze with ``StreamBuilder``
(ten tables of ``BASE_ROWS`` rows, then batches of ``CHANGES`` changes: 70 % updates, 20 % inserts,
10 % deletes), append it one batch at a time and apply each with ``pipeline.run(once=True)``: the first
``WARM`` batches warm the job up, the rest are measured (the batch's own seconds, as its report says).

    .venv/bin/python -m bench.connect --measured 2

Key merged into bench/results.json: ``connect_vs_classic`` (median Connect batch seconds / median
classic batch seconds, same run), the details under ``connect``. The ~1M-change batch is not run here.
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
from pathlib import Path

from bench.results import merge_results

ROOT = Path(__file__).resolve().parents[1]
TABLES = 10
BASE_ROWS = 1_000
CHANGES = 1_000
WARM = 2


def build_batches(seed: int, measured: int) -> list[list[tuple]]:
    """Bronze rows of each batch in landing order: the base rows, ``WARM`` warm-up and ``measured`` batches."""
    from cdc_apply.testing.stream import StreamBuilder

    rng = random.Random(seed)
    b = StreamBuilder("bench")
    rels = [b.relation("public", f"t{k}", [("id", "int4", True), ("a", "int8", False), ("t", "text", False)])
            for k in range(TABLES)]
    batches, mark = [], 0

    def cut():
        nonlocal mark
        batches.append(b.rows()[mark:])
        mark = len(b.rows())

    for rel in rels:
        with b.transaction() as tx:
            for i in range(BASE_ROWS):
                tx.insert(rel, [i, i, f"base {i}"])
    cut()
    nexts = {rel.oid: BASE_ROWS for rel in rels}
    live = {rel.oid: list(range(BASE_ROWS)) for rel in rels}
    for batch in range(WARM + measured):
        for t in range(CHANGES // 10):
            n = batch * CHANGES + t
            with b.transaction() as tx:
                for _ in range(10):
                    rel = rng.choice(rels)
                    ids, roll = live[rel.oid], rng.random()
                    if roll < 0.7:
                        tx.update(rel, [rng.choice(ids), n, f"update {n}"])
                    elif roll < 0.9:
                        ids.append(nexts[rel.oid])
                        tx.insert(rel, [nexts[rel.oid], n, f"insert {n}"])
                        nexts[rel.oid] += 1
                    else:
                        tx.delete(rel, key={"id": ids.pop(rng.randrange(len(ids)))})
        cut()
    return batches


def child(mode: str, seed: int, measured: int) -> dict:
    """Apply every batch in ``mode``'s session; the measured batches' seconds."""
    if mode == "connect":
        os.environ["SPARK_REMOTE"] = "local[2]"
    import cdc_apply
    from cdc_apply.config import parse_config
    from cdc_apply.delta.bronze_schema import spark_schema
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline

    spark = cdc_apply.spark_session(f"cdc_apply-bench-{mode}")
    root = Path(tempfile.mkdtemp(prefix=f"connect-bench-{mode}-", dir=os.environ.get("CDC_APPLY_BENCH_TMP")))
    bronze = str(root / "bronze")
    config = parse_config({"pipeline": "bench", "bronze": {"path": bronze},
                           "silver": {"path": str(root / "silver")}, "state": {"path": str(root / "state")}})
    pipeline, seconds = None, []
    for k, rows in enumerate(build_batches(seed, measured)):
        spark.createDataFrame([(*r, None) for r in rows], spark_schema()).coalesce(1) \
            .write.format("delta").mode("append").save(bronze)
        pipeline = pipeline or ApplyPipeline.open(spark_tables(spark), config, out=io.StringIO())   # once bronze exists
        before = len(pipeline.reports)
        pipeline.run(once=True)
        if k > WARM:   # batch 0 is the base rows, then the warm-up batches
            seconds.extend(r.seconds for r in pipeline.reports[before:])
    return {"mode": mode, "spark": spark.version, "seconds": seconds}


def _run_child(mode: str, seed: int, measured: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    env.setdefault("PYSPARK_PYTHON", sys.executable)   # the Connect server's Python workers
    proc = subprocess.run([sys.executable, "-m", "bench.connect", "--child", mode, "--seed", str(seed),
                           "--measured", str(measured)], capture_output=True, text=True, env=env, cwd=str(ROOT))
    if proc.returncode:
        raise RuntimeError(f"bench child ({mode}) failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(measured: int = 2, seed: int = 41) -> dict:
    results = {mode: _run_child(mode, seed, measured) for mode in ("classic", "connect")}
    medians = {mode: statistics.median(r["seconds"]) for mode, r in results.items()}
    out = {"connect_vs_classic": medians["connect"] / medians["classic"],
           "connect": {"shape": f"{TABLES} tables x {BASE_ROWS} rows, batches of {CHANGES} changes, "
                                f"{WARM} warm-up, {measured} measured, local[2]",
                       "cpu_count": os.cpu_count(), "loadavg": round(os.getloadavg()[0], 2),
                       **{f"{mode}_seconds": r["seconds"] for mode, r in results.items()},
                       **{f"{mode}_median_seconds": m for mode, m in medians.items()}}}
    merge_results(out)
    print(json.dumps(out, indent=2))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=("classic", "connect"))
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--measured", type=int, default=2)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.seed, args.measured)))
    else:
        run(args.measured, args.seed)


if __name__ == "__main__":
    main()
