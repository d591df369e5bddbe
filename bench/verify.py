"""``cdc-apply verify`` of a large table against the floor of reading both sides once.

An embedded PostgreSQL 18 holds one table of ``--rows`` rows (bigint key, int, text, timestamptz, numeric),
landed by the lander's initial snapshot and applied to silver. Then, interleaved (``--rounds`` times, the
best of each kept), in the same process:

* **the two sides' floors** — one query hashing every row in PostgreSQL with verify's canonical text (no
  ranges; the least the source's side of this design costs) and one Spark scan of the silver table that
  reads every column (a sum of ``hash(*)``; a bare ``count()`` would answer from Delta's statistics), each
  alone: verify reads both sides at once, so its floor is the slower of the two.
* **the canonical floor** — one Spark query summing every silver row's hash with verify's own canonical
  text and MD5 (no ranges, no keys, no wait): what silver's side of this design costs at the least.
  Building each row's text as PostgreSQL writes it is most of a verify's Spark time, so against this floor
  the wait for the apply job and the run's own overhead show.
* **both at once** — PostgreSQL's hashing and the canonical floor run at the same time, as verify reads its
  two sides: on a host whose cores serve both (this one: PostgreSQL's parallel workers and Spark's tasks on
  two cores) the least those two reads cost together.
* **verify** — :func:`cdc_apply.verify` of the table (ranges of ``--range-rows``), with an apply job
  applying in a thread meanwhile (verify waits for it to pass the source's point); its phases' seconds.

    .venv/bin/python -m bench.verify --rows 10000000

Keys merged into bench/results.json: ``verify_rows_per_second`` (rows / verify seconds),
``verify_vs_floor`` (verify seconds / the slower side's floor, best of the rounds each),
``verify_vs_canonical_floor`` (verify seconds / the slower of PostgreSQL's hashing and the canonical floor),
``verify_vs_both_at_once_floor`` (verify seconds / both at once) and the details under ``verify`` (with
each round's wait for the apply job: the bench's apply thread lands and applies in a loop, so a verify
waits up to two of its rounds for the marker past the point).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import threading
import time
from pathlib import Path

from bench.pipeline_toml import pipeline_toml  # the same pipeline: one source, the initial snapshot
from bench.results import measured_at, merge_results
from cdc_apply.verification.encoding import NotCompared

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("CDC_APPLY_BENCH_WORK", ROOT / "bench" / "work")) / "verify"



def _load(pg, rows: int) -> None:
    pg.create_database("bench")
    pg.execute("CREATE TABLE big (id bigint PRIMARY KEY, a int, t text, at timestamptz, amount numeric(12,2))",
               dbname="bench")
    step = 1_000_000
    for low in range(1, rows + 1, step):
        high = min(rows, low + step - 1)
        pg.execute("INSERT INTO big SELECT g, (g * 7) % 100000, 'row ' || md5(g::text), "
                   "'2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second', g / 100.0 "
                   f"FROM generate_series({low}, {high}) g", dbname="bench")
    pg.execute("VACUUM ANALYZE big", dbname="bench")
    pg.execute("CREATE PUBLICATION bench_pub FOR TABLE big", dbname="bench")


def _scan(spark, silver_path: str) -> float:
    """One Spark scan of silver reading every column: the least silver's side reads."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    frame = spark.read.format("delta").load(silver_path)
    frame.select(F.sum(F.hash(*frame.columns).cast("long"))).first()
    return time.monotonic() - started


def _canonical_floor(spark, config, silver_path: str, columns) -> float:
    """One Spark query summing every silver row's hash with verify's encoding (``columns``: those
    :func:`_hash_floor` hashed): the least silver's side costs."""
    from cdc_apply.lake.silver.soft_deletes import live_rows
    from cdc_apply.verification.encoding import spark_row_hash
    from cdc_apply.verification.silver import HASH, total, with_value_texts

    frame = live_rows(spark.read.format("delta").load(silver_path), config.silver.metadata_prefix)
    frame, columns = with_value_texts(frame, columns)   # as verify's own silver side computes them
    started = time.monotonic()
    total(frame.selectExpr(f"{spark_row_hash(columns)} AS {HASH}"))
    return time.monotonic() - started


def _hash_floor(spark, config, silver_path: str, start: threading.Barrier | None = None) -> tuple[float, list]:
    """One PostgreSQL query hashing every row with verify's own encoding (no ranges, no Spark side): what the
    source's side costs at the least, one session. Returns its seconds and the columns' encodings. ``start``:
    the query waits there once its session is open (the snapshot, the table's shape), for the other side."""
    from cdc_apply.lander.dsn import resolve_dsn
    from cdc_apply.verification.encoding import encode_column
    from cdc_apply.verification.silver import silver_columns
    from cdc_apply.verification.source import SourceSnapshot

    types = silver_columns(spark.read.format("delta").load(silver_path), config.silver.metadata_prefix)
    with SourceSnapshot(resolve_dsn(config.source)) as snap:
        snap.open()
        shape = snap.table("public", "big")
        assert shape is not None
        columns = [e for e in (encode_column(c.name, c.type, types[c.name]) for c in shape.columns)
                   if not isinstance(e, NotCompared)]
        if start is not None:
            start.wait()
        started = time.monotonic()
        snap.range_sums(shape, columns, "TRUE", [])
        return time.monotonic() - started, columns


