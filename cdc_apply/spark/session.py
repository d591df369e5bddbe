"""Spark sessions: the one the user already has, or one built from the user's configuration.

:func:`classic_session` never replaces what the user decided:

* a session that already exists (Databricks, a notebook, a test fixture, ``pyspark``) is returned
  untouched, once it is known to be a classic session with Delta Lake;
* under ``spark-submit`` (the driver JVM is already running) its master, memory, ``--jars`` /
  ``--packages`` and every ``--conf`` stay as given; only settings it left unset are added (the
  Delta extension and catalog, UTC, task counts for a local master ...);
* started from plain Python, this package launches the JVM itself: ``local[2]`` and 4g unless
  ``spark-defaults.conf``, ``PYSPARK_SUBMIT_ARGS`` or the keyword arguments say otherwise.

The Delta jars are added only when Delta's classes are not on the class path already (from
``$CDC_APPLY_JARS``, the fetched folder, or Maven's local repository, see
:func:`cdc_apply.spark.jars.find_delta_jars`); when none are found the error says what to pass.
Spark Connect sessions are refused at once with what is needed instead (:data:`CONNECT_UNSUPPORTED`).

The driver JVM's own logging is made quiet (errors only, :data:`LOG4J_FILE`) in a session this package
builds or attaches to, unless the user configured it (:func:`quiet_jvm_logging`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from cdc_apply.errors import SetupError
from cdc_apply.spark.jars import DELTA_ARTIFACT, find_delta_jars
from cdc_apply.spark.user_conf import (  # noqa: F401  (spark_defaults_conf, submit_args_conf re-exported)
    spark_defaults_conf,
    submit_args_conf,
    user_log4j_file,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("cdc_apply.spark")

MIN_JAVA = 17
LOG4J_FILE = Path(__file__).with_name("log4j2.properties")
_LOG4J_OPTION = f"-Dlog4j.configurationFile=file:{LOG4J_FILE}"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
DELTA_CLASS = DELTA_EXTENSION  # present on the class path exactly when Delta's jars are

# Why Connect cannot land: the lander commits the Parquet files it wrote through Delta's JVM classes
# (delta/commit.py), which a Connect client cannot reach. The apply job and the reads run over Connect.
CONNECT_UNSUPPORTED = (
    "cdc_apply's lander needs a classic Spark session with its driver in this process, and this is a Spark "
    "Connect session: on Databricks run it on a cluster in dedicated (single user) access mode, not on "
    "serverless compute or a standard (shared) access mode cluster; elsewhere start Spark without "
    "spark.remote, SPARK_REMOTE or spark.api.mode=connect"
)

# Settings the job wants on any session it starts, added only where the user's configuration leaves
# them unset (spark-submit --conf, spark-defaults.conf, keyword arguments all win).
SESSION_DEFAULTS: dict[str, str] = {
    "spark.sql.extensions": DELTA_EXTENSION,
    "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    # Task counts (shuffle partitions, default parallelism, Delta's state-reconstruction partitions)
    # follow a local master's cores: see _task_counts.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "false",
    # A batch compiles a few hundred distinct classes (each table's MERGE phases, Delta's log
    # queries); Spark's cache keeps 100, so a batch compiled the same classes again and again.
    # Static: set it when the cluster starts (docs/ARCHITECTURE.md).
    "spark.sql.codegen.cache.maxEntries": "2000",
    "spark.sql.codegen.maxFields": "400",  # as the job's batches run (BATCH_SETTINGS), from the start
}

# ... and, when this package launches the JVM itself (plain Python), a small local machine's sizing.
# Under spark-submit the JVM already runs with what the user chose: none of these is set there.
LAUNCH_DEFAULTS: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.driver.memory": "4g",
    "spark.ui.enabled": "false",
}

# Everything a session this package launches gets by default (the JVM options come on top).
LOCAL_DEFAULTS: dict[str, str] = {**LAUNCH_DEFAULTS, **SESSION_DEFAULTS}

# The JVM of a session this package launches runs in UTC like the session: outside UTC, Delta rebuilds
# a table's whole state after every commit to verify its checksum (allFilesInCrc.verificationMode.
# forceOnNonUTC). The parallel collector: the apply job is a throughput workload, and on two cores G1's
# concurrent work took ~12 s of a 1M-change batch against ~4 s (10 % faster batches; docs/BENCHMARKS.md).
_JVM_OPTIONS = "-Duser.timezone=UTC -XX:+UseParallelGC"
JAVA_OPTIONS = f"{_LOG4J_OPTION} {_JVM_OPTIONS}"

# Spark's report of a failed streaming query: the query's loggers write it at ERROR with the whole Java
# stack (~90-140 lines, the Python traceback of foreachBatch inside), and then the command names the
# same failure in one line. Kept only when cdc_apply's logger is at DEBUG (--log-level DEBUG).
QUERY_FAILURE_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.runtime.StreamExecution",
)

# Settings by which a user chooses Spark's own logging (the level, Spark's JSON layout): with either
# set, the JVM's logging is left as Spark makes it.
USER_LOGGING_SETTINGS = ("spark.log.level", "spark.log.structuredLogging.enabled")


@contextmanager
def session_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """``settings`` on the session for the block's duration; each key's previous value (or its absence)
    comes back after, so a session shared with other work is left as it was."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


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



