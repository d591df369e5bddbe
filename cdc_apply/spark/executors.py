"""Executors that can run the decode: cdc_apply's code on a cluster's workers, and task counts that fit it.

On a local master the Python workers run the driver's interpreter, which imports cdc_apply already.
On a cluster (``spark://``, YARN, Kubernetes, Databricks) each executor starts the Python named by
``spark.pyspark.python`` / ``PYSPARK_PYTHON`` on its own machine, and the decode (``mapInArrow``)
imports ``cdc_apply`` there. Before the job's first batch :func:`prepare_executors` makes sure it can:

* a probe task (one task, one executor) reports the executors' Python, its ``pyarrow`` and ``numpy``,
  and where ``cdc_apply`` would be imported from, without importing it (a reused Python worker would
  keep that copy);
* executors with the very files the driver runs (the wheel installed on the cluster, as on Databricks
  with the wheel as a library) are left as they are; otherwise the installed package is zipped (cached
  by its content hash in the temporary folder) and shipped with ``SparkContext.addPyFile``, which puts
  it on every executor's path, later executors included, ahead of an installed copy;
* executors without ``pyarrow`` or ``numpy``, or a package that cannot be zipped (not a folder of
  files), stop the job before any work with a :class:`SetupError` saying what to install.

``spark.cdc_apply.executorCode`` (:data:`EXECUTOR_CODE_KEY`) chooses: ``auto`` (the default: probe,
ship when needed), ``ship`` (ship without a probe), ``installed`` (nothing: the user vouches for the
executors). :func:`cluster_settings` gives the shuffle partitions a cluster's cores call for.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdc_apply.errors import SetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("cdc_apply.spark")

EXECUTOR_CODE_KEY = "spark.cdc_apply.executorCode"
EXECUTOR_CODE_MODES = ("auto", "ship", "installed")
# What the decode imports on an executor besides cdc_apply and Python's standard library (pyspark's own
# worker code comes with Spark).
EXECUTOR_NEEDS = ("pyarrow", "numpy")
SPARK_DEFAULT_SHUFFLE_PARTITIONS = "200"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
# The settings cluster_settings may give the job's session, which its child sessions (one per silver
# table, started from the static configuration) take over from it.
CLUSTER_KEYS = (SHUFFLE_PARTITIONS, SNAPSHOT_PARTITIONS)
# Files of the package an executor needs: its code and the data files read at run time.
_SHIPPED_SUFFIXES = (".py", ".properties", ".json", ".typed")

# Zips this process added to its SparkContext (by path): adding one twice is refused by Spark.
_shipped: set[str] = set()

# The probe runs on an executor, which may not import cdc_apply: its function is compiled from this
# text outside any importable module, so cloudpickle sends it by value. It hashes the package's files
# the way package_hash does, and imports no part of cdc_apply.
_PROBE_SOURCE = '''
def probe(_):
    import hashlib, importlib, importlib.util, os, sys
    found = {"python": "%d.%d.%d" % tuple(sys.version_info[:3]), "executable": sys.executable,
             "host": os.uname().nodename}
    for name in NEEDS:
        try:
            found[name] = getattr(importlib.import_module(name), "__version__", "unknown")
        except Exception as exc:
            found[name] = None
            found[name + "_error"] = "%s: %s" % (type(exc).__name__, exc)
    spec = importlib.util.find_spec("cdc_apply")
    found["cdc_apply"] = None if spec is None else (spec.origin or "")
    found["cdc_apply_hash"] = None
    if spec is not None and spec.submodule_search_locations:
        root = list(spec.submodule_search_locations)[0]
        if os.path.isdir(root):
            found["cdc_apply_hash"] = HASH(root)
    return found
'''

_HASH_SOURCE = '''
def HASH(root):
    import hashlib, os
    digest = hashlib.sha256()
    names = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            if name.endswith(SUFFIXES):
                names.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    for name in sorted(names):
        digest.update(name.encode() + b"\\0")
        with open(os.path.join(root, name), "rb") as handle:
            digest.update(handle.read() + b"\\0")
    return digest.hexdigest()
'''


def _compiled(name: str, **names: Any):
    namespace: dict[str, Any] = {"__name__": "cdc_apply_executor_probe", **names}
    exec(compile(_HASH_SOURCE + _PROBE_SOURCE, "<cdc_apply executor probe>", "exec"), namespace)  # noqa: S102
    return namespace[name]


_hash_folder = _compiled("HASH", NEEDS=EXECUTOR_NEEDS, SUFFIXES=_SHIPPED_SUFFIXES)


@dataclass(frozen=True)
class ExecutorSetup:
    """What :func:`prepare_executors` found and did, for the session's log line."""

    mode: str                      # EXECUTOR_CODE_KEY's value
    action: str                    # "local master", "installed", "shipped", "not checked"
    python: str | None = None      # the executors' Python version and executable
    zip_path: str | None = None    # the zip shipped, if any

    def line(self) -> str:
        """One line saying where the executors' cdc_apply comes from."""
        where = f" (Python {self.python})" if self.python else ""
        if self.action == "shipped":
            return f"executors{where} import cdc_apply from {Path(self.zip_path or '').name}, shipped by addPyFile"
        if self.action == "installed":
            return f"executors{where} import cdc_apply as installed on them, the driver's very files"
        if self.action == "not checked":
            return f"executors' cdc_apply not checked ({EXECUTOR_CODE_KEY}=installed)"
        return "local master: Python workers run the driver's interpreter"


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs executors inside the driver's JVM (``local``, ``local[N]``, ``local[N,F]``).
    ``local-cluster[...]`` starts executor processes of their own, as a cluster does: not local."""
    master = master.strip()
    return master == "local" or master.startswith("local[")


def package_dir() -> Path:
    """The folder the driver imports cdc_apply from."""
    return Path(__file__).resolve().parents[1]


def package_hash(root: Path | None = None) -> str:
    """SHA-256 over the package's shipped files (names and bytes, ``__pycache__`` left out)."""
    return _hash_folder(str(root or package_dir()))


