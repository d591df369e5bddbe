"""Bronze, silver, state and the checkpoint on ``s3a://``, against an S3-compatible server on 127.0.0.1.

moto's server stands in for S3; Hadoop's ``s3a://`` file system (``hadoop-aws`` at Spark's Hadoop version
and the AWS SDK, ``python -m cdc_apply.spark.jars --s3``) reaches it, configured as a user configures
Spark for S3: ``spark-defaults.conf`` in ``$SPARK_CONF_DIR``. The commands run as a user runs them:
``cdc-apply land`` (Spark's writer: bronze is not on this machine's disk), ``cdc-apply apply`` killed in
its first batch and run again, ``cdc-apply status --json`` (Spark: the state tables are on object
storage), ``cdc-apply optimize`` of silver and bronze, and a table copied again on request
(``cdc-apply snapshot``, served by the next ``land``). Silver is compared with PostgreSQL. ``make cluster`` runs these (marker ``cluster``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cdc_apply.delta.engine import spark_tables
from cdc_apply.testing.object_store import write_spark_defaults
from cdc_apply.testing.processes import CliProcess

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.system, pytest.mark.cluster]

CONFIG = """pipeline = "s3"
[bronze]
path = "{bronze}"
[silver]
path = "{silver}"
[state]
path = "{state}"
[apply]
parallelism = 2
[source]
name = "shop"
dsn = "{dsn}"
slot = "s3_slot"
publication = "s3_pub"
snapshot = "initial"
[land]
batch_seconds = 1.0
idle_exit_seconds = 1.0
"""

# The slot exists before the changes (made here, as a user may make it), so one land run streams them all.
SCHEMA = [
    "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, balance numeric(12,2), joined timestamptz, "
    "doc jsonb, note text)",
    "ALTER TABLE customers ALTER COLUMN note SET STORAGE EXTERNAL",
    "CREATE TABLE events (kind text NOT NULL, n bigint)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
    "CREATE PUBLICATION s3_pub FOR TABLE customers, events",
    "SELECT pg_create_logical_replication_slot('s3_slot', 'pgoutput')",
]
CHANGES = [
    "INSERT INTO customers SELECT g, 'c' || g, g * 1.25, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour', "
    "jsonb_build_object('g', g), CASE WHEN g % 50 = 0 THEN repeat('toast', 3000) END FROM generate_series(1, 400) g",
    "INSERT INTO events SELECT 'boot', g FROM generate_series(1, 60) g",
    "UPDATE customers SET balance = balance + 1 WHERE id % 7 = 0",          # the TOASTed notes stay unchanged
    "DELETE FROM customers WHERE id BETWEEN 20 AND 40",
    "UPDATE customers SET id = id + 1000 WHERE id BETWEEN 390 AND 400",     # key moves
    "DELETE FROM events WHERE n > 50",
    "ALTER TABLE customers ADD COLUMN vip boolean",
    "UPDATE customers SET vip = id % 2 = 0 WHERE id < 100",
]


@pytest.fixture(scope="module")
def s3_lake(s3_server, postgres, tmp_path_factory):
    """A pipeline on s3a:// whose bronze holds every change, landed by ``cdc-apply land``."""
    if s3_server is None:
        pytest.skip("the s3a jars are not fetched: python -m cdc_apply.spark.jars --s3 (make cluster does)")
    server, jars = s3_server
    root = tmp_path_factory.mktemp("s3-lake")
    conf_dir = root / "spark-conf"
    write_spark_defaults(conf_dir, {**server.spark_conf(jars), "spark.driver.memory": "1g"})
    postgres.create_database("s3lake")
    for sql in SCHEMA + CHANGES:
        postgres.execute(sql, dbname="s3lake")
    (root / "pipeline.toml").write_text(CONFIG.format(
        bronze=server.url("shop/bronze"), silver=server.url("shop/silver"), state=server.url("shop/state"),
        dsn=postgres.dsn("s3lake")))
    # These JVMs live a minute or two: C1 alone compiles what they run for a fraction of the CPU (as in
    # tests/packaging). Nothing cdc_apply sees changes.
    env = {"SPARK_CONF_DIR": str(conf_dir), "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1"}
    land = _cli(root, "land", env, "--once").wait(600)
    assert land.returncode == 0, land.describe()
    return root, env


def _cli(root: Path, command: str, env: dict, *extra: str, name: str | None = None) -> CliProcess:
    return CliProcess(name or command, [command, "--config", str(root / "pipeline.toml"), *extra], root / "logs", root,
                      env=env)


@pytest.fixture(scope="module")
def applied(s3_server, s3_lake):
    """``cdc-apply apply --once`` SIGKILLed in its first batch, the moment its first silver commit is on S3
    (the batch's writes under way), then run again to its end."""
    server, _ = s3_server
    root, env = s3_lake
    first = _cli(root, "apply", env, "--once", name="apply-killed")
    looked = [0.0]

    def in_first_batch() -> str | None:
        if time.monotonic() - looked[0] < 0.3:
            return None
        looked[0] = time.monotonic()
        if "/_delta_log/00000000000000000000.json" in server.list_keys("shop/silver/"):
            return "a silver table's first commit is on S3"
        return None

    killed = first.wait(600, kill_when=in_first_batch)
    again = _cli(root, "apply", env, "--once", name="apply-again").wait(600)
    return killed, again


