"""Small batches, by shape: a job's batch of 1,000 changes over ten tables, an insert-only batch against
a plain append of the same rows, and a batch of recent keys against one of random keys.

Each repetition is one child process (its own JVM: ``python -m bench.small_batch --child``) running
one apply job over a bronze table built with ``StreamBuilder``: a base batch (2,000 rows per table),
three warm-up batches of the measured batch's shape (200 changes each), then the measured batches,
each its own micro-batch of the same running job. ``--previous REV`` runs
the same children on another commit of cdc_apply, interleaved with the current code:
``small_batch_vs_previous`` is current / previous, same run, same machine. That commit is checked out
into bench/work/previous, and its children import its ``cdc_apply`` through PYTHONPATH (a folder
holding only a link to that checkout's package, so ``bench`` still comes from this checkout: the
previous commit may have no bench.small_batch, or another one).

    .venv/bin/python -m bench.small_batch --reps 5 --previous c9068a9

Keys merged into bench/results.json: ``small_batch_seconds``, ``small_batch_vs_previous``,
``insert_only_vs_append``, ``hot_vs_random_keys`` and the details under ``small_batch``.
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

ROOT = Path(__file__).resolve().parents[1]
TABLES = 10
BASE_ROWS = 2_000
CHANGES = 1_000
WARM_CHANGES = 200
WARM_BATCHES = 3
INSERTS = 20_000
HOT_ROWS = 200_000
HOT_CHANGES = 2_000


def _bronze(seed: int, log: dict | None = None):
    """The rows of every measured batch, in landing order: ``[(name, rows)]``. ``log``, when given,
    receives each batch's changes as plain tuples, ``{name: [(table, op, id, a, t)]}`` (the floor's
    input: bench.delta_floor)."""
    from cdc_apply.testing.stream import StreamBuilder

    rng = random.Random(seed)
    b = StreamBuilder("bench")
    rels = [b.relation("public", f"t{k}", [("id", "int4", True), ("a", "int8", False), ("t", "text", False)])
            for k in range(TABLES)]
    hot = b.relation("public", "hot", [("id", "int4", True), ("a", "int8", False), ("t", "text", False)])
    batches, mark, changes = [], 0, []
    names = {**{rel.oid: f"t{k}" for k, rel in enumerate(rels)}, hot.oid: "hot"}

    def note(rel, op, i, a=None, t=None):
        changes.append((names[rel.oid], op, i, a, t))

    def cut(name):
        nonlocal mark
        batches.append((name, b.rows()[mark:]))
        if log is not None:
            log[name] = list(changes)
        changes.clear()
        mark = len(b.rows())

    for rel in rels:
        with b.transaction() as tx:
            for i in range(BASE_ROWS):
                tx.insert(rel, [i, i, f"base {i}"])
                note(rel, "I", i, i, f"base {i}")
    with b.transaction() as tx:
        for i in range(HOT_ROWS):
            tx.insert(hot, [i, i, f"row {i:08d}"])
            note(hot, "I", i, i, f"row {i:08d}")
    cut("base")
    nexts = {rel.oid: BASE_ROWS for rel in rels}
    live = {rel.oid: list(range(BASE_ROWS)) for rel in rels}

    def mixed(transactions: range):  # transactions of 10 changes: 70 % updates, 20 % inserts, 10 % deletes
        for t in transactions:
            with b.transaction() as tx:
                for _ in range(10):
                    rel = rng.choice(rels)
                    ids, roll = live[rel.oid], rng.random()
                    if roll < 0.7:
                        i = rng.choice(ids)
                        tx.update(rel, [i, t, f"update {t}"])
                        note(rel, "U", i, t, f"update {t}")
                    elif roll < 0.9:
                        i = nexts[rel.oid]
                        nexts[rel.oid] += 1
                        ids.append(i)
                        tx.insert(rel, [i, t, f"insert {t}"])
                        note(rel, "I", i, t, f"insert {t}")
                    else:
                        i = ids.pop(rng.randrange(len(ids)))
                        tx.delete(rel, key={"id": i})
                        note(rel, "D", i)

    # Batches of the same shape first: the measured one is then a running job's, not the JVM's first
    # MERGE batch, which compiles and loads what later batches reuse. After one such batch the measured
    # one took 13.6 s, after three 12.0 s, after the floor's ~60 Delta writes as well (--floor) 8.9 s.
    per_warm = WARM_CHANGES // 10
    for k in range(WARM_BATCHES):   # transaction numbers below the measured batch's 0, 1, ...
        first = (k - WARM_BATCHES) * per_warm
        mixed(range(first, first + per_warm))
        cut(f"warm {k}")
    mixed(range(CHANGES // 10))
    cut("changes")
    with b.transaction() as tx:
        for i in range(INSERTS):
            tx.insert(rels[0], [BASE_ROWS * 10 + i, i, f"new {i}"])
            note(rels[0], "I", BASE_ROWS * 10 + i, i, f"new {i}")
    cut("insert_only")
    for name, keys in (("hot", range(HOT_ROWS - HOT_ROWS // 20, HOT_ROWS)), ("random", range(HOT_ROWS))):
        picked = rng.sample(list(keys), HOT_CHANGES)
        with b.transaction() as tx:
            for i in picked:
                tx.update(hot, [i, -i, f"{name} {i}"])
                note(hot, "U", i, -i, f"{name} {i}")
        cut(name)
    return batches


def child(seed: int, floor: int | None = None) -> dict:
    """One job over the batches; returns seconds per batch and the plain-append baseline. With ``floor``
    (the repetition's number) also Delta's own floor (bench.delta_floor) between the job's batches:
    before the batches it mirrors on even repetitions, after them on odd ones."""
    import cdc_apply
    from cdc_apply import spark_session
    from cdc_apply.config import parse_config
    # By the package's own folder, not by an ImportError: the editable install's finder answers a
    # module the previous commit lacks from this checkout, and would mix the two commits' code.
    package = Path(cdc_apply.__file__).parent
    if (package / "delta" / "bronze_schema.py").is_file():
        from cdc_apply.delta.bronze_schema import create_bronze_table
        from cdc_apply.delta.bronze_schema import spark_schema as bronze_schema
        from cdc_apply.lake.pipeline import ApplyPipeline
    elif (package / "lake").is_dir():  # a commit before the shared Delta package (cdc_apply.delta, again)
        from cdc_apply.lake.bronze import bronze_schema, create_bronze_table
        from cdc_apply.lake.pipeline import ApplyPipeline
    else:  # a commit before the lake layer's rename (--previous c9068a9): cdc_apply.delta
        from cdc_apply.delta.bronze import bronze_schema, create_bronze_table
        from cdc_apply.delta.pipeline import ApplyPipeline

    spark = spark_session("cdc_apply-bench-small")
    # Since the engine seam the pipeline and bronze's creation take the engine, which the entry point chooses.
    engine_seam = (package / "delta" / "engine.py").is_file()
    if engine_seam:
        from cdc_apply.delta.engine import spark_tables
    engine = spark_tables(spark) if engine_seam else spark
    root = Path(tempfile.mkdtemp(prefix="small-batch-", dir=os.environ.get("CDC_APPLY_BENCH_TMP")))
    bronze = str(root / "bronze")
    create_bronze_table(engine, bronze)
    log: dict = {}
    batches = _bronze(seed, log)
    for _, rows in batches:
        spark.createDataFrame([(*r, None) for r in rows], bronze_schema()).coalesce(1) \
            .write.format("delta").mode("append").save(bronze)
    config = parse_config({"pipeline": "bench", "bronze": {"path": bronze, "max_files_per_trigger": 1},
                           "silver": {"path": str(root / "silver")}, "state": {"path": str(root / "state")}})
    pipeline = (ApplyPipeline.open(engine, config, out=io.StringIO()) if engine_seam
                else ApplyPipeline(spark, config, out=io.StringIO()))
    floors: dict = {}
    if floor is not None:
        _interleave_floor(spark, pipeline, config, root, [name for name, _ in batches], log, floor, floors)
    pipeline.run(once=True)
    reports = {name: r for (name, _), r in zip(batches, pipeline.reports)}
    out = {name: {"seconds": r.seconds, "phases": r.phases,
                  "tables": {t: s.seconds for t, s in r.tables.items()}} for name, r in reports.items()}
    if floor is not None:
        out["floor"] = floors
        changed = reports["changes"].tables.values()
        out["changes"]["counts"] = {k: sum(getattr(t, k) for t in changed) for k in ("updated", "deleted", "inserted")}
    # The baseline: a plain append of the insert-only batch's rows, typed as silver holds them.
    silver = spark.read.format("delta").load(str(root / "silver" / "public" / "t0"))
    rows = silver.where(f"id >= {BASE_ROWS * 10}")
    rows = spark.createDataFrame(rows.collect(), rows.schema)
    started = time.monotonic()
    rows.coalesce(1).write.format("delta").mode("append").save(str(root / "plain_append"))
    first = time.monotonic() - started
    started = time.monotonic()
    rows.coalesce(1).write.format("delta").mode("append").save(str(root / "plain_append"))
    out["plain_append_seconds"] = time.monotonic() - started  # the second: no table creation in it
    out["plain_append_first_seconds"] = first
    return out


def _interleave_floor(spark, pipeline, config, root: Path, names: list[str], log: dict, rep: int, out: dict):
    """Run Delta's floor (bench.delta_floor) between the job's micro-batches, in the job's session: its
    tables are copied from silver after the last warm-up batch; the ten tables' floor runs before the
    ``changes`` batch on even repetitions and after it on odd ones, the hot/random floor before the
    ``hot`` batch or after the ``random`` one likewise."""
    from bench.delta_floor import Floor

    first = rep % 2 == 0
    process = pipeline.process
    floor = Floor(spark, root / "silver" / "public", root / "floor", [f"t{k}" for k in range(TABLES)], "hot",
                  config.apply.parallelism)

    def small():
        out["small_batch"] = floor.small_batch(log["changes"], rotate=rep)

    def hot_random():
        out["hot_random"] = floor.hot_random(log["hot"], log["random"], rotate=rep)

    after = {f"warm {WARM_BATCHES - 1}": [lambda: out.update(layout=floor.set_up())] + ([small] if first else []),
             "changes": [] if first else [small],
             "insert_only": [hot_random] if first else [],
             "random": [] if first else [hot_random]}

    def process_then_floor(df, batch_id):
        report = process(df, batch_id)
        done = names[len(pipeline.reports) - 1] if pipeline.reports and pipeline.reports[-1] is report else None
        for step in after.get(done, []):
            step()
        return report

    pipeline.process = process_then_floor
    out["order"] = "floor first" if first else "job first"


def _run_child(seed: int, code: Path | None, floor: int | None = None) -> dict:
    """One repetition in its own process: ``python -m bench.small_batch --child``, importing this
    checkout's cdc_apply, or with ``code`` (a folder holding only a ``cdc_apply`` package, see
    :func:`_import_path`) that one's."""
    env = dict(os.environ)
    if code is not None:  # PYTHONPATH's path finder runs before the editable install's finder
        env["PYTHONPATH"] = f"{code}{os.pathsep}{ROOT}"
        env["CDC_APPLY_JARS"] = str(ROOT / ".jars")  # the checkout's own .jars/ is never set up
    # `-m` puts the working directory first on sys.path: this checkout (bench and cdc_apply), or the
    # folder that holds only the previous cdc_apply (bench then comes from ROOT, on PYTHONPATH).
    args = ["--floor-rep", str(floor)] if floor is not None else []
    proc = subprocess.run([sys.executable, "-m", "bench.small_batch", "--child", "--seed", str(seed), *args],
                          capture_output=True, text=True, env=env, cwd=str(code or ROOT))
    if proc.returncode:
        raise RuntimeError(f"bench child failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _checkout(rev: str) -> Path:
    where = ROOT / "bench" / "work" / "previous"
    if not where.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev], check=True,
                       capture_output=True)
    else:
        subprocess.run(["git", "-C", str(where), "checkout", "--detach", rev], check=True, capture_output=True)
    return where


