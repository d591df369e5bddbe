"""Delta Lake jars for sessions this package starts: where to find them, and a one-time fetch.

The Delta artifact carries the Spark minor version (``delta-spark_4.1_2.13``).
Maven resolves it with its runtime dependencies; every jar that pyspark
already ships (Scala, Hadoop, Parquet, Jackson, ...) is dropped so Spark's own
copies stay the only ones on the class path. What remains is written to a
folder (``.jars/`` in a checkout, ``~/.cache/cdc_apply/jars`` for an installed
package, or ``$CDC_APPLY_JARS``) with a stamp file, so later runs skip the
fetch and need no network.

:func:`find_delta_jars` looks, in order, in ``$CDC_APPLY_JARS`` (any folder
holding the delta-spark jar: a copy of ``.jars/``, the jars a cluster image
ships ...), in that fetched folder, and in Maven's local repository
(``~/.m2/repository``, where any earlier Maven build of Delta left them).

Run ``python -m cdc_apply.spark.jars`` (``make setup`` does) to fetch. :func:`delta_for_new_session`
says, from files alone, which Delta a session started here would load (``cdc-apply --version``).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from cdc_apply.errors import SetupError

log = logging.getLogger("cdc_apply.spark")

SPARK_MINOR = "4.1"
SCALA_BINARY = "2.13"
DELTA_VERSION = "4.4.0"
DELTA_ARTIFACT = f"io.delta:delta-spark_{SPARK_MINOR}_{SCALA_BINARY}:{DELTA_VERSION}"
DELTA_JAR_PREFIX = f"delta-spark_{SPARK_MINOR}_{SCALA_BINARY}-"
STAMP = ".complete"
JARS_ENV = "CDC_APPLY_JARS"

# What a fetch of DELTA_ARTIFACT keeps (its runtime dependencies minus what pyspark ships), as Maven
# coordinates: the jars looked up in a local Maven repository. tests/spark/test_jars.py checks this list
# against a fetched folder, so a new pinned version cannot leave it behind.
DELTA_RUNTIME_JARS: tuple[tuple[str, str, str], ...] = (
    ("io.delta", f"delta-spark_{SPARK_MINOR}_{SCALA_BINARY}", DELTA_VERSION),
    ("io.delta", "delta-storage", DELTA_VERSION),
    ("io.delta", "delta-kernel-api", DELTA_VERSION),
    ("io.delta", "delta-kernel-defaults", DELTA_VERSION),
    ("io.delta", "delta-kernel-unitycatalog", DELTA_VERSION),
    ("io.unitycatalog", "unitycatalog-client", "0.6.0"),
    ("io.unitycatalog", "unitycatalog-hadoop", "0.6.0"),
    ("commons-logging", "commons-logging", "1.3.0"),
    ("javax.annotation", "javax.annotation-api", "1.3.2"),
    ("com.fasterxml.jackson.datatype", "jackson-datatype-jdk8", "2.20.0"),  # Spark 4.1.1's Jackson
)

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
    """Where a fetch puts the jars: ``$CDC_APPLY_JARS``; else ``.jars/`` in a checkout (next to
    ``pyproject.toml``); else ``$XDG_CACHE_HOME/cdc_apply/jars`` (``~/.cache/cdc_apply/jars``) for an
    installed package, whose own folder (site-packages) is no place for downloads."""
    env = os.environ.get(JARS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "cdc_apply" / "spark").is_dir():
        return checkout / ".jars"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "cdc_apply" / "jars"


def maven_repository() -> Path:
    """Maven's local repository (``~/.m2/repository``)."""
    return Path.home() / ".m2" / "repository"


@dataclass
class JarSearch:
    """Where :func:`find_delta_jars` looked, and what it found (``jars`` empty: nothing usable)."""

    jars: list[Path] = field(default_factory=list)
    origin: str = ""                                   # where ``jars`` came from
    looked: list[str] = field(default_factory=list)    # every place tried, for the error message

    def missing_message(self) -> str:
        """What to pass or run when no jars were found: the exact options, not a hint."""
        return (f"Delta Lake ({DELTA_ARTIFACT}) is not on Spark's class path and no copy of its jars was found "
                f"(looked in {'; '.join(self.looked)}). Give Spark the jars: `spark-submit --packages "
                f"{DELTA_ARTIFACT} ...` (needs Maven Central or a mirror), or `--jars` with "
                f"{DELTA_JAR_PREFIX}{DELTA_VERSION}.jar and its dependencies; or set {JARS_ENV} to a folder "
                "holding them; or fetch them once with `python -m cdc_apply.spark.jars` (Maven, into "
                f"{default_jars_dir()})")


def jars_in_folder(folder: Path) -> list[Path]:
    """Every jar in ``folder`` when the delta-spark jar is among them (no stamp needed), else ``[]``."""
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    return jars if any(j.name.startswith(DELTA_JAR_PREFIX) for j in jars) else []


def maven_cache_jars(repository: Path | None = None) -> list[Path]:
    """The jars of :data:`DELTA_RUNTIME_JARS` in a local Maven repository, or ``[]`` if any is missing."""
    repository = repository or maven_repository()
    found = []
    for group, artifact, version in DELTA_RUNTIME_JARS:
        jar = repository.joinpath(*group.split("."), artifact, version, f"{artifact}-{version}.jar")
        if not jar.is_file():
            return []
        found.append(jar)
    return found


