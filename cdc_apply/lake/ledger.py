"""Which writes a silver table already has: exactly once without Delta's ``txnAppId`` check.

Every silver commit of a batch carries, in its ``userMetadata``, the pipeline's app id and its
*step* — ``apply version * STEPS_PER_VERSION + k`` (1 the truncate, 2 the load of a snapshot's rows,
``3 + 2j`` the MERGE of identity segment ``j``, ``4 + 2j`` the append of its new keys). A write whose step is not above the newest
step the table records for the app id is one a crashed run already committed, and is skipped.

Delta's own idempotent writes (``txnAppId``/``txnVersion``) say the same, but their check rebuilds the
table's whole state on every write to read the transactions it recorded — three Spark jobs per table
per batch. Here the newest step is read once per table and process from the table's recent commits
(``DESCRIBE HISTORY``, which reads commit files, not the table's state) and kept up to date after.
Tables written before steps were recorded answer from Delta's recorded ``txnVersion`` once.
"""

from __future__ import annotations

import json
import threading

from cdc_apply.lake.tables import TableRef, recorded_txn_version

STEPS_PER_VERSION = 64
HISTORY_PROBES = (32, 512, None)  # commits read back when looking for the newest step (None: all)


def truncate_step(version: int) -> int:
    return version * STEPS_PER_VERSION + 1


def snapshot_step(version: int) -> int:
    return version * STEPS_PER_VERSION + 2


def merge_step(version: int, segment: int) -> int:
    return version * STEPS_PER_VERSION + 3 + 2 * segment


def new_keys_step(version: int, segment: int) -> int:
    return version * STEPS_PER_VERSION + 4 + 2 * segment


MAX_SEGMENTS = (STEPS_PER_VERSION - 3) // 2


class SilverLedger:
    """The newest step of each silver table, per app id (one ledger per job; tables in threads)."""

    def __init__(self) -> None:
        self._steps: dict[str, int] = {}
        self._lock = threading.Lock()

    def newest(self, spark, ref: TableRef, app_id: str) -> int:
        """The newest step the table records for ``app_id`` (-1: none)."""
        key = f"{ref}|{app_id}"
        with self._lock:
            known = self._steps.get(key)
        if known is None:
            known = _read_newest(spark, ref, app_id) if ref.exists(spark) else -1
            with self._lock:
                self._steps[key] = max(known, self._steps.get(key, -1))
        return known

    def claim(self, spark, ref: TableRef, app_id: str, step: int, metadata: str) -> str | None:
        """The ``userMetadata`` for a write of ``step`` (``metadata`` plus the app id and step), or
        ``None`` when the table already has it: skip the write."""
        if step <= self.newest(spark, ref, app_id):
            return None
        body = json.loads(metadata)
        body["cdc_apply"].update({"app": app_id, "apply_step": step})
        return json.dumps(body, separators=(",", ":"))

    def wrote(self, ref: TableRef, app_id: str, step: int) -> None:
        with self._lock:
            key = f"{ref}|{app_id}"
            self._steps[key] = max(step, self._steps.get(key, -1))


def _read_newest(spark, ref: TableRef, app_id: str) -> int:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    table = DeltaTable.forPath(spark, ref.path) if ref.path else DeltaTable.forName(spark, ref.name)
    needle = '"app":' + json.dumps(app_id)
    for limit in HISTORY_PROBES:
        history = table.history(limit) if limit else table.history()
        rows = history.where(F.col("userMetadata").contains(needle)).select("userMetadata").collect()
        steps = [_step(r.userMetadata, app_id) for r in rows]
        steps = [s for s in steps if s is not None]
        if steps:
            return max(steps)
        if limit is not None and history.count() < limit:
            break
    recorded = recorded_txn_version(spark, ref, app_id)  # written before steps were recorded
    return -1 if recorded is None else recorded


def _step(text: str, app_id: str) -> int | None:
    try:
        tag = json.loads(text)["cdc_apply"]
        return int(tag["apply_step"]) if tag.get("app") == app_id else None
    except (ValueError, KeyError, TypeError):
        return None