def package_zip(cache_dir: Path | None = None) -> Path:
    """A zip of the installed package (``cdc_apply/...`` inside), built once per content hash in
    ``cache_dir`` (``<temp>/cdc_apply-executors``) and reused; written to a temporary name and renamed,
    so a concurrent job never ships half a file."""
    root = package_dir()
    if not (root / "__init__.py").is_file():
        raise SetupError("cdc_apply is not installed as a folder of files, so it cannot be shipped to the "
                         f"executors; install cdc_apply on every executor's Python, then set {EXECUTOR_CODE_KEY}="
                         "installed", location=str(root))
    digest = package_hash(root)
    folder = cache_dir or Path(tempfile.gettempdir()) / "cdc_apply-executors"
    target = folder / f"cdc_apply-{digest[:16]}.zip"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{target.name}.{os.getpid()}"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.name.endswith(_SHIPPED_SUFFIXES):
                archive.write(path, f"cdc_apply/{path.relative_to(root).as_posix()}")
    partial.replace(target)
    return target


def _probe_executors(spark: SparkSession) -> dict[str, Any]:
    """The probe task's answer, run on one executor."""
    probe = _compiled("probe", NEEDS=EXECUTOR_NEEDS, SUFFIXES=_SHIPPED_SUFFIXES)
    try:
        return spark.sparkContext.parallelize([0], 1).map(probe).collect()[0]
    except Exception as exc:  # noqa: BLE001 - py4j/PySpark errors: the first line names the cause
        first = _cause_line(str(exc))
        raise SetupError("the executors could not run a Python task; give every worker a Python of the "
                         "driver's version with pyarrow and numpy and name it with spark.pyspark.python (or "
                         f"PYSPARK_PYTHON): {first.strip()[:400]}") from None


