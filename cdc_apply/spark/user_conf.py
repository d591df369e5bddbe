"""The Spark settings a user already gave outside cdc_apply: ``PYSPARK_SUBMIT_ARGS`` and ``spark-defaults.conf``,
read as spark-submit reads them, and a log4j configuration of theirs (a session cdc_apply builds keeps them:
see cdc_apply.spark.session)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

# spark-submit options (as in PYSPARK_SUBMIT_ARGS) and the settings they stand for.
_SUBMIT_OPTIONS = {
    "--master": "spark.master", "--deploy-mode": "spark.submit.deployMode", "--name": "spark.app.name",
    "--jars": "spark.jars", "--packages": "spark.jars.packages", "--exclude-packages": "spark.jars.excludes",
    "--repositories": "spark.jars.repositories", "--driver-memory": "spark.driver.memory",
    "--driver-java-options": "spark.driver.extraJavaOptions", "--driver-class-path": "spark.driver.extraClassPath",
    "--driver-cores": "spark.driver.cores", "--executor-memory": "spark.executor.memory",
    "--executor-cores": "spark.executor.cores", "--num-executors": "spark.executor.instances",
}


def submit_args_conf(args: str | None) -> dict[str, str]:
    """The settings a ``PYSPARK_SUBMIT_ARGS`` value gives: its options and its ``--conf key=value`` pairs."""
    out: dict[str, str] = {}
    tokens = shlex.split(args or "")
    i = 0
    while i < len(tokens):
        token, value = tokens[i], None
        if "=" in token and token.startswith("--"):
            token, value = token.split("=", 1)
        if token in ("--conf", "-c") or token in _SUBMIT_OPTIONS:
            if value is None:
                i += 1
                value = tokens[i] if i < len(tokens) else ""
            if token in ("--conf", "-c"):
                key, _, setting = value.partition("=")
                out[key.strip()] = setting
            else:
                out[_SUBMIT_OPTIONS[token]] = value
        i += 1
    return out


def spark_home() -> Path | None:
    """``$SPARK_HOME``, else pip pyspark's folder (found without importing pyspark); ``None`` without either."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home)
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def _spark_conf_dir() -> Path | None:
    if os.environ.get("SPARK_CONF_DIR"):
        return Path(os.environ["SPARK_CONF_DIR"])
    home = spark_home()
    return home / "conf" if home else None


def spark_defaults_conf(conf_dir: Path | None = None) -> dict[str, str]:
    """The settings of ``spark-defaults.conf`` (``$SPARK_CONF_DIR`` or ``$SPARK_HOME/conf``), as spark-submit
    reads them: one ``key value`` or ``key=value`` per line, ``#`` comments."""
    conf_dir = conf_dir or _spark_conf_dir()
    file = conf_dir / "spark-defaults.conf" if conf_dir else None
    if file is None or not file.is_file():
        return {}
    out = {}
    for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"(\S+?)\s*(?:=|\s)\s*(.*)$", line)
        if match and match.group(1).startswith("spark."):
            out[match.group(1)] = match.group(2).strip()
    return out


# The names log4j 2 looks for on the class path, where spark-submit puts the Spark conf folder.
_LOG4J_NAMES = tuple(f"{stem}.{ext}" for stem in ("log4j2-test", "log4j2")
                     for ext in ("properties", "yaml", "yml", "json", "jsn", "xml"))


def user_log4j_file(conf_dir: Path | None = None) -> str | None:
    """A log4j 2 configuration of the user's that a JVM started by spark-submit would load: the file
    ``$LOG4J_CONFIGURATION_FILE`` names, or a ``log4j2.properties`` (``.xml``, ...) in the Spark conf
    folder (``$SPARK_CONF_DIR`` or ``$SPARK_HOME/conf``); ``None`` when there is none."""
    if os.environ.get("LOG4J_CONFIGURATION_FILE"):
        return os.environ["LOG4J_CONFIGURATION_FILE"]
    conf_dir = conf_dir or _spark_conf_dir()
    if conf_dir is None:
        return None
    return next((str(conf_dir / name) for name in _LOG4J_NAMES if (conf_dir / name).is_file()), None)