def _silver_checks(spark, postgres, root: Path) -> list:
    from cdc_apply.config import load_config
    from cdc_apply.testing.compare import compare_with_postgres

    conn = postgres.connect("s3lake")
    try:
        return compare_with_postgres(spark, load_config(root / "pipeline.toml"), conn, source="shop",
                                     schemas=["public"])
    finally:
        conn.close()


def test_apply_killed_in_its_first_batch_on_s3a_runs_again_to_silver_equal_to_postgresql(applied, s3_lake, postgres,
                                                                                          spark):
    killed, again = applied
    assert killed.killed, killed.describe()     # the batch was still running when the kill came
    assert again.returncode == 0, again.describe()
    checks = _silver_checks(spark, postgres, s3_lake[0])
    assert len(checks) == 2 and all(c.equal for c in checks), "\n".join(c.line() for c in checks)


def test_status_reads_the_state_on_s3a_with_spark_and_reports_the_source_caught_up(applied, s3_lake):
    root, env = s3_lake
    run = _cli(root, "status", env, "--json").wait(600)
    assert run.returncode == 0, run.describe()
    entries = [json.loads(line) for line in run.stdout.splitlines()]
    assert [(e["source"], e["health"], e["lag_seq"]) for e in entries] == [("shop", "ok", 0)], run.stdout
    assert "Spark session" in run.stderr     # object storage: read with Spark, not delta-rs


def test_optimize_on_s3a_compacts_silver_and_bronze_and_leaves_silver_equal(applied, s3_lake, postgres, spark):
    from cdc_apply.config import load_config
    from cdc_apply.delta.refs import bronze_ref

    root, env = s3_lake
    config = load_config(root / "pipeline.toml")
    # One more landed batch, so bronze holds at least two files however the first landing cut its batches
    # (one file left nothing for OPTIMIZE to compact); applied, so silver still equals PostgreSQL.
    postgres.execute("UPDATE customers SET name = name || '+' WHERE id < 5", dbname="s3lake")
    for step in (("land", "--once"), ("apply", "--once")):
        done = _cli(root, step[0], env, *step[1:], name=f"{step[0]}-before-optimize").wait(600)
        assert done.returncode == 0, done.describe()
    run = _cli(root, "optimize", env).wait(600)
    assert run.returncode == 0, run.describe()
    bronze = _cli(root, "optimize", env, "--bronze", name="optimize-bronze").wait(600)
    assert bronze.returncode == 0, bronze.describe()
    # Every silver table and bronze answered (the table's "N files -> M" line); bronze, a file per landed
    # batch, was compacted.
    assert {line.split(":")[0] for line in run.stdout.splitlines()} >= {"public.customers", "public.events",
                                                                        "bronze"}, run.describe()
    operations = [r.operation for r in spark_tables(spark).delta_table(bronze_ref(config)).history().collect()]
    assert "OPTIMIZE" in operations, operations
    checks = _silver_checks(spark, postgres, root)
    assert all(c.equal for c in checks), "\n".join(c.line() for c in checks)


def test_a_table_copied_again_on_request_on_s3a_leaves_silver_equal_to_postgresql(applied, s3_lake, postgres, spark):
    root, env = s3_lake
    postgres.execute("UPDATE customers SET name = name || '!' WHERE id < 10", dbname="s3lake")
    ask = _cli(root, "snapshot", env, "--table", "public.customers", name="snapshot").wait(600)
    assert ask.returncode == 0, ask.describe()
    land = _cli(root, "land", env, "--once", name="land-snapshot").wait(600)
    assert land.returncode == 0, land.describe()
    assert "snapshot of public.customers" in land.stdout + land.stderr, land.describe()
    apply = _cli(root, "apply", env, "--once", name="apply-snapshot").wait(600)
    assert apply.returncode == 0, apply.describe()
    checks = _silver_checks(spark, postgres, root)
    assert len(checks) == 2 and all(c.equal for c in checks), "\n".join(c.line() for c in checks)


def test_verify_on_s3a_finds_silver_equal_to_postgresql_while_the_lander_and_apply_job_run(applied, s3_lake):
    """``cdc-apply verify`` with bronze, silver and the state on s3a://: it waits for the pipeline to pass its
    point, so the lander and the apply job run (once each, again and again) until verify is done."""
    root, env = s3_lake
    # events is keyless without a history table: verify names it an error (docs/VERIFY.md), so it is left out.
    verify = _cli(root, "verify", env, "--json", "--wait-seconds", "480", "--range-rows", "50",
                  "--table", "public.customers", name="verify")
    rounds = 0
    while verify.proc.poll() is None and rounds < 20:
        for step in (("land", "--once"), ("apply", "--once")):
            done = _cli(root, step[0], env, *step[1:], name=f"{step[0]}-beside-verify-{rounds}").wait(600)
            assert done.returncode == 0, done.describe()
        rounds += 1
    run = verify.wait(600)
    assert run.returncode == 0, run.describe()
    result = json.loads(run.stdout)
    assert [(t["table"], t["status"], t["silver_rows"] > 0) for t in result["tables"]] == [
        ("public.customers", "equal", True)], run.stdout
