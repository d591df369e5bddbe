"""Spark Connect with Delta on this machine: the settings a local Connect server starts with.

``SparkSession.builder.remote("local[N]")`` (or ``SPARK_REMOTE=local[N]`` with a plain builder) starts the
server in the calling process: pyspark launches a classic SparkContext with Spark's Connect plugin
(``spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin``, Spark's own ``spark-connect_2.13``
jar ships in pyspark's ``jars/``), gives it *every* setting the builder was given — ``spark.jars``, the
Delta extension and catalog, driver memory, JVM options — and then connects a Connect client to it on
``localhost`` (port 15002 unless ``spark.connect.grpc.binding.port`` says otherwise); the runtime SQL
settings among them are also set on the client's session. So Delta reaches a local Connect server the
way it reaches a classic session: its jars in ``spark.jars`` and its two SQL settings
(:func:`local_connect_settings`). docs/CONNECT.md says what works over such a session.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from cdc_apply.errors import SetupError
from cdc_apply.spark.jars import find_delta_jars
from cdc_apply.spark.session import JAVA_OPTIONS, _connect_requested, classic_session, plan_settings

log = logging.getLogger("cdc_apply.spark")

# Spark's Connect server, as pyspark's remote("local[N]") starts it (pyspark/sql/connect/session.py,
# SparkSession._start_connect_server): the plugin, and artifact isolation per client session.
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
CONNECT_PORT = "spark.connect.grpc.binding.port"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def local_connect_settings(master: str = "local[2]", **overrides: Any) -> dict[str, str]:
    """The settings for ``SparkSession.builder.remote(master)`` so that its in-process Connect server runs
    with Delta: the Delta jars (:func:`cdc_apply.spark.jars.find_delta_jars`; :class:`SetupError` naming
    what to pass when none are found), the Delta extension and catalog, and everything a classic session
    this package launches gets (UTC, task counts for ``master``'s cores, the JVM's options, Python
    workers on this interpreter). ``overrides`` win; the master is ``master``, given to ``remote``.

    The server's Python workers (``mapInArrow``, UDFs) run ``$PYSPARK_PYTHON`` (else ``python3``), not
    ``spark.pyspark.python``: set it in the environment before ``remote()`` starts the server.
    """
    settings = plan_settings({}, {"spark.master": master, **overrides}, launching=True)
    settings.pop("spark.master")
    if "spark.jars" not in overrides:
        search = find_delta_jars()
        if not search.jars:
            raise SetupError(search.missing_message())
        settings["spark.jars"] = ",".join(str(j) for j in search.jars)
    for key, value in (("spark.driver.extraJavaOptions", JAVA_OPTIONS),
                       ("spark.executor.extraJavaOptions", JAVA_OPTIONS), ("spark.pyspark.python", sys.executable)):
        settings.setdefault(key, value)
    return settings


# -- what the job asks of a session, classic or Connect ---------------------------------------------

def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (pyspark's ``pyspark.sql.connect`` class)."""
    return (type(spark).__module__ or "").startswith("pyspark.sql.connect.")


# Per Connect session (its session id): the clones not in use. A clone is never dropped: dropping a Connect
# session closes its client, and pyspark's close shuts down the release thread pool every Connect client of
# the process shares (ExecutePlanResponseReattachableIterator.shutdown, holding a class-wide lock). When
# that runs from the garbage collector inside gRPC's token callback while another thread's ReleaseExecute
# waits on that callback, both wait for ever: an apply job hung in a MERGE that way.
_FREE_CLONES: dict[str, list[Any]] = {}
_CLONES_LOCK = threading.Lock()


