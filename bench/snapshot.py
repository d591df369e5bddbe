"""A snapshot of an existing table, end to end, against the floor of copying the same rows into Parquet.

An embedded PostgreSQL 18 holds one table of ``--rows`` rows (bigint key, int, double, text,
timestamptz; ~70 bytes a row) before any slot exists. Measured in the same run, on the same server:

* **snapshot** — the lander creates the slot with an exported snapshot (``source.snapshot =
  "initial"``, ``--workers`` copy sessions, binary COPY in ranges of blocks) and lands the table into
  bronze as a snapshot stream (``land``), then the apply job writes it into the empty silver table
  (``apply``): PostgreSQL → silver.
* **floor** — the same rows by binary COPY over the same number of sessions and the same block
  ranges, each range's fields cut out with numpy into typed Arrow columns and written as a Parquet
  file with pyarrow: the least any copy into a lake file has to do.
* **Delta append floor** — those Parquet files read by Spark and appended to a new Delta table: the
  least one Delta write of the rows through Spark costs on this machine (a snapshot writes two: bronze,
  then silver).

* **bronze transfer floor** — after the run, bronze's Insert rows read by Spark and handed through an
  identity ``mapInArrow`` (to a Python worker and back, written nowhere): what any decode of bronze in
  Python costs before it decodes a byte. With the two floors above it makes the floor of this design's
  second hop (bronze → silver): ``snapshot_vs_two_hop_floor``.

The JVM is warmed up first (a small Delta write, read and ``mapInArrow``: ~10 s, once per process,
the same for any table size) and that is not counted.

    .venv/bin/python -m bench.snapshot --rows 10000000

Keys merged into bench/results.json: ``snapshot_rows_per_second`` (rows / (land + apply) seconds),
``snapshot_vs_copy_floor`` ((land + apply) / floor seconds), ``snapshot_vs_delta_floor`` ((land +
apply) / (floor + Delta append floor) seconds), ``snapshot_vs_two_hop_floor`` ((land + apply) / (floor +
bronze transfer floor + Delta append floor) seconds) and the details under ``snapshot`` (rows, seconds of
each phase, land-only rate, table and bronze sizes).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.pipeline_toml import pipeline_toml
from bench.results import merge_results

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("CDC_APPLY_BENCH_WORK", ROOT / "bench" / "work")) / "snapshot"
CHUNK_BLOCKS = 2048          # as cdc_apply.lander.snapshots.copy_sessions.CHUNK_BLOCKS


def _load(pg, rows: int) -> None:
    pg.create_database("bench")
    pg.execute("CREATE TABLE big (id bigint PRIMARY KEY, a int, x double precision, t text, at timestamptz)",
               dbname="bench")
    step = 1_000_000
    for low in range(1, rows + 1, step):
        high = min(rows, low + step - 1)
        pg.execute("INSERT INTO big SELECT g, (g * 7) % 100000, g / 3.0, 'row ' || md5(g::text), "
                   "'2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second' "
                   f"FROM generate_series({low}, {high}) g", dbname="bench")
    pg.execute("VACUUM ANALYZE big", dbname="bench")
    pg.execute("CREATE PUBLICATION bench_pub FOR TABLE big", dbname="bench")


def _ranges(pg) -> list[tuple[int | None, int | None]]:
    blocks = int(pg.execute("SELECT pg_relation_size('big') / current_setting('block_size')::int8",
                            dbname="bench")[0][0])
    if blocks <= CHUNK_BLOCKS:
        return [(None, None)]
    edges = list(range(0, blocks, CHUNK_BLOCKS))
    return [(low or None, high) for low, high in zip(edges, edges[1:] + [None])]


def _floor_chunk(dsn: str, low, high, path: Path, local: threading.local) -> int:
    """One block range by binary COPY into a Parquet file of typed columns; returns its rows."""
    import numpy as np
    import psycopg2
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from cdc_apply.lander.snapshots.copy_binary import CopySink, _header_length, _walk

    conn = getattr(local, "conn", None)
    if conn is None:
        conn = local.conn = psycopg2.connect(dsn)
        conn.autocommit = True
    where = " AND ".join(filter(None, [low is not None and f"ctid >= '({low},0)'::tid",
                                       high is not None and f"ctid < '({high},0)'::tid"]))
    sink = CopySink()
    with conn.cursor() as cur:
        cur.copy_expert(f"COPY (SELECT id, a, x, t, at FROM ONLY big{' WHERE ' + where if where else ''}) "
                        "TO STDOUT (FORMAT binary)", sink)
    buf = b"".join(sink.parts)
    header = _header_length(buf)
    end = len(buf) - 2
    lengths = np.cumsum(np.fromiter(map(len, sink.parts), dtype=np.int64, count=len(sink.parts)))[:-1]
    bounds = np.concatenate(([header], lengths[lengths > header]))
    data = np.frombuffer(buf, dtype=np.uint8)
    windows = np.lib.stride_tricks.as_strided(data, shape=(len(data) - 3, 4), strides=(1, 1))
    starts, nulls = _walk(buf, data, windows, bounds, end, 5)
    n = starts.shape[0]

    def fixed(col: int, width: int, dtype: str):
        at = starts[:, col] + 4
        return data[at[:, None] + np.arange(width)].view(dtype).ravel().astype(dtype[1:])

    text_start = starts[:, 3] + 4                                 # the value follows its int32 length
    text_end = text_start + data[starts[:, 3][:, None] + np.arange(4)].view(">i4").ravel()
    offsets = np.empty(2 * n + 1, dtype=np.int64)
    offsets[0:-1:2], offsets[1::2], offsets[-1] = text_start, text_end, end
    pieces = pa.Array.from_buffers(pa.binary(), 2 * n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                        pa.py_buffer(buf)])
    text = pc.take(pieces, pa.array(np.arange(0, 2 * n, 2, dtype=np.int32))).cast(pa.string())
    table = pa.table({
        "id": fixed(0, 8, ">i8"), "a": fixed(1, 4, ">i4"), "x": fixed(2, 8, ">f8"), "t": text,
        "at": pa.array(fixed(4, 8, ">i8") + 946_684_800_000_000, pa.timestamp("us", tz="UTC")),
    })
    assert not nulls.any()
    pq.write_table(table, path)
    return n


def _floor(pg, workers: int, out: Path) -> tuple[float, int]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ranges = _ranges(pg)
    dsn = pg.dsn("bench")
    local = threading.local()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        rows = sum(pool.map(lambda i: _floor_chunk(dsn, *ranges[i], out / f"part-{i:05d}.parquet", local),
                            range(len(ranges))))
    return time.monotonic() - started, rows


def _warm_up(spark, path: Path) -> None:
    """The first Delta write, read and Python worker of a JVM compile and load what every later one
    reuses: done once before anything is timed."""
    spark.range(10_000).selectExpr("id", "cast(id as string) as s").write.format("delta").mode("overwrite") \
        .save(str(path))
    df = spark.read.format("delta").load(str(path))
    df.mapInArrow(lambda batches: batches, df.schema).count()


def _delta_append(spark, floor: Path, path: Path) -> float:
    """Seconds Spark takes to append the floor's Parquet files to a new Delta table."""
    shutil.rmtree(path, ignore_errors=True)
    started = time.monotonic()
    spark.read.parquet(str(floor)).write.format("delta").save(str(path))
    seconds = time.monotonic() - started
    shutil.rmtree(path, ignore_errors=True)
    return seconds