def _import_path(checkout: Path) -> Path:
    """A folder whose only entry is a link to ``checkout``'s cdc_apply package: first on the children's
    sys.path, it gives them that commit's cdc_apply and leaves ``bench`` to this checkout."""
    folder = ROOT / "bench" / "work" / "previous_import"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "cdc_apply"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(checkout / "cdc_apply", target_is_directory=True)
    return folder


def _median(values):
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(reps: int = 3, previous: str | None = None, seed: int = 26, floor: bool = False) -> dict:
    code_previous = _import_path(_checkout(previous)) if previous else None
    current, before, loads = [], [], []
    for rep in range(reps):
        order = [("current", None), ("previous", code_previous)] if previous else [("current", None)]
        for name, code in (order if rep % 2 == 0 else order[::-1]):
            result = _run_child(seed, code, rep if floor and name == "current" else None)
            (current if name == "current" else before).append(result)
            loads.append(round(os.getloadavg()[0], 2))
            print(f"rep {rep} {name}: changes {result['changes']['seconds']:.1f}s, insert-only "
                  f"{result['insert_only']['seconds']:.1f}s (append {result['plain_append_seconds']:.1f}s), "
                  f"hot {result['hot']['seconds']:.1f}s, random {result['random']['seconds']:.1f}s", flush=True)
            if "floor" in result:
                f = result["floor"]
                print(f"rep {rep} floor ({f['order']}): MERGE {f['small_batch']['merge_parallel']['seconds']:.1f}s "
                      f"(rewriting {f['small_batch']['merge_rewrite_parallel']['seconds']:.1f}s, "
                      f"one at a time {f['small_batch']['merge_serial']['seconds']:.1f}s), append "
                      f"{f['small_batch']['append_parallel']['seconds']:.1f}s "
                      f"(one at a time {f['small_batch']['append_serial']['seconds']:.1f}s), hot/random "
                      + ", ".join(f"{v} {t['hot']:.2f}/{t['random']:.2f}s" for v, t in f["hot_random"].items()),
                      flush=True)
    out = {
        "small_batch_seconds": _median(r["changes"]["seconds"] for r in current)["median"],
        "insert_only_vs_append": _median(r["insert_only"]["tables"]["public.t0"] / r["plain_append_seconds"]
                                         for r in current)["median"],
        "hot_vs_random_keys": _median(r["hot"]["tables"]["public.hot"] / r["random"]["tables"]["public.hot"]
                                      for r in current)["median"],
    }
    details = {"reps": reps, "cpu_count": os.cpu_count(), "loadavg_after_each_child": loads, "tables": TABLES, "changes": CHANGES, "inserts": INSERTS,
               "hot_rows": HOT_ROWS, "hot_changes": HOT_CHANGES,
               "current": {k: _median(r[k]["seconds"] for r in current) for k in ("changes", "insert_only", "hot",
                                                                                  "random")},
               "insert_only_table_seconds": _median(r["insert_only"]["tables"]["public.t0"] for r in current),
               "plain_append_seconds": _median(r["plain_append_seconds"] for r in current),
               "changes_phases": current[0]["changes"]["phases"]}
    if previous:
        out["small_batch_vs_previous"] = _median(
            c["changes"]["seconds"] / p["changes"]["seconds"] for c, p in zip(current, before))["median"]
        details["previous"] = {"rev": previous, **{k: _median(r[k]["seconds"] for r in before)
                                                   for k in ("changes", "insert_only", "hot", "random")}}
    if floor:
        out.update(_floor_keys(current))
        details["floor"] = _floor_details(current)
    out["small_batch"] = details
    merge_results(out)
    print(json.dumps({k: v for k, v in out.items() if k != "small_batch"}, indent=2))
    return out


