"""The S3A file system's jars (``s3a://`` paths) for sessions this package starts, fetched on request.

pyspark ships Hadoop's client (``hadoop-client-api`` / ``-runtime``) but not ``hadoop-aws``, which holds
the ``s3a://`` file system, nor the AWS SDK it calls. They must match Spark's Hadoop exactly: pyspark
4.1.1 ships Hadoop 3.4.2, so ``org.apache.hadoop:hadoop-aws:3.4.2`` and the SDK v2 ``bundle`` it depends on
(about 640 MB). Nothing fetches them unless asked — ``python -m cdc_apply.spark.jars --s3`` (``make
cluster`` does) puts them in ``.jars-s3/`` in a checkout (``~/.cache/cdc_apply/jars-s3`` for an installed
package, or ``$CDC_APPLY_S3_JARS``). A cluster (EMR, Databricks, a Hadoop image) brings its own: give
Spark those instead (``--packages org.apache.hadoop:hadoop-aws:<its Hadoop version>``).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from cdc_apply.errors import SetupError

log = logging.getLogger("cdc_apply.spark")

S3_JARS_ENV = "CDC_APPLY_S3_JARS"
STAMP = ".complete"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>cdc_apply</groupId>
  <artifactId>s3a-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-aws</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def spark_hadoop_version() -> str:
    """The Hadoop version of pyspark's own client jars (``hadoop-client-api-<version>.jar``)."""
    import pyspark  # local import: only set-up needs pyspark here

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        return jar.name[len("hadoop-client-api-"):-len(".jar")]
    raise SetupError("pyspark ships no hadoop-client-api jar, so the matching hadoop-aws is unknown", path=str(jars))


def hadoop_aws_artifact() -> str:
    """``org.apache.hadoop:hadoop-aws:<Spark's Hadoop version>``."""
    return f"org.apache.hadoop:hadoop-aws:{spark_hadoop_version()}"


def default_s3_jars_dir() -> Path:
    """``$CDC_APPLY_S3_JARS``; else ``.jars-s3/`` in a checkout; else ``~/.cache/cdc_apply/jars-s3``."""
    env = os.environ.get(S3_JARS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "cdc_apply" / "spark").is_dir():
        return checkout / ".jars-s3"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "cdc_apply" / "jars-s3"


def installed_s3_jars(jars_dir: Path | None = None) -> list[Path]:
    """The jars of a completed fetch of the artifact Spark's Hadoop needs, or ``[]``."""
    jars_dir = jars_dir or default_s3_jars_dir()
    stamp = jars_dir / STAMP
    if not stamp.is_file() or stamp.read_text().strip() != hadoop_aws_artifact():
        return []
    return sorted(jars_dir.glob("*.jar"))


def fetch_s3_jars(jars_dir: Path | None = None) -> list[Path]:
    """Fetch ``hadoop-aws`` (Spark's Hadoop version) and its runtime dependencies with Maven into
    ``jars_dir``; returns at once when a completed fetch is there. The jars are gathered in a folder
    beside it and moved in whole, so an interrupted fetch leaves no half folder behind a stamp."""
    jars_dir = jars_dir or default_s3_jars_dir()
    done = installed_s3_jars(jars_dir)
    if done:
        return done
    artifact = hadoop_aws_artifact()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError("Maven (mvn) is not on PATH; install it (Debian: apt-get install maven) to fetch the s3a "
                         "jars", artifact=artifact)
    jars_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".s3a-jars-", dir=jars_dir.parent) as tmp:
        staging = Path(tmp)
        (staging / "pom.xml").write_text(_POM.format(version=artifact.rsplit(":", 1)[1]))
        out = staging / "jars"
        log.info("fetching %s and the AWS SDK bundle it needs (about 640 MB) with Maven ...", artifact)
        proc = subprocess.run([mvn, "-B", "-q", "-f", str(staging / "pom.xml"), "dependency:copy-dependencies",
                               "-DincludeScope=runtime", f"-DoutputDirectory={out}"], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise SetupError("Maven could not fetch the s3a jars; check that Maven Central is reachable. Maven "
                             "said:\n" + tail, artifact=artifact, exit_code=proc.returncode)
        if not any(j.name.startswith("hadoop-aws-") for j in out.glob("*.jar")):
            raise SetupError("Maven finished but no hadoop-aws jar arrived", artifact=artifact)
        (out / STAMP).write_text(artifact + "\n")
        if jars_dir.exists():
            shutil.rmtree(jars_dir)
        out.rename(jars_dir)
    found = installed_s3_jars(jars_dir)
    log.info("%d jars in %s", len(found), jars_dir)
    return found


LOG_STORE_SOURCE = Path(__file__).resolve().parent / "java" / "cdc_apply" / "delta" / "S3ConditionalPutLogStore.java"


def log_store_jar(delta_jars: list[Path] | None = None, *, build: bool = True) -> Path | None:
    """The jar of cdc_apply's log store for exclusive commits on S3 (:mod:`cdc_apply.spark.s3_commits`),
    compiled from :data:`LOG_STORE_SOURCE` with ``javac`` against Spark's Hadoop, Delta's storage jar and
    the AWS SDK the s3a jars bring, into ``~/.cache/cdc_apply/logstore/<source hash>/`` (a changed source
    is built anew). None when it is not built and ``build`` is false; a :class:`SetupError` when it cannot
    be built (no ``javac``, no s3a jars, no ``delta-storage`` jar among ``delta_jars``)."""
    import hashlib

    import pyspark  # local import: only set-up needs pyspark here

    from cdc_apply.spark.s3_commits import LOG_STORE_JAR

    digest = hashlib.sha256(LOG_STORE_SOURCE.read_bytes()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "cdc_apply" / "logstore" / digest
    jar = cache / LOG_STORE_JAR
    if jar.is_file() or not build:
        return jar if jar.is_file() else None
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar_tool is None:
        raise SetupError("building cdc_apply's S3 log store needs a JDK (javac and jar on PATH; Debian: apt-get "
                         "install openjdk-17-jdk-headless)", source=str(LOG_STORE_SOURCE))
    spark_jars = Path(pyspark.__file__).resolve().parent / "jars"
    classpath = [*spark_jars.glob("hadoop-client-api-*.jar"), *installed_s3_jars(),
                 *(j for j in delta_jars or [] if j.name.startswith("delta-storage-"))]
    if not any(j.name.startswith("bundle-") for j in classpath) or not any(
            j.name.startswith("delta-storage-") for j in classpath):
        raise SetupError("building cdc_apply's S3 log store needs the s3a jars and Delta's jars: run "
                         "python -m cdc_apply.spark.jars --s3 first", source=str(LOG_STORE_SOURCE))
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=cache.parent) as tmp:
        classes = Path(tmp) / "classes"
        for cmd in ([javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp",
                     os.pathsep.join(str(j) for j in classpath), str(LOG_STORE_SOURCE)],
                    [jar_tool, "cf", str(Path(tmp) / LOG_STORE_JAR), "-C", str(classes), "cdc_apply"]):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SetupError("building cdc_apply's S3 log store failed:\n" + (proc.stdout + proc.stderr)[-2000:],
                                 source=str(LOG_STORE_SOURCE))
        cache.mkdir(exist_ok=True)
        os.replace(Path(tmp) / LOG_STORE_JAR, jar)
    log.info("built %s", jar)
    return jar