def find_delta_jars() -> JarSearch:
    """The Delta jars for a session this package starts, from the first place that has them all.

    ``$CDC_APPLY_JARS`` when set (any folder with the delta-spark jar; a folder without it is a
    :class:`SetupError`, not a reason to look elsewhere: the setting would be silently ignored), then
    the fetched folder (:func:`default_jars_dir`, stamped), then Maven's local repository.
    """
    search = JarSearch()
    env = os.environ.get(JARS_ENV)
    if env:
        folder = Path(env).expanduser().resolve()
        search.jars = jars_in_folder(folder)
        if not search.jars:
            raise SetupError(f"{JARS_ENV} names a folder without {DELTA_JAR_PREFIX}{DELTA_VERSION}.jar; point it at a "
                             "folder holding the Delta jars (a copy of a checkout's .jars/), or unset it",
                             folder=str(folder))
        search.origin = f"{JARS_ENV} ({folder})"
        return search
    fetched = default_jars_dir()
    search.looked.append(f"{fetched} (python -m cdc_apply.spark.jars)")
    search.jars = installed_jars(fetched)
    if search.jars:
        search.origin = str(fetched)
        return search
    repository = maven_repository()
    search.looked.append(f"{repository} (Maven's local repository)")
    search.jars = maven_cache_jars(repository)
    if search.jars:
        search.origin = f"{repository} (Maven's local repository)"
    return search


class DeltaJar(NamedTuple):
    """A delta-spark jar (or ``--packages`` coordinate) a session would load, and where it was seen."""

    artifact: str      # delta-spark_4.1_2.13
    version: str       # its manifest's Implementation-Version, else the version in its name
    where: str         # the folder, or the setting, that names it


_DELTA_JAR_NAME = re.compile(r"^(delta-(?:spark|core)_[^-]+)-(.+)\.jar$")
_DELTA_COORDINATE = re.compile(r"io\.delta:(delta-(?:spark|core)_[^:,]+):([^:,\s]+)")


def delta_jar(jar: Path, where: str | None = None) -> DeltaJar | None:
    """What a delta-spark jar file is, from its name and its manifest (no JVM): ``None`` for other files."""
    match = _DELTA_JAR_NAME.match(jar.name)
    if not match:
        return None
    version = match.group(2)
    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
        found = re.search(r"^Implementation-Version:\s*(\S+)", manifest, re.M)
        version = found.group(1) if found else version
    except (OSError, KeyError, zipfile.BadZipFile):
        pass  # the name's version stands: an unreadable jar fails later, when a session loads it
    return DeltaJar(match.group(1), version, where or str(jar.parent))


def _first_delta_jar(jars, where: str | None = None) -> DeltaJar | None:
    return next((found for found in (delta_jar(Path(j), where) for j in jars) if found), None)


def delta_for_new_session() -> DeltaJar | None:
    """The Delta a session started in this process would load, from files alone (no JVM, no network), in
    the order its class path would take it: a delta-spark jar in Spark's own jars folder (on the JVM's
    class path from its start), one named by ``spark.jars`` or ``spark.jars.packages`` in
    ``spark-defaults.conf`` / ``PYSPARK_SUBMIT_ARGS``, then what :func:`find_delta_jars` finds.
    ``None`` when there is none (a session would stop with :meth:`JarSearch.missing_message`)."""
    from cdc_apply.spark.user_conf import spark_defaults_conf, spark_home, submit_args_conf

    home = spark_home()
    spark_jars = home / "jars" if home else None
    if spark_jars is not None and spark_jars.is_dir():
        found = _first_delta_jar(sorted(spark_jars.glob("delta-*.jar")), f"Spark's jars ({spark_jars})")
        if found:
            return found
    user = {**spark_defaults_conf(), **submit_args_conf(os.environ.get("PYSPARK_SUBMIT_ARGS"))}
    found = _first_delta_jar([j.strip() for j in user.get("spark.jars", "").split(",") if j.strip()],
                             "spark.jars")
    if found:
        return found
    coordinate = _DELTA_COORDINATE.search(user.get("spark.jars.packages", ""))
    if coordinate:
        return DeltaJar(coordinate.group(1), coordinate.group(2), "spark.jars.packages")
    try:
        search = find_delta_jars()
    except SetupError:
        return None  # $CDC_APPLY_JARS names a folder without Delta: a session would stop saying so
    return _first_delta_jar(search.jars, search.origin)


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

    Idempotent: returns at once when a completed fetch of the same artifact is there, or when
    ``$CDC_APPLY_JARS`` names a folder that already holds the delta-spark jar (a folder of the user's:
    a fetch would replace its jars).
    """
    jars_dir = jars_dir or default_jars_dir()
    done = installed_jars(jars_dir)
    if done:
        return done
    env = os.environ.get(JARS_ENV)
    if env and Path(env).expanduser().resolve() == jars_dir.resolve() and jars_in_folder(jars_dir):
        log.info("%s already holds the Delta jars (%s); nothing fetched", jars_dir, JARS_ENV)
        return jars_in_folder(jars_dir)
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
            log.info("fetching %s and its dependencies with Maven ...", DELTA_ARTIFACT)
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
        log.info("%d jars in %s", len(kept), jars_dir)
    return sorted(kept)


def main(argv: list[str] | None = None) -> int:
    """Fetch the Delta jars; with ``--s3``, the s3a file system's jars too (cdc_apply.spark.s3_jars)."""
    from cdc_apply.log import configure_logging

    configure_logging("INFO", fmt="cdc_apply: %(message)s")
    args = sys.argv[1:] if argv is None else argv
    try:
        delta_jars = fetch_delta_jars()
        if "--s3" in args:
            from cdc_apply.spark.s3_jars import fetch_s3_jars, log_store_jar

            fetch_s3_jars()
            log.info("S3 log store for exclusive commits: %s", log_store_jar(delta_jars))
    except SetupError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