def _both_at_once(spark, config, silver_path: str, columns) -> float:
    """PostgreSQL's hashing (in a thread) and the canonical floor at the same time: seconds from the moment the
    source's session is open until both end."""
    start = threading.Barrier(2)
    source = threading.Thread(target=_hash_floor, args=(spark, config, silver_path, start))
    source.start()
    start.wait()
    started = time.monotonic()
    _canonical_floor(spark, config, silver_path, columns)
    source.join()
    return time.monotonic() - started


def run(rows: int, range_rows: int, rounds: int, keep: bool) -> dict:
    from cdc_apply.testing.postgres import start_postgres

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    pg = start_postgres(WORK / "pg" / "data", max_wal_size="4GB", shared_buffers="512MB")
    try:
        started = time.monotonic()
        _load(pg, rows)
        print(f"loaded {rows:,} rows in {time.monotonic() - started:.0f} s", flush=True)

        from cdc_apply.api import apply, land, verify
        from cdc_apply.config import load_config
        from cdc_apply.delta.refs import silver_ref
        from cdc_apply.spark import spark_session

        toml = WORK / "bench.toml"
        toml.write_text(pipeline_toml("bench_verify", WORK, pg.dsn("bench"), snapshot_workers=2))
        config = load_config(toml)
        spark = spark_session("cdc_apply-bench-verify")
        log = io.StringIO()
        started = time.monotonic()
        land(config, spark=spark, once=True, out=log)
        apply(spark, config, once=True, out=log)
        print(f"landed and applied in {time.monotonic() - started:.0f} s", flush=True)
        silver_path = silver_ref(config, "public", "big").path
        assert silver_path is not None   # a path-based silver location (the pipeline file above)

        stop = threading.Event()

        def keep_applying():   # the apply job verify waits for: it must pass the source's point
            while not stop.is_set():
                land(config, spark=spark, once=True, out=io.StringIO())
                apply(spark, config, once=True, out=io.StringIO())
                stop.wait(0.5)

        applier = threading.Thread(target=keep_applying, daemon=True)
        applier.start()
        hashes: list[float] = []
        scans: list[float] = []
        canonicals: list[float] = []
        together: list[float] = []
        verifies: list[float] = []
        waits: list[float] = []
        last, phases = None, {}
        try:
            for round_ in range(rounds):
                seconds, columns = _hash_floor(spark, config, silver_path)
                hashes.append(seconds)
                scans.append(_scan(spark, silver_path))
                canonicals.append(_canonical_floor(spark, config, silver_path, columns))
                together.append(_both_at_once(spark, config, silver_path, columns))
                started = time.monotonic()
                last = verify(spark, config, range_rows=range_rows, wait_seconds=600, record=False)
                verifies.append(time.monotonic() - started)
                waits.append(last.phases.get("wait", 0.0))
                if verifies[-1] == min(verifies):
                    phases = last.phases
                print(f"round {round_ + 1}: PostgreSQL hashing every row {hashes[-1]:.1f} s, Spark scan "
                      f"{scans[-1]:.1f} s, Spark hashing every row {canonicals[-1]:.1f} s, both at once "
                      f"{together[-1]:.1f} s, verify "
                      f"{verifies[-1]:.1f} s {last.phases}", flush=True)
                print("\n".join(last.lines()), flush=True)
        finally:
            stop.set()
            applier.join()
        assert last is not None
        assert last.exit_code == 0, last.lines()
        floor, seconds = max(min(hashes), min(scans)), min(verifies)
        canonical = max(min(hashes), min(canonicals))
        details = {
            "measured_at": measured_at(),
            "rows": rows, "range_rows": range_rows, "rounds": rounds, "ranges": last.tables[0].ranges,
            "source_hash_seconds": [round(s, 2) for s in hashes], "scan_seconds": [round(s, 2) for s in scans],
            "canonical_hash_seconds": [round(s, 2) for s in canonicals],
            "both_at_once_seconds": [round(s, 2) for s in together], "wait_seconds": [round(s, 2) for s in waits],
            "floor_seconds": round(floor, 2), "verify_seconds": [round(s, 2) for s in verifies],
            "verify_phases": phases, "lines": last.lines(),
        }
        out = {"verify_rows_per_second": round(rows / seconds), "verify_vs_floor": round(seconds / floor, 2),
               "verify_vs_canonical_floor": round(seconds / canonical, 2),
               "verify_vs_both_at_once_floor": round(seconds / min(together), 2), "verify": details}
        merge_results(out)
        print(json.dumps(out, indent=2))
        return out
    finally:
        pg.destroy()
        if not keep:
            shutil.rmtree(WORK, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the table (default 10,000,000)")
    parser.add_argument("--range-rows", type=int, default=100_000, help="rows per compared range (default 100,000)")
    parser.add_argument("--rounds", type=int, default=2, help="floor and verify runs, interleaved (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep bench/work/verify (server, bronze, silver)")
    args = parser.parse_args(argv)
    run(args.rows, args.range_rows, args.rounds, args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