# -- Spark Connect ----------------------------------------------------------------------------------

def is_spark_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session: a Connect class, a ``spark.remote`` setting, or no
    ``sparkContext`` (a Connect client has no JVM to reach)."""
    if (type(spark).__module__ or "").startswith("pyspark.sql.connect"):
        return True
    try:
        if spark.conf.get("spark.remote", None):
            return True
    except Exception:  # noqa: BLE001 - a session whose conf cannot be read is judged by sparkContext alone
        pass
    try:
        spark.sparkContext
    except Exception:  # noqa: BLE001 - Connect raises its own "not supported" error class here
        return True
    return False


def require_classic(spark: Any) -> None:
    """Raise :class:`SetupError` (:data:`CONNECT_UNSUPPORTED`) when ``spark`` is a Spark Connect session."""
    if is_spark_connect(spark):
        raise SetupError(CONNECT_UNSUPPORTED)


def _connect_requested(conf: Mapping[str, Any]) -> str | None:
    """The setting that would make a new session a Spark Connect one, if any."""
    if conf.get("spark.remote"):
        return "spark.remote"
    if os.environ.get("SPARK_REMOTE"):
        return "SPARK_REMOTE"
    if str(conf.get("spark.api.mode", os.environ.get("SPARK_API_MODE", ""))).lower() == "connect":
        return "spark.api.mode=connect"
    if "SPARK_CONNECT_MODE_ENABLED" in os.environ:
        return "SPARK_CONNECT_MODE_ENABLED"
    return None


# -- the user's configuration: cdc_apply.spark.user_conf ---------------------------------------

def plan_settings(user: Mapping[str, str], overrides: Mapping[str, Any], *, launching: bool) -> dict[str, str]:
    """The settings to give the session builder: the job's defaults wherever ``user`` (the configuration
    Spark already has, from spark-submit or spark-defaults.conf) leaves a key unset, then ``overrides``
    (``classic_session``'s keyword arguments), which win over both.

    ``launching``: this process starts the JVM, so the machine sizing (:data:`LAUNCH_DEFAULTS`) applies
    too; under spark-submit it does not — the master and the memory are the user's. The Delta extension
    joins any extensions the user has. With a local master, shuffle partitions and the default
    parallelism follow its cores unless set.
    """
    defaults = {**(LAUNCH_DEFAULTS if launching else {}), **SESSION_DEFAULTS}
    settings = {key: value for key, value in defaults.items() if key not in user}
    extensions = user.get("spark.sql.extensions", "")
    if extensions and DELTA_EXTENSION not in extensions:
        settings["spark.sql.extensions"] = f"{extensions},{DELTA_EXTENSION}"
    settings.update({key: str(value) for key, value in overrides.items()})
    master = settings.get("spark.master") or user.get("spark.master") or ""
    cores = local_cores(master) if master else None
    if cores is not None:
        for key, value in _task_counts(cores).items():
            if key not in user and key not in overrides:
                settings[key] = value
    return settings


# -- Delta on the class path ----------------------------------------------------------------------

def _delta_loadable(jvm) -> bool:
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(DELTA_CLASS))


def _names_delta(conf: Mapping[str, str]) -> bool:
    return any("delta-spark" in conf.get(key, "") for key in ("spark.jars", "spark.jars.packages"))


def _with_jars(conf: Mapping[str, str], jars: list[Path]) -> str:
    listed = [j for j in conf.get("spark.jars", "").split(",") if j.strip()]
    return ",".join(listed + [str(j) for j in jars])


def _add_to_driver(jvm, jars: list[Path]) -> None:
    """Put ``jars`` on the running driver's class path (spark-submit's class loader takes more URLs);
    executors get them through ``spark.jars``."""
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        for jar in jars:
            loader.addURL(jvm.java.io.File(str(jar)).toURI().toURL())
    except Exception as exc:  # noqa: BLE001 - py4j's error names a Java class loader, not what to do
        raise SetupError(f"the Delta jars could not be added to the running driver ({str(exc).splitlines()[0]}); "
                         f"pass them to spark-submit: --packages {DELTA_ARTIFACT}, or --jars "
                         + ",".join(str(j) for j in jars)) from None
    if not _delta_loadable(jvm):
        raise SetupError("the Delta jars were added to the driver but its classes still do not load; pass them to "
                         f"spark-submit: --packages {DELTA_ARTIFACT}, or --jars " + ",".join(str(j) for j in jars))


# -- the driver JVM's logging --------------------------------------------------------------------

def _logging_chosen(conf: Mapping[str, Any]) -> str | None:
    return next((key for key in USER_LOGGING_SETTINGS if key in conf), None)


def _log4j_context(jvm):
    # The one Spark logs to: log4j keeps a context per class loader, picked by the caller's.
    return jvm.org.apache.logging.log4j.LogManager.getContext(jvm.org.apache.spark.util.Utils.getSparkClassLoader(),
                                                              False)


def log4j_source(jvm) -> str | None:
    """Where the driver JVM's log4j configuration came from (a file's location, Spark's default profile
    inside its jar), or ``None`` when log4j runs on its built-in default (no configuration found)."""
    config = _log4j_context(jvm).getConfiguration()
    if config.getClass().getName() == "org.apache.logging.log4j.core.config.DefaultConfiguration":
        return None
    location = config.getConfigurationSource().getLocation()
    return str(location) if location is not None else config.getName()


def _is_ours(location: str) -> bool:
    path = location[len("file:"):] if location.startswith("file:") else location
    try:
        return Path(path).resolve() == LOG4J_FILE.resolve()
    except (OSError, ValueError):
        return False


def _is_sparks_default(location: str) -> bool:
    # The profiles Spark loads when nothing else configured log4j (org/apache/spark/log4j2-defaults.properties,
    # its JSON-layout twin), read from inside Spark's jar.
    return "org/apache/spark/log4j2-" in location


def quiet_jvm_logging(jvm, conf: Mapping[str, Any]) -> str:
    """Make the driver JVM log errors only (:data:`LOG4J_FILE`) unless the user configured its logging;
    return what the session's log line says about it.

    The user's configuration is whatever log4j loaded other than its own default, Spark's default
    profile and this package's file — ``-Dlog4j2.configurationFile`` / ``-Dlog4j.configurationFile``
    (``--driver-java-options``, ``spark.driver.extraJavaOptions``), a ``log4j2.properties`` in
    ``$SPARK_CONF_DIR`` or elsewhere on the class path — or one of :data:`USER_LOGGING_SETTINGS` in
    ``conf``; either is left as it is. Read from the running JVM, so spark-submit, a JVM launched here
    and a cluster's driver are judged alike. Spark's default profile logs every INFO line (Delta's
    snapshot dumps: thousands per run).

    With cdc_apply's logger at DEBUG (``--log-level DEBUG``), Spark's report of a failed streaming query
    (:data:`QUERY_FAILURE_LOGGERS`, the Java stack) is kept; otherwise the named error says it in one line.
    """
    chosen = _logging_chosen(conf)
    if chosen:
        return f"Spark's, as {chosen} sets it"
    try:
        return _quiet(jvm)
    except Exception as exc:  # noqa: BLE001 - a driver logging through something other than log4j 2 core
        return f"left as it is ({str(exc).strip().splitlines()[0][:200]})"


def _quiet(jvm) -> str:
    location = log4j_source(jvm)
    if location is not None and not _is_ours(location) and not _is_sparks_default(location):
        return f"yours ({location})"
    context = _log4j_context(jvm)
    if location is None or not _is_ours(location):
        # spark-submit resets Spark's logging before the application runs; Spark initialises it again at
        # its next record (the SparkContext's start, after this) and, having loaded its default profile
        # once, loads it again over whatever is there. Initialised now (silently), it keeps this file.
        jvm.org.apache.spark.SparkConf(False).initializeLogIfNecessary(False, True)
        context.setConfigLocation(jvm.java.io.File(str(LOG4J_FILE)).toURI())
    if logging.getLogger("cdc_apply").isEnabledFor(logging.DEBUG):
        config = context.getConfiguration()
        for name in QUERY_FAILURE_LOGGERS:
            config.getLoggerConfig(name).setLevel(jvm.org.apache.logging.log4j.Level.toLevel("ERROR"))
        context.updateLoggers()
        return f"errors, a failed query's stack included (cdc_apply's {LOG4J_FILE.name})"
    return f"errors only (cdc_apply's {LOG4J_FILE.name})"


def running_delta() -> tuple[str, str] | None:
    """``(version, jar)`` of the Delta a Spark session of this process has loaded, read from its JVM
    without a Spark job; ``None`` when this process runs no Spark (pyspark not even imported) or its
    class path has no Delta. ``version`` is the jar manifest's, ``"unknown"`` where it has none."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None or context._jvm is None:
        return None
    jvm = context._jvm
    if not _delta_loadable(jvm):
        return None
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    cls = jvm.java.lang.Class.forName(DELTA_CLASS, False, loader)
    version = cls.getPackage().getImplementationVersion()
    source = cls.getProtectionDomain().getCodeSource()
    jar = str(source.getLocation().getPath()) if source is not None else "the class path"
    return (str(version) if version else "unknown"), jar