@contextmanager
def connect_clone(spark: Any, reset: tuple[str, ...] = ()) -> Iterator[Any]:
    """A Spark Connect session of its own for the block (Connect has no ``newSession``): a
    ``cloneSession()`` (a copy of the session's settings on the server) kept for the process and handed out
    again, the settings in ``reset`` unset first. The Connect engine's child session
    (:meth:`cdc_apply.delta.engine.SparkTables.child`)."""
    key = str(spark._session_id)
    with _CLONES_LOCK:
        free = _FREE_CLONES.setdefault(key, [])
        clone = free.pop() if free else None
    if clone is None:
        clone = spark.cloneSession()
    else:
        for setting in reset:
            clone.conf.unset(setting)
    try:
        yield clone
    finally:
        with _CLONES_LOCK:
            _FREE_CLONES[key].append(clone)


def stop_child_sessions() -> None:
    """Stop the Connect sessions :func:`child_session` keeps. Each is a client of its own, and at exit a
    client that is still open asks its server to clean its caches, retrying for minutes when the server
    has gone (a test's local server stopped first); a closed client does not ask. Call it only when the
    process is done with Spark Connect: closing a client shuts down the release pool all of the process's
    Connect clients share (docs/CONNECT.md)."""
    with _CLONES_LOCK:
        clones = [clone for free in _FREE_CLONES.values() for clone in free]
        _FREE_CLONES.clear()
    for clone in clones:
        # Not clone.stop(): pyspark's stop() of a cloned session fails (it lacks release_session_on_close).
        try:
            clone.client.release_session()
        except Exception as exc:   # best effort, as stop() is: the server drops idle sessions itself
            logging.getLogger(__name__).warning("a cloned Connect session was not released: %s", exc)
        clone.client.close()


def connect_parallelism(spark: Any) -> int:
    """The task slots a stage should at least use over Spark Connect, where Spark's default parallelism
    cannot be read: the cores of a ``local[N]`` master, else the shuffle partitions."""
    master = spark.conf.get("spark.master", None) or ""
    match = re.match(r"^local\[(\d+|\*)", master)
    if match:
        return (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))
    return int(spark.conf.get("spark.sql.shuffle.partitions", "200"))


# -- building a session: classic, or Spark Connect when the settings ask for it ----------------------

def spark_session(app_name: str = "cdc_apply", **conf: Any):
    """A Spark session with Delta Lake: the one running, else a Spark Connect session when ``spark.remote``,
    ``SPARK_REMOTE`` or ``spark.api.mode=connect`` ask for one (:func:`connect_session`), else a classic one
    (:func:`cdc_apply.spark.session.classic_session`). The one function of that name: ``cdc_apply.spark_session``
    and ``cdc_apply.spark.spark_session`` are it."""
    from pyspark.sql import SparkSession

    requested = _connect_requested(conf)
    if requested and SparkSession.getActiveSession() is None:
        return connect_session(app_name, conf, requested)
    return classic_session(app_name, **conf)


def connect_session(app_name: str, conf: Mapping[str, Any], requested: str):
    """A Spark Connect session as the settings ask: ``spark.remote`` / ``SPARK_REMOTE`` ``local[N]`` starts a
    server in this process with Delta (:func:`cdc_apply.spark.connect.local_connect_settings`; its Python
    workers run this interpreter), ``sc://...`` connects to one (Delta is the server's business)."""
    from pyspark.sql import SparkSession

    remote = str(conf.get("spark.remote") or os.environ.get("SPARK_REMOTE") or "")
    settings = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in conf.items() if k != "spark.remote"}
    builder = SparkSession.builder.appName(app_name)
    if remote.startswith("local"):
        # The server's Python workers run $PYSPARK_PYTHON (not spark.pyspark.python): docs/CONNECT.md.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings = local_connect_settings(remote, **settings)
    if remote:
        builder = builder.remote(remote)
    # Builder.config's map is typed with every value type a setting may have (dict is invariant).
    config_map: dict[str, bool | float | int | str | None] = dict(settings)
    session = builder.config(map=config_map).getOrCreate() if settings else builder.getOrCreate()
    log.info("Spark Connect session (%s=%s), Spark %s", requested, remote or "connect", session.version)
    return session