def _floor_keys(current: list[dict]) -> dict:
    """The floor's keys: Delta's own seconds and our batch's against them, per repetition, medians."""
    small = [r["floor"]["small_batch"] for r in current]
    hot = [r["floor"]["hot_random"]["hot_range"] for r in current]
    hot_rewrite = [r["floor"]["hot_random"]["hot_range_rewrite"] for r in current]
    # Delta's MERGE floor is the faster of its two ways to write these changes in each repetition:
    # marking rows in deletion vectors, or rewriting the files touched (what the job does in small tables).
    merge = [min(f["merge_parallel"]["seconds"], f["merge_rewrite_parallel"]["seconds"]) for f in small]
    return {
        "small_batch_delta_merge_floor_seconds": _median(merge)["median"],
        "small_batch_append_floor_seconds": _median(f["append_parallel"]["seconds"] for f in small)["median"],
        "small_batch_vs_delta_merge_floor": _median(r["changes"]["seconds"] / m
                                                    for r, m in zip(current, merge))["median"],
        "small_batch_vs_append_floor": _median(r["changes"]["seconds"] / f["append_parallel"]["seconds"]
                                               for r, f in zip(current, small))["median"],
        "hot_vs_random_delta_floor": _median(h["hot"] / h["random"] for h in hot)["median"],
        "hot_vs_random_delta_rewrite_floor": _median(h["hot"] / h["random"] for h in hot_rewrite)["median"],
    }


