"""``cdc-apply demo`` (``make demo``): the whole path on an embedded PostgreSQL 18.

PostgreSQL 18 (embedded, ``wal_level = logical``) holding the shop's rows →
the lander creates the slot and copies them under its exported snapshot
(``source.snapshot = "initial"``) → the rest of the shop workload, streamed
(protocol 4, streaming parallel, two-phase; the DDL event trigger reports
``ADD COLUMN ... DEFAULT``) → bronze → the apply job → silver; then the silver
tables an analyst would look at, and a check that every silver table equals its
source table, row for row (exit 1 if not).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEMO_TOML = """# written by `cdc-apply demo`
pipeline = "demo"
[bronze]
path = "bronze"
[silver]
path = "silver"
[state]
path = "state"
[source]
name = "shop"
dsn = "{dsn}"
slot = "demo_slot"
publication = "demo_pub"
proto_version = 4
streaming = "parallel"
two_phase = true
messages = true
create_slot = true
snapshot = "initial"
ddl_events = true
[land]
batch_messages = 5000
idle_exit_seconds = 2.0
"""


class _Clock:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[demo {time.monotonic() - self.start:6.1f}s] {text}", flush=True)


def run_demo(workdir: str = "demo-data") -> int:
    from cdc_apply.config import load_config
    from cdc_apply.demo.shop import CHANGES, EXISTING, SCHEMA, run_workload
    from cdc_apply.testing.postgres import start_postgres

    clock = _Clock()
    root = Path(workdir).resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    clock.say(f"starting PostgreSQL 18 (embedded) in {root / 'pg'}")
    pg = start_postgres(root / "pg" / "data")
    try:
        pg.create_database("shop")
        pg.execute(SCHEMA, dbname="shop")
        config_file = root / "demo.toml"
        config_file.write_text(DEMO_TOML.format(dsn=pg.dsn("shop")))
        config = load_config(config_file)
        clock.say("starting Spark (local[2]) with Delta")
        from cdc_apply.spark import spark_session

        spark = spark_session("cdc_apply-demo")
        from cdc_apply.api import apply, land

        clock.say("the shop already holds rows (no slot yet)")
        execute = lambda sql: pg.execute(sql, dbname="shop")  # noqa: E731
        run_workload(execute, clock.say, EXISTING)
        pg.execute("CREATE PUBLICATION demo_pub FOR ALL TABLES", dbname="shop")
        clock.say("the lander creates the slot and copies the existing rows (snapshot = \"initial\")")
        land(config, spark=spark, once=True, out=sys.stdout)
        clock.say("running the rest of the shop workload")
        run_workload(execute, clock.say, CHANGES)
        clock.say("landing the slot into bronze (cdc-apply land --once)")
        land(config, spark=spark, once=True, out=sys.stdout)
        clock.say("applying bronze to silver (cdc-apply apply --once)")
        apply(spark, config, once=True, out=sys.stdout)
        _show(spark, config, clock)
        clock.say("checking every silver table against PostgreSQL")
        from cdc_apply.testing.compare import compare_with_postgres

        conn = pg.connect("shop")
        try:
            checks = compare_with_postgres(spark, config, conn, source="shop", schemas=["public"])
        finally:
            conn.close()
        for check in checks:
            print("  " + check.line())
        ok = all(c.equal for c in checks)
        clock.say("silver equals the source, table by table" if ok else "MISMATCH: silver differs from the source")
        return 0 if ok else 1
    finally:
        pg.destroy()


def _show(spark: SparkSession, config, clock: _Clock) -> None:
    from pyspark.sql import functions as F

    from cdc_apply.delta.refs import silver_ref, state_ref

    clock.say("silver tables")
    for name in ("customers", "orders", "order_lines", "products", "documents", "audit_log"):
        df = silver_ref(config, "public", name).read(spark)
        print(f"\n  public.{name}: {df.count()} rows")
        cols = [c for c in df.columns if c != "body"]
        if "body" in df.columns:
            cols.insert(2, "body_chars")
            df = df.withColumn("body_chars", F.length("body"))
        df.select(*[F.col(f"`{c}`") for c in cols]).orderBy(cols[0]).show(5, truncate=40)
    log = state_ref(config, "transactions").read(spark)
    print("  transactions applied, by kind:")
    log.groupBy("kind").agg(F.count(F.lit(1)).alias("transactions"), F.sum("changes").alias("changes")).show()
    print("  logical decoding messages:")
    state_ref(config, "messages").read(spark).select(
        "prefix", "transactional", F.col("content").cast("string").alias("content")).show(truncate=False)