# -- the session ------------------------------------------------------------------------------------

def _existing_session():
    """A session (or a SparkContext) that already exists in this process, else ``None``."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql.utils import is_remote

    if is_remote():
        return SparkSession.getActiveSession()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    default = SparkSession._instantiatedSession
    if default is not None and default._sc._jsc is not None:
        return default
    if SparkContext._active_spark_context is not None or os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        # A SparkContext without a session (or Databricks' runtime, whose session is made on demand).
        return SparkSession.builder.getOrCreate()
    return None


def _has_delta(spark: SparkSession) -> bool:
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return True  # Databricks ships Delta in its runtime, without the open-source extension setting
    conf = spark.conf
    if "io.delta" in (conf.get("spark.sql.extensions", "") or ""):
        return True
    return bool(conf.get("spark.databricks.clusterUsageTags.clusterId", None))


def _setting_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def ignored_settings(spark: SparkSession, conf: Mapping[str, Any]) -> dict[str, str]:
    """Of ``conf``, the keys whose values differ from those of the running ``spark``: each key's value in
    the session (``"unset"`` for none). A key the session already has at the same value is not ignored."""
    static = spark.sparkContext.getConf()
    ignored = {}
    for key in sorted(conf):
        have = spark.conf.get(key, None)
        if have is None:
            have = static.get(key, None)
        if have != _setting_text(conf[key]):
            ignored[key] = "unset" if have is None else have
    return ignored


def describe_session(spark: SparkSession) -> str:
    """One line: Spark version, master, task slots, shuffle partitions, driver memory."""
    sc = spark.sparkContext
    memory = sc.getConf().get("spark.driver.memory", "1g (Spark's default)")
    slots = sc.defaultParallelism
    return (f"Spark {spark.version}, master {sc.master}, {slots} task slot{'' if slots == 1 else 's'}, "
            f"{spark.conf.get('spark.sql.shuffle.partitions')} shuffle partitions, driver memory {memory}")


def classic_session(app_name: str = "cdc_apply", **conf: Any):
    """A classic Spark session with Delta Lake, built from the configuration the user already has
    (:func:`cdc_apply.spark_session` calls it where no Spark Connect session is asked for).

    * An existing session (Databricks, a notebook, ``pyspark``, a test fixture) is returned untouched;
      without Delta it is a :class:`SetupError` naming the settings it lacks.
    * Under ``spark-submit`` its master, memory, ``--jars``/``--packages`` and ``--conf`` settings stay;
      only keys it left unset are added (:data:`SESSION_DEFAULTS`, task counts for a local master).
    * From plain Python the JVM is launched here: ``local[2]``, 4g of driver memory, UTC, the parallel
      collector (:data:`LOCAL_DEFAULTS`, :data:`JAVA_OPTIONS`), unless ``spark-defaults.conf`` or
      ``PYSPARK_SUBMIT_ARGS`` set those keys.

    Keyword arguments are Spark settings and win over everything above except an existing session;
    pass dotted keys with ``**{"spark.sql.shuffle.partitions": "8"}``. Delta's jars are added only when
    its classes are not on the class path (see :func:`cdc_apply.spark.jars.find_delta_jars`). A Spark
    Connect session already running is returned as it is; settings asking for one (``spark.remote``,
    ``SPARK_REMOTE``, ``spark.api.mode=connect``) build it — ``local[N]`` starts a local server with Delta
    in this process (docs/CONNECT.md).
    """
    existing = _existing_session()
    if existing is not None and is_spark_connect(existing):
        log.info("using the Spark Connect session already running")
        return existing
    if existing is not None:
        if not _has_delta(existing):
            raise SetupError(
                "the Spark session already running has no Delta Lake; start it with "
                f"spark.sql.extensions={DELTA_EXTENSION}, spark.sql.catalog.spark_catalog={DELTA_CATALOG} and the "
                f"Delta jars (--packages {DELTA_ARTIFACT}), or stop it and let spark_session() build one")
        ignored = ignored_settings(existing, conf)
        if ignored:
            log.warning("a Spark session is already running and is used as it is; these settings differ from "
                        "its own and were not applied: %s",
                        ", ".join(f"{key}={conf[key]!s} (the session has {have})" for key, have in ignored.items()))
        log.info("using the Spark session already running: %s", describe_session(existing))
        return existing
    requested = _connect_requested(conf)
    if requested:   # cdc_apply.spark_session builds it (cdc_apply.spark.connect.connect_session)
        raise SetupError("settings ask for a Spark Connect session: build it with cdc_apply.spark_session()",
                         setting=requested)

    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    attached = SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ
    if attached:
        # spark-submit (or pyspark) started the driver JVM: its configuration is in the JVM already.
        origin = "spark-submit" if "PYSPARK_GATEWAY_PORT" in os.environ else "this process's running JVM"
        SparkContext._ensure_initialized()
        user = dict(SparkConf().getAll())
        settings = plan_settings(user, conf, launching=False)
    else:
        origin = "a JVM started by cdc_apply"
        major = java_version()
        if major < MIN_JAVA:
            raise SetupError(f"Java {major} found, Spark 4 needs Java {MIN_JAVA} or newer; install openjdk-17 "
                             "and point JAVA_HOME at it")
        user = {**spark_defaults_conf(), **submit_args_conf(os.environ.get("PYSPARK_SUBMIT_ARGS"))}
        settings = plan_settings(user, conf, launching=True)
        # Python workers must run the interpreter (and virtualenv) of the driver.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # Our -Dlog4j.configurationFile would win over a log4j2.properties in the user's Spark conf folder.
        java_options = _JVM_OPTIONS if _logging_chosen({**user, **conf}) or user_log4j_file() else JAVA_OPTIONS
        for key, value in (("spark.pyspark.python", os.environ["PYSPARK_PYTHON"]),
                           ("spark.driver.extraJavaOptions", java_options),
                           ("spark.executor.extraJavaOptions", java_options)):
            if key not in user and key not in conf:
                settings[key] = value
    merged = {**user, **settings}
    delta_from = "the class path Spark was given"
    search = None
    if not attached and not _names_delta(merged):
        search = find_delta_jars()
        if search.jars:
            settings["spark.jars"] = _with_jars(merged, search.jars)
            delta_from = search.origin
    if not attached:
        launch = SparkConf(loadDefaults=False)
        launch.setAll(list(settings.items()))
        SparkContext._ensure_initialized(conf=launch)
    jvm = SparkContext._jvm
    if not _delta_loadable(jvm):
        search = search if search is not None and search.jars else find_delta_jars()
        if not search.jars:
            raise SetupError(search.missing_message())
        _add_to_driver(jvm, search.jars)
        settings["spark.jars"] = _with_jars(merged, search.jars)
        delta_from = f"{search.origin}, added to the running driver"

    # Before the SparkContext starts: its start-up alone logs a few hundred INFO lines.
    jvm_log = quiet_jvm_logging(jvm, merged)
    builder = SparkSession.builder
    if "spark.app.name" not in user:
        builder = builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    require_classic(session)
    log.info("Spark session from %s: %s; Delta from %s; JVM log: %s", origin, describe_session(session), delta_from,
             jvm_log)
    return session
