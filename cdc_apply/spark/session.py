"""Spark sessions: the active one on Databricks, a local ``local[2]`` one elsewhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from cdc_apply.errors import SetupError
from cdc_apply.spark.jars import DELTA_ARTIFACT, default_jars_dir, installed_jars

MIN_JAVA = 17
_LOG4J = Path(__file__).with_name("log4j2.properties")

# Settings sized for a small local machine; a caller's **conf wins over these.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Task counts (shuffle partitions, default parallelism, Delta's state-reconstruction partitions)
    # are set from the master's cores in spark_session: see _task_counts.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",
    "spark.sql.adaptive.enabled": "true",
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "false",
    # A batch compiles a few hundred distinct classes (each table's MERGE phases, Delta's log
    # queries); Spark's cache keeps 100, so a batch compiled the same classes again and again.
    # Static: set it when the cluster starts (docs/ARCHITECTURE.md).
    "spark.sql.codegen.cache.maxEntries": "2000",
    "spark.sql.codegen.maxFields": "400",  # as the job's batches run (BATCH_SETTINGS), from the start
}


def local_cores(master: str) -> int | None:
    """Task slots of a local master (``local``: 1, ``local[N]`` / ``local[N,F]``: N, ``local[*]``: this
    machine's CPUs); ``None`` for any other master."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if not match:
        return None
    slots = match.group(1)
    if slots is None:
        return 1
    return (os.cpu_count() or 1) if slots == "*" else int(slots)


def _task_counts(cores: int) -> dict[str, str]:
    """One task per core for shuffles and the default parallelism, one for Delta's state reconstruction.

    A job that keeps up runs small batches, whose stages are many tiny tasks, and each task pays fixed
    costs — generating its projections' Java source again (Delta's log readers, its statistics
    collector, shuffle writers), a hand-off to a Python worker for the decode. With twice as many
    tasks as cores (the earlier 4 on local[2]) the apply-rules runs took ~30 % longer and the sweep's
    1,000-change batches ~15 % (docs/BENCHMARKS.md); a large batch still gets its partitions from its
    size (the decode's per 25,000 messages, the collapse's per ~2M values), and adaptive execution
    coalesces the rest.
    """
    return {"spark.sql.shuffle.partitions": str(cores), "spark.default.parallelism": str(cores),
            "spark.databricks.delta.snapshotPartitions": "1"}


def java_version(java: str | None = None) -> int:
    """Major version of the Java that Spark will start (``$JAVA_HOME`` or PATH)."""
    if java is None:
        home = os.environ.get("JAVA_HOME")
        java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise SetupError(
            f"no Java found; install a Java {MIN_JAVA} runtime (Debian: apt-get install openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
    proc = subprocess.run([java, "-version"], capture_output=True, text=True)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if not match:
        raise SetupError("cannot read the Java version", java=java, output=(proc.stderr or proc.stdout).strip())
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_..." style
        major = int(match.group(2))
    return major


def _active_delta_session():
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None:
        return None
    conf = active.conf
    extensions = conf.get("spark.sql.extensions", "") or ""
    if "io.delta" in extensions or conf.get("spark.databricks.clusterUsageTags.clusterId", None):
        return active
    return None


def spark_session(app_name: str = "cdc_apply", **conf: Any):
    """Return a Spark session with Delta Lake.

    On Databricks (or whenever a session with Delta is already active) the
    active session is returned untouched. Otherwise a local session is built:
    ``local[2]``, the Delta SQL extension and catalog, one shuffle partition per core,
    session time zone UTC, and the Delta jars fetched by ``make setup``.

    Keyword arguments are Spark settings and override the local defaults; pass
    dotted keys with ``**{"spark.sql.shuffle.partitions": "8"}``.
    """
    active = _active_delta_session()
    if active is not None:
        return active

    major = java_version()
    if major < MIN_JAVA:
        raise SetupError(
            f"Java {major} found, Spark 4 needs Java {MIN_JAVA} or newer; install openjdk-17 and point JAVA_HOME at it"
        )
    jars = installed_jars()
    if not jars:
        raise SetupError(
            f"the Delta jars are not installed in {default_jars_dir()}; run `make setup` "
            f"(or `python -m cdc_apply.spark.jars`) once with access to Maven Central",
            artifact=DELTA_ARTIFACT,
        )

    from pyspark.sql import SparkSession

    settings = dict(LOCAL_DEFAULTS)
    # Python workers must run the interpreter (and virtualenv) of the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings["spark.pyspark.python"] = os.environ["PYSPARK_PYTHON"]
    settings["spark.jars"] = ",".join(str(j) for j in jars)
    # A JVM outside UTC makes Delta rebuild a table's whole state after every commit to verify its
    # checksum (allFilesInCrc.verificationMode.forceOnNonUTC): the JVM runs in UTC like the session.
    # The parallel collector: the apply job is a throughput workload, and on two cores G1's concurrent
    # work took ~12 s of a 1M-change batch against ~4 s (10 % faster batches; docs/BENCHMARKS.md).
    java_opts = f"-Dlog4j.configurationFile=file:{_LOG4J} -Duser.timezone=UTC -XX:+UseParallelGC"
    settings["spark.driver.extraJavaOptions"] = java_opts
    settings["spark.executor.extraJavaOptions"] = java_opts
    settings.update({k: str(v) for k, v in conf.items()})
    cores = local_cores(settings["spark.master"])
    if cores is not None:
        settings = {**_task_counts(cores), **settings}

    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