def _transfer_floor(spark, bronze: Path) -> float:
    """Seconds Spark takes to read bronze's Insert rows through an identity ``mapInArrow``, written nowhere."""
    from pyspark.sql import functions as F

    from bench.large_batch import _identity  # the same identity floor as the large batches'

    rows = spark.read.format("delta").load(str(bronze)).where(F.substring("payload", 1, 1) == F.lit(b"I"))
    rows = rows.select("source", "seq", "lsn", "payload")
    started = time.monotonic()
    rows.mapInArrow(_identity, rows.schema).write.format("noop").mode("overwrite").save()
    return time.monotonic() - started


def _du(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True).stdout.split()[0])


def run(rows: int, workers: int, keep: bool) -> dict:
    from cdc_apply.testing.postgres import start_postgres

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    pg = start_postgres(WORK / "pg" / "data", max_wal_size="4GB", shared_buffers="512MB")
    try:
        started = time.monotonic()
        _load(pg, rows)
        print(f"loaded {rows:,} rows in {time.monotonic() - started:.0f} s", flush=True)
        table_bytes = int(pg.execute("SELECT pg_table_size('big')", dbname="bench")[0][0])
        floor_seconds, floor_rows = _floor(pg, workers, WORK / "floor")
        print(f"floor: {floor_rows:,} rows in {floor_seconds:.1f} s", flush=True)
        assert floor_rows == rows, (floor_rows, rows)

        from cdc_apply.api import apply, land
        from cdc_apply.config import load_config
        from cdc_apply.delta.refs import silver_ref
        from cdc_apply.spark import spark_session

        toml = WORK / "bench.toml"
        toml.write_text(pipeline_toml("bench_snapshot", WORK, pg.dsn("bench"), snapshot_workers=workers))
        config = load_config(toml)
        spark = spark_session("cdc_apply-bench-snapshot")
        _warm_up(spark, WORK / "warm")
        delta_seconds = _delta_append(spark, WORK / "floor", WORK / "delta_floor")
        print(f"Delta append floor: {delta_seconds:.1f} s", flush=True)
        log = io.StringIO()
        started = time.monotonic()
        land(config, spark=spark, once=True, out=log)
        land_seconds = time.monotonic() - started
        started = time.monotonic()
        apply(spark, config, once=True, out=log)
        apply_seconds = time.monotonic() - started
        silver_rows = silver_ref(config, "public", "big").read(spark).count()
        print(log.getvalue(), flush=True)
        assert silver_rows == rows, (silver_rows, rows)
        transfer_seconds = _transfer_floor(spark, WORK / "bronze")
        print(f"bronze transfer floor: {transfer_seconds:.1f} s", flush=True)
        total = land_seconds + apply_seconds
        details = {
            "measured_at": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                          text=True).stdout.strip(),
            "rows": rows, "workers": workers, "table_bytes": table_bytes,
            "bronze_bytes": _du(WORK / "bronze"), "floor_parquet_bytes": _du(WORK / "floor"),
            "land_seconds": round(land_seconds, 1), "apply_seconds": round(apply_seconds, 1),
            "floor_seconds": round(floor_seconds, 1),
            "delta_append_floor_seconds": round(delta_seconds, 1),
            "bronze_transfer_floor_seconds": round(transfer_seconds, 1),
            "land_rows_per_second": round(rows / land_seconds),
            "land_vs_copy_floor": round(land_seconds / floor_seconds, 2),
            "log": [line for line in log.getvalue().splitlines()       # the copy, the landing, the apply batch
                     if " rows in " in line or "] done:" in line or line.startswith("batch ")],
        }
        out = {"snapshot_rows_per_second": round(rows / total),
               "snapshot_vs_copy_floor": round(total / floor_seconds, 2),
               "snapshot_vs_delta_floor": round(total / (floor_seconds + delta_seconds), 2),
               "snapshot_vs_two_hop_floor": round(total / (floor_seconds + transfer_seconds + delta_seconds), 2),
               "snapshot": details}
        merge_results(out)
        print(json.dumps(out, indent=2))
        return out
    finally:
        pg.destroy()
        if not keep:
            shutil.rmtree(WORK, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.snapshot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the table (default 10,000,000)")
    parser.add_argument("--workers", type=int, default=2, help="copy sessions, snapshot and floor alike (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep bench/work/snapshot (server, bronze, silver)")
    args = parser.parse_args(argv)
    run(args.rows, args.workers, args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
