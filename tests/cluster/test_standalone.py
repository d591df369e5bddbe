"""The apply job under spark-submit on a real standalone cluster whose executors' Python has no cdc_apply.

A master and two workers (one core, 1g each) from pip's pyspark on 127.0.0.1; the executors run a
virtualenv of the driver's Python version holding only pyarrow and numpy. Bronze is landed from a real
PostgreSQL by the command line (an initial snapshot, then changes), the job runs as a cluster user runs
it — ``spark-submit --master spark://... --jars <Delta jars> jobs/apply_changes.py`` — and silver is
compared with PostgreSQL. ``make cluster`` runs these (marker ``cluster``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from cdc_apply.spark.executors import EXECUTOR_NEEDS
from cdc_apply.testing.cluster import cluster_env, executor_python, run_group, spark_home, start_standalone
from cdc_apply.testing.processes import CliProcess

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.system, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
# The executors' packages, at the versions the `spark` extra pins (pyproject.toml).
EXECUTOR_PACKAGES = ("pyarrow==22.0.0", "numpy==2.4.6")

CONFIG = """pipeline = "cluster"
[bronze]
path = "{root}/bronze"
[silver]
path = "{root}/silver"
[state]
path = "{root}/state"
[source]
name = "shop"
dsn = "{dsn}"
slot = "cluster_slot"
publication = "cluster_pub"
create_slot = true
snapshot = "initial"
[land]
batch_seconds = 1.0
idle_exit_seconds = 1.0
"""

SCHEMA = [
    "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, balance numeric(12,2), joined timestamptz, "
    "vip boolean, tags text[], doc jsonb)",
    "CREATE TABLE events (kind text NOT NULL, n bigint)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
    "INSERT INTO customers SELECT g, 'c' || g, g * 1.25, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour', "
    "g % 3 = 0, ARRAY['t' || g, 'x'], jsonb_build_object('g', g) FROM generate_series(1, 300) g",
    "INSERT INTO events SELECT 'boot', g FROM generate_series(1, 50) g",
    "CREATE PUBLICATION cluster_pub FOR TABLE customers, events",
]
CHANGES = [
    "UPDATE customers SET balance = balance + 1, vip = NOT vip WHERE id % 7 = 0",
    "DELETE FROM customers WHERE id BETWEEN 20 AND 40",
    "UPDATE customers SET id = id + 1000 WHERE id BETWEEN 290 AND 300",     # key moves
    "INSERT INTO customers SELECT g, repeat('long', 2000), NULL, now(), NULL, NULL, NULL FROM generate_series(400, 420) g",
    "UPDATE customers SET vip = true WHERE id BETWEEN 400 AND 410",        # unchanged TOAST
    "DELETE FROM events WHERE n > 40",
    "INSERT INTO events VALUES ('late', NULL)",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    found = _delta_jars()
    cluster = start_standalone(tmp_path_factory.mktemp("standalone"), workers=2, cores=1, memory="1g")
    try:
        yield cluster, found
    finally:
        cluster.stop()


def _delta_jars() -> list[Path]:
    from cdc_apply.spark.jars import find_delta_jars

    found = find_delta_jars()
    if not found.jars:
        pytest.skip(found.missing_message())
    return found.jars


@pytest.fixture(scope="module")
def landed(postgres, tmp_path_factory):
    """A pipeline folder whose bronze holds the snapshot and the changes, landed by ``cdc-apply land``."""
    root = tmp_path_factory.mktemp("cluster-lake")
    postgres.create_database("cluster")
    for sql in SCHEMA:
        postgres.execute(sql, dbname="cluster")
    (root / "pipeline.toml").write_text(CONFIG.format(root=root, dsn=postgres.dsn("cluster")))
    _land(root, "land-1")
    for sql in CHANGES:
        postgres.execute(sql, dbname="cluster")
    _land(root, "land-2")
    return root


def _land(root: Path, name: str) -> None:
    run = CliProcess(name, ["land", "--config", str(root / "pipeline.toml"), "--once"], root / "logs", root).wait(300)
    assert run.returncode == 0, run.describe()


def _submit(cluster, jars: list[Path], root: Path, name: str, python: Path, *extra: str):
    master = cluster.master_url
    args = [spark_home() / "bin" / "spark-submit", "--master", master, "--driver-memory", "1g",
            "--executor-memory", "1g", "--conf", "spark.ui.enabled=false",
            "--conf", f"spark.pyspark.python={python}", "--conf", f"spark.pyspark.driver.python={sys.executable}",
            "--jars", ",".join(map(str, jars)), *extra,
            REPO / "jobs" / "apply_changes.py", "--config", root / "pipeline.toml", "--once"]
    # The driver imports this checkout (PYTHONPATH); the executors get only what the job ships them.
    env = cluster_env(PYTHONPATH=os.environ.get("PYTHONPATH", ""), JAVA_TOOL_OPTIONS="-XX:TieredStopAtLevel=1")
    return run_group(name, args, root / "logs", root, env, timeout=600)


def test_spark_submit_on_a_standalone_cluster_ships_cdc_apply_to_executors_without_it(cluster, landed, postgres,
                                                                                       spark, tmp_path_factory):
    from cdc_apply.config import load_config
    from cdc_apply.testing.compare import compare_with_postgres

    standalone, jars = cluster
    python = executor_python(REPO / ".tmp" / "executor-python", EXECUTOR_PACKAGES)
    bare = run_group("bare-import", [python, "-c", "import cdc_apply"], landed / "logs", Path("/"),
                     cluster_env())
    assert bare.returncode != 0 and "No module named 'cdc_apply'" in bare.stderr   # the executors' Python lacks it
    run = _submit(standalone, jars, landed, "apply", python)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert re.search(r"executors \(Python [\d.]+ at .*executor-python/bin/python\) import cdc_apply from "
                     r"cdc_apply-[0-9a-f]{16}\.zip, shipped by addPyFile; 2 shuffle partitions \(the cluster's task "
                     r"slots\)", run.stdout), run.stdout[-4000:]
    assert f"master {standalone.master_url}" in run.stdout
    conn = postgres.connect("cluster")
    try:
        checks = compare_with_postgres(spark, load_config(landed / "pipeline.toml"), conn, source="shop",
                                       schemas=["public"])
    finally:
        conn.close()
    assert len(checks) == 2 and all(c.equal for c in checks), "\n".join(c.line() for c in checks)
    print(f"spark-submit on the standalone cluster: {run.seconds:.1f}s")


def test_executors_without_pyarrow_stop_the_job_before_any_work_with_one_line_naming_what_to_install(
        cluster, landed, tmp_path_factory):
    standalone, jars = cluster
    python = executor_python(tmp_path_factory.mktemp("bare") / "python", ())
    run = _submit(standalone, jars, landed, "apply-bare", python)
    assert run.returncode == 2, run.stdout[-4000:] + run.stderr[-4000:]
    errors = [line for line in run.stdout.splitlines() + run.stderr.splitlines() if "cdc-apply: error:" in line]
    assert len(errors) == 1, run.stdout[-4000:]
    assert f"the executors' Python lacks {', '.join(EXECUTOR_NEEDS)}" in errors[0]
    assert "Traceback" not in run.stdout + run.stderr
