"""The naive design — one MERGE per source transaction — against our batches, on a sample.

    .venv/bin/python -m bench.naive [--transactions 8] [--reps 5]

The sample is the first ``--transactions`` change transactions of ``bench/apply.py``'s capture
(PostgreSQL 18, ten tables, ~60 rows per transaction: updates, inserts, deletes, key moves,
unchanged TOAST), applied on top of its base load. Each repetition starts from a copy of the
after-base lake and applies the sample twice, interleaved in a rotating order:

* ``per_txn`` - bronze holds one commit per transaction and the job reads one commit per
  micro-batch: every transaction is its own batch, one MERGE per table it touches — what an
  applier that MERGEs each source transaction does. (Ours still writes its transactions log and
  progress per batch; such an applier must record how far it got too.)
* ``batched`` - the same messages in one bronze commit: one batch, one MERGE per table.

``naive_vs_batched`` is per_txn time / batched time (median of the repetitions, with the spread),
and each variant's change messages (Insert/Update/Delete) per second. Results merge into
``bench/results.json`` (``naive_vs_batched`` and ``naive``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time

from bench.apply import WORK, _read, _spread, apply_once, capture, lake_config, write_bronze
from bench.results import merge_results

VARIANTS = ("per_txn", "batched")


def sample_commits(transactions: int) -> tuple[list[int], int]:
    """Message counts of the capture's first ``transactions`` transactions (Begin to Commit each), and
    the Insert/Update/Delete messages among them."""
    payloads = _read("changes")["payload"].to_pylist()
    sizes, start, changes = [], 0, 0
    for i, payload in enumerate(payloads):
        changes += payload[:1] in (b"I", b"U", b"D")
        if payload[:1] == b"C":
            sizes.append(i + 1 - start)
            start = i + 1
            if len(sizes) == transactions:
                return sizes, changes
    raise SystemExit(f"the capture has only {len(sizes)} transactions")


def run(transactions: int = 8, reps: int = 5, write: bool = True) -> dict:
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.spark import spark_session

    capture(100_000, 50_000, 128)   # bench/apply.py's capture (cached)
    sizes, changes = sample_commits(transactions)
    spark = spark_session("cdc_apply-bench-naive")
    lake = WORK / "naive"
    shutil.rmtree(lake, ignore_errors=True)
    bronze = {v: lake / f"bronze_{v}" for v in VARIANTS}
    ranges = write_bronze(spark, bronze["per_txn"], ["base"])
    after_base = lake / "after_base"
    started = time.perf_counter()
    cfg = lake_config(after_base, bronze["per_txn"], bronze={"max_files_per_trigger": 1000})
    ApplyPipeline.open(spark_tables(spark), cfg, out=open("/dev/null", "w")).run(once=True)
    print(f"[bench naive] base load in {time.perf_counter() - started:.1f} s", flush=True)
    # A copy of bronze is the same Delta table (same id), so the after-base lake's stream goes on from either.
    shutil.copytree(bronze["per_txn"], bronze["batched"])
    next_seq = ranges["base"][1] + 1
    write_bronze(spark, bronze["per_txn"], ["changes"], first_seq=next_seq, commit_sizes=sizes)
    write_bronze(spark, bronze["batched"], ["changes"], first_seq=next_seq, commit_sizes=[sum(sizes)])

    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    batches: dict[str, int] = {}
    for rep in range(reps):
        for variant in (VARIANTS if rep % 2 == 0 else VARIANTS[::-1]):
            r = apply_once(spark, lake / f"rep_{variant}", after_base, bronze[variant], "parallel", lake / "scratch")
            seconds[variant].append(r["seconds"])
            batches[variant] = r["batches"]
            print(f"[bench naive] rep {rep + 1}/{reps} {variant:8s}: {r['seconds']:.1f} s, {r['batches']} batches",
                  flush=True)
    ratio = [a / b for a, b in zip(seconds["per_txn"], seconds["batched"])]
    out = {
        "naive_vs_batched": round(statistics.median(ratio), 2),
        "naive": {
            "transactions": transactions, "change_messages": changes, "reps": reps,
            "naive_vs_batched": _spread(ratio),
            "seconds": {v: _spread(s) for v, s in seconds.items()},
            "changes_per_second": {v: _spread([changes / x for x in s], 0) for v, s in seconds.items()},
            "batches": batches,
        },
    }
    if write:
        merge_results(out)
    n = out["naive"]
    print(f"\nnaive (one batch per transaction) vs batched, {transactions} transactions, {changes} changes, "
          f"{reps} interleaved repetitions:")
    for v in VARIANTS:
        print(f"  {v:8s} {n['seconds'][v]['median']:8.1f} s  {n['changes_per_second'][v]['median']:8,.0f} changes/s")
    print(f"  per_txn / batched time: {n['naive_vs_batched']}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.naive", description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=8)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    run(args.transactions, args.reps, write=not args.no_write)


if __name__ == "__main__":
    main()
