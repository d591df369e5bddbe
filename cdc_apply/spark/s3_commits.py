"""Exclusive Delta commits on S3 for Spark's writers: the log store that makes them so, and the start-up check.

Delta commits version N by creating ``_delta_log/<N>.json`` only if no one else has. On ``s3a://`` Delta's
default log store (``S3SingleDriverLogStore``) guarantees that only within one JVM: Hadoop 3.4's
``FileSystem.create(path, overwrite=false)`` looks for the object and then puts it without a condition, so
two drivers (an apply job and ``cdc-apply optimize``; two landers writing through Spark) can both write
version N and one commit is lost. Measured against moto's S3 server: two Spark processes appending 20
commits each to one table kept 37 of 41.

:data:`LOG_STORE_CLASS` (``cdc_apply/spark/java``, built into the s3a jars' folder by ``python -m
cdc_apply.spark.jars --s3``) writes the commit with S3A's ``createFile()`` option
``fs.option.create.conditional.overwrite``, i.e. S3's conditional put (``If-None-Match: *``): the loser gets
``412`` and Delta retries at the next version, as it does on HDFS. delta-rs (the lander's writer) commits
with the same conditional put, so Spark and delta-rs writers exclude each other as well. Delta's
``S3DynamoDBLogStore`` also makes Spark's commits exclusive, but it does not coordinate with delta-rs 1.x
(which dropped its DynamoDB locking): it suits tables only Spark writes.

:func:`check_exclusive_commits` is called by the entry points that write with Spark (``apply``,
``optimize``, the lander when it lands through Spark): on S3 paths without an exclusive log store it logs
one warning naming the setting.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

log = logging.getLogger("cdc_apply.spark")

LOG_STORE_CLASS = "cdc_apply.delta.S3ConditionalPutLogStore"
LOG_STORE_JAR = "cdc-apply-s3-logstore.jar"
DYNAMODB_LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"
EXCLUSIVE_STORES = (LOG_STORE_CLASS, DYNAMODB_LOG_STORE)
S3_SCHEMES = ("s3a", "s3", "s3n")
# The Spark settings that make every Spark writer's commits on S3 exclusive (with the jar on spark.jars).
EXCLUSIVE_SETTINGS = {f"spark.delta.logStore.{scheme}.impl": LOG_STORE_CLASS for scheme in ("s3a", "s3")}


def s3_scheme(path: str | None) -> str | None:
    """``s3a``/``s3``/``s3n`` for a path on S3, None otherwise."""
    if not path or "://" not in path:
        return None
    scheme = path.split("://", 1)[0].lower()
    return scheme if scheme in S3_SCHEMES else None


def log_store_for(conf_get, scheme: str) -> str | None:
    """The log store class Delta uses for ``scheme`` per the session's settings (None: Delta's default)."""
    return conf_get(f"spark.delta.logStore.{scheme}.impl") or conf_get("spark.delta.logStore.class") or None


def unsafe_paths(conf_get, paths: Iterable[str | None]) -> list[tuple[str, str | None]]:
    """``(path, its log store)`` for each S3 path whose commits are not exclusive across processes."""
    found = []
    for path in paths:
        scheme = s3_scheme(path)
        if scheme is None:
            continue
        store = log_store_for(conf_get, scheme)
        if store not in EXCLUSIVE_STORES:
            found.append((str(path), store))
    return found


def check_exclusive_commits(spark: Any, paths: Iterable[str | None], command: str) -> str | None:
    """Warn (once, on ``cdc_apply.spark``) when ``command`` writes with ``spark`` to a path on S3 whose
    Delta commits exclude other writers only within this process; returns the warning (None: nothing to
    say). Reads the session's settings only, so it answers for classic and Spark Connect sessions alike."""
    def conf_get(key: str) -> str | None:
        try:
            return spark.conf.get(key, None)
        except Exception:  # noqa: BLE001 - a setting the server will not show counts as unset
            return None

    unsafe = unsafe_paths(conf_get, paths)
    if not unsafe:
        return None
    path, store = unsafe[0]
    scheme = s3_scheme(path)
    message = (f"{command}: Delta commits to {path} are exclusive only within this Spark process "
               f"(log store {store or 'S3SingleDriverLogStore, the default'}): another writer of the same table "
               f"(a lander, cdc-apply optimize, a second job) can overwrite a commit. Set "
               f"spark.delta.logStore.{scheme}.impl={LOG_STORE_CLASS} with {LOG_STORE_JAR} on spark.jars "
               f"(python -m cdc_apply.spark.jars --s3 builds it) in every Spark writer, or keep one writer "
               f"per table")
    log.warning("%s", message)
    return message
