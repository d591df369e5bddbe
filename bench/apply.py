"""Apply benchmarks: bronze -> silver on Spark, against baselines measured in the same run.

    .venv/bin/python -m bench.apply [--reps 5] [--base 100000] [--changes 50000] [--large-mb 128]
    .venv/bin/python -m bench.apply --large-only [--large-mb 1024]

The input is a real capture (PostgreSQL 18, pgoutput protocol 1, text format) of ``TABLES``
tables: a base load (``--base`` rows, inserted through bronze like any change) and then
``--changes`` changes in small transactions (70 % updates, 20 % inserts, 10 % deletes; some
updates move a primary key, and the updates of the tables with a TOASTed ``doc`` leave it
unchanged). Bronze is written in commits of ``CHUNK`` messages and read one commit per
micro-batch, so the apply runs several batches, like a job that keeps up.

Each repetition starts from a copy of the lake as it was after the base load and applies every
change, once per variant (interleaved, in a rotating order):

* ``parallel`` - the defaults (``apply.parallelism`` 4, deletion vectors on): changes/s.
* ``serial``   - ``apply.parallelism`` 1; every MERGE is timed, and the same collapsed rows are
  then appended to a scratch Delta table (the plain-append baseline of ``merge_vs_append``).

and then twice more with deletion vectors off and on (timed, with Delta's operation metrics).

Then, inside Spark, the decode stage (``mapInArrow`` of the decoder) against an identity
``mapInArrow`` over the same bronze rows (the Python-transfer floor), and one large transaction
(``--large-mb`` of row data, plain and streamed) applied while the resident memory of the Python
workers and of the driver is sampled. Results merge into ``bench/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import threading
import time
from functools import partial
from pathlib import Path

from bench.results import merge_results

BENCH = Path(__file__).resolve().parent

WORK = Path(os.environ.get("CDC_APPLY_BENCH_WORK", BENCH / "work" / "apply")).resolve()  # Delta needs absolute paths
TABLES = 10
CHUNK = 50_000          # bronze messages per commit (= per micro-batch)
ROWS_PER_TXN = 60       # rows an update/insert/delete transaction touches


def _spread(values: list[float], digits: int = 2) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "n": len(values)}


# -- the capture ----------------------------------------------------------------------------------
def _schema() -> str:
    parts = []
    for i in range(TABLES):
        doc = ", doc text" if i % 3 == 0 else ""
        parts.append(f"CREATE TABLE t{i} (id int PRIMARY KEY, k int8 NOT NULL, v text, amount numeric(12,2), "
                     f"at timestamptz, flag bool{doc})")
        if doc:
            parts.append(f"ALTER TABLE t{i} ALTER COLUMN doc SET STORAGE EXTERNAL")
    parts.append("CREATE TABLE big (id int PRIMARY KEY, body text)")
    parts.append("CREATE PUBLICATION p FOR ALL TABLES")
    return ";\n".join(parts)


def _base_sql(i: int, rows: int) -> str:
    doc = (", CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 80) END" if i % 3 == 0 else "")
    return (f"INSERT INTO t{i} SELECT g, g * 7, 'value ' || g, (g % 100000) / 100.0, "
            f"'2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second', g % 2 = 0{doc} "
            f"FROM generate_series(1, {rows}) g")


def _change_transactions(changes: int, per_table_base: int, seed: int = 7):
    """SQL of each change transaction: ~70 % updated, 20 % inserted, 10 % deleted rows."""
    import random

    rng = random.Random(seed)
    next_id = [per_table_base + 1] * TABLES
    done = 0
    while done < changes:
        i = rng.randrange(TABLES)
        roll = rng.random()
        n = ROWS_PER_TXN
        if roll < 0.68:
            lo = rng.randrange(1, max(2, next_id[i] - n))
            yield f"UPDATE t{i} SET k = k + 1, amount = amount + 1 WHERE id BETWEEN {lo} AND {lo + n - 1}"
        elif roll < 0.70:
            # A key move: the rows get new primary keys (the Update carries a 'K' tuple), taken from the
            # range inserts would use next, so no two moves ever aim at the same key.
            lo = rng.randrange(1, max(2, next_id[i] - n))
            yield f"UPDATE t{i} SET id = id - {lo} + {next_id[i]} WHERE id BETWEEN {lo} AND {lo + n - 1}"
            next_id[i] += n
        elif roll < 0.90:
            lo = next_id[i]
            next_id[i] += n
            yield _base_sql(i, 0).replace("generate_series(1, 0)", f"generate_series({lo}, {lo + n - 1})")
        else:
            lo = rng.randrange(1, max(2, next_id[i] - n))
            yield f"DELETE FROM t{i} WHERE id BETWEEN {lo} AND {lo + n - 1}"
        done += n


def capture(base: int, changes: int, large_mb: int) -> dict:
    """Run the workload on PostgreSQL 18 and keep its messages as Arrow files under ``WORK``."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from cdc_apply.testing.postgres import start_postgres

    meta_file = WORK / "capture.json"
    wanted = {"base": base, "changes": changes, "large_mb": large_mb, "tables": TABLES, "version": 3}
    if meta_file.exists() and json.loads(meta_file.read_text()).get("wanted") == wanted:
        return json.loads(meta_file.read_text())
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    started = time.monotonic()
    pg = start_postgres(WORK / "pg" / "data")
    parts = {}
    try:
        conn = pg.connect()
        cur = conn.cursor()
        cur.execute(_schema())
        cur.execute("SELECT pg_create_logical_replication_slot('bench', 'pgoutput')")
        cur.execute("SELECT pg_create_logical_replication_slot('bench_streamed', 'pgoutput')")

        def drain(name: str, slot: str = "bench", **options) -> None:
            opts = {"proto_version": "1", "publication_names": "p", **options}
            args = ", ".join(f"'{k}', '{v}'" for k, v in opts.items())
            cur.execute(f"SELECT lsn - '0/0'::pg_lsn, data FROM pg_logical_slot_get_binary_changes("
                        f"'{slot}', NULL, NULL, {args})")
            rows = cur.fetchall()
            table = pa.table({"lsn": pa.array([int(r[0]) for r in rows], pa.int64()),
                              "payload": pa.array([bytes(r[1]) for r in rows], pa.binary())})
            with ipc.new_file(WORK / f"{name}.arrow", table.schema) as writer:
                writer.write_table(table)
            parts[name] = {"messages": table.num_rows, "bytes": int(pa.compute.sum(
                pa.compute.binary_length(table["payload"])).as_py() or 0)}

        for i in range(TABLES):
            cur.execute(_base_sql(i, base // TABLES))
        drain("base")
        txns = 0
        for sql in _change_transactions(changes, base // TABLES):
            cur.execute(sql)
            txns += 1
        drain("changes")
        cur.execute("UPDATE t1 SET k = k + 1 WHERE id = 1")
        drain("one_row")
        # The other slot skips what came before: it only has to see the large transaction.
        cur.execute("SELECT pg_replication_slot_advance('bench_streamed', pg_current_wal_lsn())")
        rows = large_mb * 1024
        cur.execute(f"INSERT INTO big SELECT g, repeat(md5(g::text), 32) FROM generate_series(1, {rows}) g")
        drain("large")
        drain("large_streamed", slot="bench_streamed", proto_version="2", streaming="on")
        conn.close()
    finally:
        pg.destroy()
        shutil.rmtree(WORK / "pg", ignore_errors=True)
    meta = {"wanted": wanted, "parts": parts, "change_transactions": txns,
            "captured_in_s": round(time.monotonic() - started, 1)}
    meta_file.write_text(json.dumps(meta, indent=2))
    return meta


def _read(name: str):
    import pyarrow.ipc as ipc

    return ipc.open_file(WORK / f"{name}.arrow").read_all()


def write_bronze(spark, path: Path, parts: list[str], first_seq: int = 0, source: str = "bench",
                 chunk_size: int = CHUNK, limit: int | None = None,
                 commit_sizes: list[int] | None = None) -> dict[str, tuple[int, int]]:
    """Append each part (its first ``limit`` messages) to bronze in commits of ``chunk_size`` messages
    (one file each), or of the ``commit_sizes`` given: part -> seq range."""
    import pandas as pd

    from cdc_apply.delta.bronze_schema import create_bronze_table
    from cdc_apply.delta.engine import spark_tables

    create_bronze_table(spark_tables(spark), str(path))
    seq, ranges = first_seq, {}
    for part in parts:
        table = _read(part)
        if limit is not None:
            table = table.slice(0, limit)
        first = seq
        sizes = commit_sizes or [chunk_size] * -(-table.num_rows // chunk_size)
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        for start, size in zip(starts, sizes):
            chunk = table.slice(start, size)
            n = chunk.num_rows
            pdf = pd.DataFrame({"source": source, "seq": range(seq, seq + n), "lsn": chunk["lsn"].to_pylist(),
                                "payload": chunk["payload"].to_pylist(),
                                "landed_at": pd.Timestamp.now(tz="UTC")})
            spark.createDataFrame(pdf, "source string, seq long, lsn long, payload binary, landed_at timestamp") \
                .coalesce(1).write.format("delta").mode("append").save(str(path))
            seq += n
        ranges[part] = (first, seq - 1)
    return ranges


def lake_config(root: Path, bronze_path: Path, **extra):
    from cdc_apply.config import parse_config

    raw = {"pipeline": "bench", "bronze": {"path": str(bronze_path), "max_files_per_trigger": 1},
           "silver": {"path": str(root / "silver")}, "state": {"path": str(root / "state")}}
    for section, values in extra.items():
        raw.setdefault(section, {}).update(values)
    return parse_config(raw)


# -- measuring ------------------------------------------------------------------------------------
# Delta's own timings of a MERGE (operationMetrics, ms): the whole command, the pass that finds the
# files a MERGE touches, and the pass that writes them. Their sum is Delta's floor for the MERGE: no
# change on our side of the call (its source is already materialised) can go under it.
DELTA_MERGE_TIMES = ("executionTimeMs", "scanTimeMs", "rewriteTimeMs")


class MergeTimer:
    """Wraps ``merge_keyed``: times each MERGE, then appends the same collapsed rows to a scratch table.

    Also sums Delta's own timings of the counted MERGEs (``delta_ms``, see DELTA_MERGE_TIMES), read
    from the table's last commit right after each one (one table at a time: nothing else commits).
    """

    def __init__(self, scratch: Path, counting=lambda: True) -> None:
        self.scratch = scratch
        self.counting = counting  # whether this MERGE counts (e.g. not in a warm-up batch)
        self.merge_s = 0.0
        self.append_s = 0.0
        self.rows = 0
        self.delta_ms = dict.fromkeys(DELTA_MERGE_TIMES, 0)

    def __enter__(self):
        from cdc_apply.lake import silver_tables as silver

        self.module = silver
        self.real = silver.merge_keyed
        silver.merge_keyed = self.merge
        return self

    def __exit__(self, *exc) -> None:
        self.module.merge_keyed = self.real

    def merge(self, spark, collapsed, work):
        from pyspark.sql import functions as F

        started = time.perf_counter()
        result = self.real(spark, collapsed, work)
        if not self.counting():
            return result
        self.merge_s += time.perf_counter() - started
        last = work.ref.delta_table(spark).history(1).collect()[0]
        if last.operation != "MERGE":
            raise RuntimeError(f"expected {work.qualified_name}'s last commit to be the MERGE, got {last.operation}")
        for k in DELTA_MERGE_TIMES:
            self.delta_ms[k] += int(last.operationMetrics.get(k, 0) or 0)
        rows = collapsed.select([F.col(f"`v_{i}`").alias(c.name) for i, c in enumerate(work.columns)]
                                + [F.col(f"`{src}`").alias(col) for col, src in work.meta])
        started = time.perf_counter()
        rows.write.format("delta").mode("append").save(str(self.scratch / work.qualified_name))
        self.append_s += time.perf_counter() - started
        self.rows += collapsed.count()
        return result


def apply_once(spark, rep_dir: Path, after_base: Path, bronze: Path, variant: str, scratch: Path) -> dict:
    """Apply every change from a copy of the after-base lake; returns timings and batch figures."""
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline

    shutil.rmtree(rep_dir, ignore_errors=True)
    shutil.copytree(after_base, rep_dir)
    extra = {"parallel": {}, "serial": {"apply": {"parallelism": 1}},
             "dv": {"silver": {"deletion_vectors": True}}}[variant]
    config = lake_config(rep_dir, bronze, **extra)
    pipeline = ApplyPipeline.open(spark_tables(spark), config, out=open(os.devnull, "w"))
    timer = MergeTimer(scratch) if variant == "serial" else None
    started = time.perf_counter()
    if timer:
        with timer:
            pipeline.run(once=True)
    else:
        pipeline.run(once=True)
    seconds = time.perf_counter() - started
    reports = pipeline.reports
    out = {"seconds": seconds, "batches": len(reports),
           "batch_seconds": [round(r.seconds, 2) for r in reports],
           "messages": sum(r.messages for r in reports),
           "rows": sum(t.inserted + t.updated + t.deleted for r in reports for t in r.tables.values())}
    if timer:
        out.update(merge_s=timer.merge_s, append_s=timer.append_s - 0.0, collapsed_rows=timer.rows)
    shutil.rmtree(rep_dir, ignore_errors=True)
    return out


def delta_metrics(spark, table: Path) -> dict:
    """Delta's own metrics of the MERGEs of one silver table: files and rows written/rewritten."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, str(table)).history().where("operation = 'MERGE'").collect()
    keys = ("numTargetFilesAdded", "numTargetFilesRemoved", "numTargetRowsCopied", "numTargetRowsUpdated",
            "numTargetRowsInserted", "numTargetRowsDeleted", "numTargetDeletionVectorsAdded")
    totals = {k: 0 for k in keys}
    for row in history:
        for k in keys:
            totals[k] += int(row.operationMetrics.get(k, 0) or 0)
    totals["merges"] = len(history)
    return totals


def decode_floor(spark, captured: list, reps: int) -> dict:
    """Decode stage vs an identity mapInArrow over the same bronze rows, interleaved."""
    from cdc_apply.decode.changes import decode_batches
    from cdc_apply.lake.sources.payload_columns import is_change
    from cdc_apply.planning.decode_plan import output_ddl

    def identity(batches):
        yield from batches

    jobs = []
    for fresh, plan in captured:
        changes = fresh.where(is_change()).select("source", "seq", "lsn", "payload")
        changes = changes.repartition(spark.sparkContext.defaultParallelism).cache()
        changes.count()
        jobs.append((changes, plan))
    rows = sum(c.count() for c, _ in jobs)

    def run_decode():
        for changes, plan in jobs:
            changes.mapInArrow(partial(decode_batches, plan=plan.decode), output_ddl(plan.decode)) \
                .write.format("noop").mode("overwrite").save()

    def run_identity():
        for changes, _ in jobs:
            changes.mapInArrow(identity, changes.schema).write.format("noop").mode("overwrite").save()

    run_decode()
    run_identity()          # warm-up of both
    decode_s, identity_s, ratio = [], [], []
    for rep in range(reps):
        order = [("d", run_decode), ("i", run_identity)]
        if rep % 2:
            order.reverse()
        t = {}
        for name, fn in order:
            started = time.perf_counter()
            fn()
            t[name] = time.perf_counter() - started
        decode_s.append(t["d"])
        identity_s.append(t["i"])
        ratio.append(t["d"] / t["i"])
    for changes, _ in jobs:
        changes.unpersist()
    return {"rows": rows, "decode_s": _spread(decode_s), "identity_s": _spread(identity_s),
            "decode_rows_per_s": _spread([rows / s for s in decode_s], 0), "ratio": _spread(ratio)}


def _python_workers(jvm: int | None) -> dict[int, int]:
    """RSS (bytes) of this session's pyspark Python workers: the JVM's descendants running pyspark."""
    parent = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                parent[int(pid)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out = {}
    for pid in parent:
        ancestor, hops = parent.get(pid), 0
        while ancestor not in (None, 0, 1, jvm) and hops < 8:
            ancestor, hops = parent.get(ancestor), hops + 1
        if jvm is None or ancestor != jvm:
            continue
        try:
            # The executable too: a child the JVM forks (Hadoop's shell calls) runs java until it
            # execs, with the JVM's command line (pyspark's jars) and, for that instant, its RSS.
            if (b"pyspark" not in Path(f"/proc/{pid}/cmdline").read_bytes()
                    or "python" not in os.path.basename(os.readlink(f"/proc/{pid}/exe"))):
                continue
        except OSError:
            continue
        out[pid] = _rss(pid)
    return out


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _jvm_pid() -> int | None:
    """The JVM this process started (py4j's gateway)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"java" in cmd and b"SparkSubmit" in cmd and _parent(int(pid)) == os.getpid():
                return int(pid)
    return None


def large_transaction(spark, root: Path, part: str) -> dict:
    """Apply one large transaction; peak RSS of the Python workers, the JVM and this driver."""
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline

    lake = root / part
    shutil.rmtree(lake, ignore_errors=True)
    bronze = lake / "bronze"
    write_bronze(spark, bronze, [part])
    config = lake_config(lake, bronze, bronze={"max_files_per_trigger": 1000})
    peaks = {"worker": 0, "workers_sum": 0, "jvm": 0, "driver": 0}
    jvm = _jvm_pid()
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            workers = _python_workers(jvm)
            peaks["worker"] = max(peaks["worker"], max(workers.values(), default=0))
            peaks["workers_sum"] = max(peaks["workers_sum"], sum(workers.values()))
            peaks["jvm"] = max(peaks["jvm"], _rss(jvm) if jvm else 0)
            peaks["driver"] = max(peaks["driver"], _rss(os.getpid()))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    pipeline = ApplyPipeline.open(spark_tables(spark), config, out=open(os.devnull, "w"))
    pipeline.run(once=True)
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    rows = spark.read.format("delta").load(str(lake / "silver" / "public" / "big")).count()
    shutil.rmtree(lake, ignore_errors=True)
    mb = 1024 * 1024
    return {"seconds": round(seconds, 1), "rows": rows,
            "python_worker_peak_rss_mb": round(peaks["worker"] / mb), "python_workers_sum_peak_rss_mb":
            round(peaks["workers_sum"] / mb), "jvm_peak_rss_mb": round(peaks["jvm"] / mb),
            "driver_python_peak_rss_mb": round(peaks["driver"] / mb)}


def switch_silver_properties(spark, config) -> None:
    """Give a copied lake's silver tables (made with the defaults) ``config``'s deletion-vector and
    Change Data Feed properties."""
    from cdc_apply.delta.ddl import set_properties, silver_properties
    from cdc_apply.delta.refs import silver_ref

    props = {k: v for k, v in silver_properties(config).items()
             if k in ("delta.enableDeletionVectors", "delta.enableChangeDataFeed")}
    for table in sorted((Path(config.silver.path) / "public").iterdir()):
        set_properties(spark, silver_ref(config, "public", table.name), props)


def compare_deletion_vectors(spark, lake: Path, after_base: Path, bronze: Path, reps: int = 2) -> dict:
    """The same changes with deletion vectors off and on (the default), interleaved, with Delta's metrics.

    The silver tables were created by the base load with the default: each copy gets the variant's
    property before the changes are applied.
    """
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline

    metrics, seconds = {}, {"off": [], "on": []}
    for rep in range(reps):
        for variant in (("off", "on") if rep % 2 == 0 else ("on", "off")):
            keep = lake / f"dv_{variant}"
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(after_base, keep)
            config = lake_config(keep, bronze, silver={"deletion_vectors": variant == "on"})
            switch_silver_properties(spark, config)
            started = time.perf_counter()
            ApplyPipeline.open(spark_tables(spark), config, out=open(os.devnull, "w")).run(once=True)
            seconds[variant].append(time.perf_counter() - started)
            metrics[variant] = {f"t{i}": delta_metrics(spark, keep / "silver" / "public" / f"t{i}") for i in (0, 1)}
            shutil.rmtree(keep, ignore_errors=True)
            print(f"[bench apply] deletion vectors {variant}: {seconds[variant][-1]:.1f} s", flush=True)
    return {"dv_on_vs_off_time": _spread([on / off for on, off in zip(seconds["on"], seconds["off"])]),
            "dv_seconds": {k: _spread(v) for k, v in seconds.items()}, "delta_metrics": metrics}


def run(reps: int = 5, base: int = 100_000, changes: int = 50_000, large_mb: int = 128, write: bool = True) -> dict:
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.spark import spark_session

    meta = capture(base, changes, large_mb)
    print(f"[bench apply] capture: {json.dumps(meta['parts'])}", flush=True)
    spark = spark_session("cdc_apply-bench-apply")
    lake = WORK / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    bronze = lake / "bronze"
    ranges = write_bronze(spark, bronze, ["base"])
    after_base = lake / "after_base"
    started = time.perf_counter()
    cfg = lake_config(after_base, bronze, bronze={"max_files_per_trigger": 1000})
    ApplyPipeline.open(spark_tables(spark), cfg, out=open(os.devnull, "w")).run(once=True)
    base_s = time.perf_counter() - started
    # Copies of the after-base lake (its checkpoint included) go on with the commits appended now.
    write_bronze(spark, bronze, ["changes", "one_row"], first_seq=ranges["base"][1] + 1)
    print(f"[bench apply] base load: {meta['parts']['base']['messages']} messages in {base_s:.1f} s", flush=True)

    n_changes = meta["parts"]["changes"]["messages"]
    variants = ["parallel", "serial"]
    results: dict[str, list] = {v: [] for v in variants}
    captured = []
    real_decode = ApplyPipeline._decode

    def capture_decode(self, fresh, plan, *rest):
        if len(captured) < 64:
            captured.append((fresh, plan))
        return real_decode(self, fresh, plan, *rest)

    scratch = lake / "scratch"
    for rep in range(reps):
        order = variants if rep % 2 == 0 else variants[::-1]
        for variant in order:
            if rep == 0 and variant == "parallel":
                ApplyPipeline._decode = capture_decode
            try:
                r = apply_once(spark, lake / f"rep_{variant}", after_base, bronze, variant, scratch)
            finally:
                ApplyPipeline._decode = real_decode
            results[variant].append(r)
            print(f"[bench apply] rep {rep + 1}/{reps} {variant:8s}: {r['seconds']:.1f} s, "
                  f"{r['batches']} batches, {n_changes / r['seconds']:.0f} msgs/s"
                  + (f", merge {r['merge_s']:.1f} s vs append {r['append_s']:.1f} s" if variant == "serial" else ""),
                  flush=True)
    dv = compare_deletion_vectors(spark, lake, after_base, bronze)

    floor = decode_floor(spark, captured, reps)
    print(f"[bench apply] decode stage vs identity mapInArrow: {floor['ratio']}", flush=True)
    large = {part: large_transaction(spark, lake / "large", part) for part in ("large", "large_streamed")}
    print(f"[bench apply] large transaction: {json.dumps(large)}", flush=True)

    def changes_per_s(variant):
        return [n_changes / r["seconds"] for r in results[variant]]

    merge_ratio = [r["merge_s"] / r["append_s"] for r in results["serial"]]
    one_row = [r["batch_seconds"][-1] for r in results["parallel"]]
    out = {
        "changes_per_second": round(statistics.median(changes_per_s("parallel"))),
        "merge_vs_append": round(statistics.median(merge_ratio), 2),
        "decode_vs_identity_floor": floor["ratio"]["median"],
        "large_txn_python_worker_rss_mb": max(v["python_worker_peak_rss_mb"] for v in large.values()),
        "apply": {
            "capture": meta, "base_load_s": round(base_s, 1), "reps": reps,
            "changes_per_second": {v: _spread(changes_per_s(v), 0) for v in variants},
            "parallel_vs_serial": _spread([a["seconds"] and b["seconds"] / a["seconds"]
                                           for a, b in zip(results["parallel"], results["serial"])]),
            **dv,
            "merge_vs_append": _spread(merge_ratio),
            "merge_s": _spread([r["merge_s"] for r in results["serial"]]),
            "append_s": _spread([r["append_s"] for r in results["serial"]]),
            "collapsed_rows": results["serial"][0]["collapsed_rows"],
            "batches": results["parallel"][0]["batches"],
            "batch_seconds": _spread([s for r in results["parallel"] for s in r["batch_seconds"][:-1]]),
            "one_row_batch_seconds": _spread(one_row),
            "decode_floor": floor,
            "large_transaction": large,
            "cpu_count": os.cpu_count(), "loadavg": os.getloadavg(),
        },
    }
    if write:
        merge_results(out)
    print_table(out)
    return out


def run_large(large_mb: int = 1024, write: bool = True) -> dict:
    """Only the large transaction, at ``large_mb`` (the issue's 1 GB): its own capture folder, a
    token base and change set. Its figures become ``large_txn_python_worker_rss_mb``."""
    from cdc_apply.spark import spark_session

    meta = capture(1_000, 600, large_mb)
    print(f"[bench apply] capture: {json.dumps(meta['parts'])}", flush=True)
    spark = spark_session("cdc_apply-bench-large")
    large = {part: large_transaction(spark, WORK / "lake" / "large", part) for part in ("large", "large_streamed")}
    for part, v in large.items():
        print(f"  {part} ({large_mb} MB): {v}", flush=True)
    out = {"large_txn_python_worker_rss_mb": max(v["python_worker_peak_rss_mb"] for v in large.values()),
           "large_transaction": {"mb": large_mb, "messages": {p: meta["parts"][p]["messages"] for p in large},
                                 "bytes": {p: meta["parts"][p]["bytes"] for p in large}, **large,
                                 "cpu_count": os.cpu_count()}}
    if write:
        merge_results(out)
    return out


def print_table(out: dict) -> None:
    a = out["apply"]
    print("\napply benchmark (median [min-max] of", a["reps"], "interleaved repetitions)")
    for v, s in a["changes_per_second"].items():
        print(f"  changes/s {v:10s} {s['median']:>10,.0f}  [{s['min']:,.0f}-{s['max']:,.0f}]")
    print(f"  MERGE / append of the same collapsed rows: {a['merge_vs_append']}")
    print(f"  parallel (4 tables at once) speed-up over serial: {a['parallel_vs_serial']}")
    print(f"  deletion vectors on / off apply time: {a['dv_on_vs_off_time']}")
    print(f"  decode stage / identity mapInArrow: {a['decode_floor']['ratio']}")
    print(f"  per batch of ~{CHUNK} messages: {a['batch_seconds']} s; a 1-row batch: {a['one_row_batch_seconds']} s")
    for part, v in a["large_transaction"].items():
        print(f"  {part}: {v}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.apply", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--base", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--large-mb", type=int, default=128)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--large-only", action="store_true",
                        help="only the large transaction (capture folder: $CDC_APPLY_BENCH_WORK)")
    args = parser.parse_args(argv)
    if args.large_only:
        run_large(args.large_mb, write=not args.no_write)
    else:
        run(args.reps, args.base, args.changes, args.large_mb, write=not args.no_write)


if __name__ == "__main__":
    main()
