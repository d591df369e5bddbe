"""VACUUM after a forget, and the log's older commits removed when nothing older is to be kept.

A DELETE leaves the removed rows in files older versions still read; VACUUM removes those files once they are
older than the retention it keeps. The log keeps more: every commit that added a file holds that file's column
statistics (minimum and maximum of the first columns: a forgotten name or e-mail can be one), and its version
checksum (``.crc``) lists the files with them too. Delta drops commits older than ``delta.logRetentionDuration``
(30 days) at a checkpoint. With a retention of 0 hours, :func:`purge_log` does it at once: a checkpoint of the
current version, then every log file of an older version removed — what Delta's own cleanup removes, earlier.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cdc_apply.delta.ddl import table_properties
from cdc_apply.delta.log_files import log_version
from cdc_apply.errors import ForgetError

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables
    from cdc_apply.delta.refs import TableRef

RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
SAFE_HOURS = 168   # Delta's own floor for VACUUM's retention (its retention check)


def vacuum(engine: SparkTables, ref: TableRef, retain_hours: float | None, log: bool = True) -> str:
    """VACUUM ``ref`` keeping ``retain_hours`` of older files (None: the table's own retention); below
    :data:`SAFE_HOURS` Delta's retention check is off for the statement (a reader of an older version, or a
    writer that started before, may then fail); at 0 hours, with ``log``, :func:`purge_log` too. Returns the
    retention used, as the result line says it."""
    session = engine.spark
    if retain_hours is None:
        session.sql(f"VACUUM {ref.sql}").collect()
        return "the table's retention"
    before = session.conf.get(RETENTION_CHECK, "true") or "true"
    if retain_hours < SAFE_HOURS:
        session.conf.set(RETENTION_CHECK, "false")
    try:
        session.sql(f"VACUUM {ref.sql} RETAIN {float(retain_hours):g} HOURS").collect()
    finally:
        session.conf.set(RETENTION_CHECK, before)
    if retain_hours == 0 and log:
        removed = purge_log(engine, ref)
        return f"0 hours; {removed} older log files removed"
    return f"{float(retain_hours):g} hours"


def purge_log(engine: SparkTables, ref: TableRef) -> int:
    """A checkpoint of ``ref``'s current version, then its log files of older versions removed; how many."""
    session = engine.spark
    interval = table_properties(session, ref).get("delta.checkpointInterval")
    # A commit that sets the interval to 1 is checkpointed as it commits; the interval is then set back.
    session.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ('delta.checkpointInterval' = '1')").collect()
    if interval is None:
        session.sql(f"ALTER TABLE {ref.sql} UNSET TBLPROPERTIES ('delta.checkpointInterval')").collect()
    else:
        session.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ('delta.checkpointInterval' = '{interval}')").collect()
    location = ref.path or session.sql(f"DESCRIBE DETAIL {ref.sql}").collect()[0]["location"]
    store, root = engine.file_store(location)
    folder = root.rstrip("/") + "/_delta_log"
    last = store.read_text(folder + "/_last_checkpoint")
    if last is None:
        raise ForgetError("no checkpoint was written: the log's older commits stay", table=str(ref))
    checkpoint = int(json.loads(last)["version"])
    removed = 0
    for sub in ("", "/_staged_commits"):
        for name in store.names(folder + sub):
            version = log_version(name)
            if version is not None and version < checkpoint:
                store.remove(f"{folder}{sub}/{name}")
                removed += 1
    return removed