def _floor_details(current: list[dict]) -> dict:
    """Medians [min, max] of every floor variant, our figures beside them, and each repetition's."""
    small = [r["floor"]["small_batch"] for r in current]
    hot = [r["floor"]["hot_random"] for r in current]
    variants = ("merge_parallel", "merge_rewrite_parallel", "merge_serial", "append_parallel", "append_serial")
    return {
        "layout": current[0]["floor"]["layout"],
        "rows": small[0]["rows"], "deletes": small[0]["deletes"],
        "merge_counts": small[0]["merge_counts"], "job_counts": current[0]["changes"].get("counts"),
        "small_batch": {v: _median(f[v]["seconds"] for f in small) for v in variants},
        "small_batch_tables_sum": {v: _median(sum(f[v]["tables"].values()) for f in small) for v in variants},
        "ours": {"changes": _median(r["changes"]["seconds"] for r in current),
                 "changes_tables_phase": _median(r["changes"]["phases"]["tables"] for r in current),
                 "hot_table": _median(r["hot"]["tables"]["public.hot"] for r in current),
                 "random_table": _median(r["random"]["tables"]["public.hot"] for r in current)},
        "vs_floor": {
            "changes_vs_merge_serial": _median(r["changes"]["seconds"] / f["merge_serial"]["seconds"]
                                               for r, f in zip(current, small)),
            "tables_phase_vs_merge_parallel": _median(r["changes"]["phases"]["tables"] / f["merge_parallel"]["seconds"]
                                                      for r, f in zip(current, small)),
            "merge_parallel_vs_append_parallel": _median(f["merge_parallel"]["seconds"] / f["append_parallel"]["seconds"]
                                                         for f in small)},
        "hot_random": {v: {"hot": _median(h[v]["hot"] for h in hot), "random": _median(h[v]["random"] for h in hot),
                           "hot_vs_random": _median(h[v]["hot"] / h[v]["random"] for h in hot)}
                       for v in hot[0]},
        "per_rep": [{"order": r["floor"]["order"], "changes": r["changes"]["seconds"],
                     **{v: f[v]["seconds"] for v in variants},
                     "ours_hot_vs_random": r["hot"]["tables"]["public.hot"] / r["random"]["tables"]["public.hot"],
                     **{f"{v}_hot_vs_random": h[v]["hot"] / h[v]["random"] for v in h}}
                    for r, f, h in zip(current, small, hot)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.small_batch", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--previous", help="another commit to measure in the same run (e.g. c9068a9)")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--floor", action="store_true",
                        help="also measure Delta's own floor (bench.delta_floor) in every repetition")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor-rep", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.seed, args.floor_rep), default=str))
        return 0
    run(args.reps, args.previous, args.seed, args.floor)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
