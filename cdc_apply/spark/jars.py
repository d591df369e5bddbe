"""Delta Lake jars for local runs: fetched once with Maven, then used offline.

The Delta artifact carries the Spark minor version (``delta-spark_4.1_2.13``).
Maven resolves it with its runtime dependencies; every jar that pyspark
already ships (Scala, Hadoop, Parquet, Jackson, ...) is dropped so Spark's own
copies stay the only ones on the class path. What remains is written to an
ignored folder (``.jars/`` in a checkout) with a stamp file, so later runs skip
the fetch and need no network.

Run ``python -m cdc_apply.spark.jars`` (``make setup`` does) to fetch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cdc_apply.errors import SetupError

SPARK_MINOR = "4.1"
SCALA_BINARY = "2.13"
DELTA_VERSION = "4.4.0"
DELTA_ARTIFACT = f"io.delta:delta-spark_{SPARK_MINOR}_{SCALA_BINARY}:{DELTA_VERSION}"
STAMP = ".complete"
JARS_ENV = "CDC_APPLY_JARS"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>cdc_apply</groupId>
  <artifactId>delta-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
      <!-- keep Jackson modules on the version Spark ships -->
      <dependency>
        <groupId>com.fasterxml.jackson.datatype</groupId>
        <artifactId>jackson-datatype-jdk8</artifactId>
        <version>{jackson}</version>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""

_VERSION_SUFFIX = re.compile(r"-\d[^-]*\.jar$")


def default_jars_dir() -> Path:
    """Where the jars live: ``$CDC_APPLY_JARS`` or ``.jars/`` next to the package."""
    env = os.environ.get(JARS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / ".jars"


def installed_jars(jars_dir: Path | None = None) -> list[Path]:
    """The jar files of a completed fetch, or ``[]`` when there is none."""
    jars_dir = jars_dir or default_jars_dir()
    stamp = jars_dir / STAMP
    if not stamp.exists() or stamp.read_text().strip() != DELTA_ARTIFACT:
        return []
    return sorted(jars_dir.glob("*.jar"))


def _pyspark_jars_dir() -> Path:
    import pyspark  # local import: only set-up needs pyspark here

    return Path(pyspark.__file__).resolve().parent / "jars"


def _artifact_name(jar: Path) -> str:
    return _VERSION_SUFFIX.sub("", jar.name)


def _spark_jackson_version(spark_jars: Path) -> str:
    for jar in spark_jars.glob("jackson-databind-*.jar"):
        return jar.name[len("jackson-databind-") : -len(".jar")]
    raise SetupError("pyspark ships no jackson-databind jar", path=str(spark_jars))


def fetch_delta_jars(jars_dir: Path | None = None, *, quiet: bool = False) -> list[Path]:
    """Fetch the Delta artifact and its runtime dependencies into ``jars_dir``.

    Idempotent: returns at once when a completed fetch of the same artifact is there.
    """
    jars_dir = jars_dir or default_jars_dir()
    done = installed_jars(jars_dir)
    if done:
        return done
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError(
            "Maven (mvn) is not on PATH; install it (Debian: apt-get install maven) and run `make setup` again",
            artifact=DELTA_ARTIFACT,
        )
    spark_jars = _pyspark_jars_dir()
    shipped = {_artifact_name(j) for j in spark_jars.glob("*.jar")}
    group, artifact, version = DELTA_ARTIFACT.split(":")
    with tempfile.TemporaryDirectory(prefix="cdc_apply_jars_") as tmp:
        tmp_path = Path(tmp)
        (tmp_path / "pom.xml").write_text(
            _POM.format(jackson=_spark_jackson_version(spark_jars), group=group, artifact=artifact, version=version)
        )
        out = tmp_path / "out"
        cmd = [
            mvn, "-B", "-q", "-f", str(tmp_path / "pom.xml"),
            "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={out}",
        ]
        if not quiet:
            print(f"cdc_apply: fetching {DELTA_ARTIFACT} and its dependencies with Maven ...", file=sys.stderr)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise SetupError(
                "Maven could not fetch the Delta jars. Check that Maven Central "
                "(https://repo.maven.apache.org) is reachable, or configure a mirror in ~/.m2/settings.xml, "
                "then retry with `make setup`. Maven said:\n" + tail,
                artifact=DELTA_ARTIFACT,
                exit_code=proc.returncode,
            )
        jars_dir.mkdir(parents=True, exist_ok=True)
        for old in jars_dir.glob("*.jar"):
            old.unlink()
        kept = []
        for jar in sorted(out.glob("*.jar")):
            # RoaringBitmap's "shims" belong to the 0.9 line; Spark ships 1.x without them.
            if _artifact_name(jar) in shipped or jar.name.startswith("shims-"):
                continue
            shutil.copy2(jar, jars_dir / jar.name)
            kept.append(jars_dir / jar.name)
    if not any(j.name.startswith(f"delta-spark_{SPARK_MINOR}") for j in kept):
        raise SetupError("Maven finished but no delta-spark jar arrived", artifact=DELTA_ARTIFACT)
    (jars_dir / STAMP).write_text(DELTA_ARTIFACT + "\n")
    if not quiet:
        print(f"cdc_apply: {len(kept)} jars in {jars_dir}", file=sys.stderr)
    return sorted(kept)


def main(argv: list[str] | None = None) -> int:
    try:
        fetch_delta_jars()
    except SetupError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