def _cause_line(text: str) -> str:
    """The line of a failed task's report that names the cause: PySpark's error class, else the last
    Python exception line of the executor's traceback, else the first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if re.match(r"^\[[A-Z_]+\]", line):
            return line
    for line in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception): ", line) and "Py4J" not in line:
            return line
    return lines[0] if lines else "no message"


def _require_needs(found: dict[str, Any]) -> None:
    missing = [name for name in EXECUTOR_NEEDS if not found.get(name)]
    if missing:
        raise SetupError(f"the executors' Python lacks {', '.join(missing)}, which the decode needs; install "
                         f"{' and '.join(missing)} into it (pip install {' '.join(missing)}) or point "
                         "spark.pyspark.python at a Python that has them",
                         executor_python=found.get("executable"), host=found.get("host"))


def prepare_executors(spark: SparkSession) -> ExecutorSetup:
    """Make sure the executors of ``spark`` import the cdc_apply the driver runs (see the module's
    docstring); a :class:`SetupError` before any work when they cannot."""
    sc = spark.sparkContext
    # The session's value (set at run time in a notebook) before the static one (--conf).
    mode = spark.conf.get(EXECUTOR_CODE_KEY, None) or sc.getConf().get(EXECUTOR_CODE_KEY, None) or "auto"
    mode = mode.strip().lower()
    if mode not in EXECUTOR_CODE_MODES:
        raise SetupError(f"{EXECUTOR_CODE_KEY} must be one of {', '.join(EXECUTOR_CODE_MODES)}", value=mode)
    assert sc.master is not None  # a running SparkContext has its master
    if is_local_master(sc.master):
        return ExecutorSetup(mode, "local master")
    if mode == "installed":
        return ExecutorSetup(mode, "not checked")
    python = None
    if mode == "auto":
        found = _probe_executors(spark)
        python = f"{found['python']} at {found['executable']}"
        _require_needs(found)
        if found.get("cdc_apply_hash") == package_hash():
            return ExecutorSetup(mode, "installed", python)
    archive = package_zip()
    if str(archive) not in _shipped:
        sc.addPyFile(str(archive))
        _shipped.add(str(archive))
    if mode == "auto":
        after = _probe_executors(spark)
        if archive.name not in str(after.get("cdc_apply")):
            raise SetupError(f"cdc_apply was shipped to the executors ({archive.name}) but they import it from "
                             f"{after.get('cdc_apply') or 'nowhere'}; install it on the executors' Python or set "
                             f"{EXECUTOR_CODE_KEY}=installed", executor_python=after.get("executable"))
    return ExecutorSetup(mode, "shipped", python, str(archive))


def cluster_settings(spark: SparkSession) -> dict[str, str]:
    """Session settings the job applies on a cluster, each only where the user left Spark's (or Delta's)
    default: shuffle partitions = the cluster's task slots (``defaultParallelism``) instead of 200, and
    Delta's state-reconstruction partitions the same instead of 50 — a batch of a few hundred messages
    otherwise runs each shuffle and each log replay as dozens of tiny tasks (minutes on a small
    cluster). Nothing for a local master (:func:`cdc_apply.spark.session.classic_session` sizes those)."""
    sc = spark.sparkContext
    assert sc.master is not None  # a running SparkContext has its master
    if is_local_master(sc.master):
        return {}
    static = sc.getConf()
    slots = str(max(1, sc.defaultParallelism))
    settings = {}
    if (not static.contains(SHUFFLE_PARTITIONS)
            and spark.conf.get(SHUFFLE_PARTITIONS) == SPARK_DEFAULT_SHUFFLE_PARTITIONS):
        settings[SHUFFLE_PARTITIONS] = slots   # (conf.get with a default answers that default, not Spark's)
    if not static.contains(SNAPSHOT_PARTITIONS) and spark.conf.get(SNAPSHOT_PARTITIONS, None) is None:
        settings[SNAPSHOT_PARTITIONS] = slots
    return settings
