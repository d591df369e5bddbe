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

import sys
from typing import Any

from cdc_apply.errors import SetupError
from cdc_apply.spark.jars import find_delta_jars
from cdc_apply.spark.session import JAVA_OPTIONS, plan_settings

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
