"""Creating a Delta table so that a kill at any moment leaves something the next run can use.

Delta makes a new table's ``_delta_log/`` folder before it writes the first commit into it. A process
killed between the two leaves a folder that is no table (``DeltaTable.isDeltaTable`` is false, every
read fails with ``DELTA_TABLE_NOT_FOUND``) and that ``CREATE TABLE IF NOT EXISTS`` then takes for one and
silently leaves alone: every later run fails. :func:`ensure_path_table` therefore creates through one path:

1. a location whose ``_delta_log/`` holds a commit is a table: nothing to do;
2. a ``_delta_log/`` without a commit is what a killed creation leaves — or another process's creation
   under way, so it is first given :data:`SETTLE_SECONDS` to commit; then its entries (temporary commit
   files, checksums, empty staging folders) are removed one by one and the folder itself without
   recursion, so a commit that another process writes meanwhile is never deleted — the removal then
   fails, and the location is looked at again;
3. a location holding files but no ``_delta_log/`` was not written by Delta: it is not ours to empty,
   and the error names it;
4. the create runs; a concurrent creator's conflict (two jobs starting together) is retried, and the
   location must hold a commit afterwards — a create that did nothing is an error, never a skip.

Catalog tables (by name) are left to their catalog: it creates them atomically or not, and their
locations are not the job's to list (:func:`ensure_sql_table`). Over Spark Connect path tables are created
that way too (the client has no file system of the server's to list). Which of the two a table takes is the
engine's (:meth:`cdc_apply.delta.engine.SparkTables.ensure_table`).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Callable

from cdc_apply.delta.sql_table import session_jvm
from cdc_apply.errors import StateError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_apply.delta.refs import TableRef

_COMMIT = re.compile(r"^\d{20}\.json$|^\d{20}\.checkpoint(\.\d+\.\d+)?\.parquet$"
                     r"|^\d{20}\.checkpoint\.[^/]+\.(json|parquet)$")
# Errors a creator meets when another process creates the same table at the same moment (a table that
# appeared after has_commit said none: its CREATE ... IF NOT EXISTS compares properties with the other
# creator's, whose session added its defaults, hence DELTA_CREATE_TABLE_WITH_DIFFERENT_PROPERTY).
_RACES = ("DELTA_CREATE_TABLE_WITH_DIFFERENT_PROPERTY", "ProtocolChangedException", "MetadataChangedException",
          "ConcurrentAppendException",
          "FileAlreadyExistsException", "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "CONCURRENT",
          "DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED", "TABLE_OR_VIEW_ALREADY_EXISTS",
          "DELTA_TABLE_NOT_FOUND", "FileNotFoundException", "DELTA_CANNOT_CREATE_LOG_PATH")
ATTEMPTS = 5
# Seconds a log folder without a commit is left to its creator (a commit follows its folder within
# milliseconds; a restart after a kill takes longer than this to reach its first create).
SETTLE_SECONDS = 10.0


def _fs(spark: SparkSession, location: str):
    jvm = session_jvm(spark)
    path = jvm.org.apache.hadoop.fs.Path(location)
    return path.getFileSystem(spark._jsc.hadoopConfiguration()), path


def has_commit(spark: SparkSession, location: str) -> bool:
    """Whether ``location/_delta_log`` holds a commit or a checkpoint (a listing, no Spark job)."""
    fs, path = _fs(spark, location)
    log = session_jvm(spark).org.apache.hadoop.fs.Path(path, "_delta_log")
    try:
        return any(_COMMIT.match(s.getPath().getName()) for s in fs.listStatus(log))
    except Exception as exc:  # noqa: BLE001 - a missing folder is the JVM's FileNotFoundException
        if "FileNotFoundException" in type(exc).__name__ or "FileNotFound" in str(exc)[:300]:
            return False
        raise


def clear_uncommitted(spark: SparkSession, location: str, what: str, min_age: float = 0.0) -> str:
    """Remove a ``_delta_log/`` that holds no commit (see the module's docstring) and whose newest entry is at
    least ``min_age`` seconds old: "cleared", "fresh" (younger: maybe another process's creation under
    way), "table" (a commit is there) or "none" (no log folder). Raises :class:`StateError` for a
    location with files but no Delta log."""
    jvm = session_jvm(spark)
    fs, path = _fs(spark, location)
    if not fs.exists(path):
        return "none"
    log = jvm.org.apache.hadoop.fs.Path(path, "_delta_log")
    if not fs.exists(log):
        others = [s.getPath().getName() for s in fs.listStatus(path)]
        if others:
            raise StateError("the location holds files but no Delta table: it is not cdc_apply's to empty; "
                             "move them away or point the setting at another folder", table=what, path=location,
                             files=", ".join(sorted(others)[:5]))
        return "none"
    entries = list(fs.listStatus(log))
    if any(_COMMIT.match(s.getPath().getName()) for s in entries):
        return "table"
    newest = max([fs.getFileStatus(log).getModificationTime()] + [s.getModificationTime() for s in entries])
    if time.time() * 1000 - newest < min_age * 1000:
        return "fresh"
    for status in entries:
        name = status.getPath().getName()
        if status.isDirectory():
            inner = [s.getPath().getName() for s in fs.listStatus(status.getPath())]
            if inner:
                raise StateError("the Delta log holds no commit but its staging folder is not empty: a commit "
                                 "coordinator may own this table; not removed", table=what, path=location,
                                 folder=name, files=", ".join(sorted(inner)[:5]))
        fs.delete(status.getPath(), False)
    try:
        fs.delete(log, False)
    except Exception:  # noqa: BLE001 - not empty any more: another process committed meanwhile
        return "table" if has_commit(spark, location) else "fresh"
    return "cleared"


def ensure_sql_table(exists: Callable[[TableRef], bool], ref: TableRef, create: Callable[[], object],
                     what: str | None = None) -> bool:
    """Run ``create`` (an idempotent ``CREATE TABLE IF NOT EXISTS``-like action) until ``exists(ref)``: for a
    catalog's table (its own to create) and a path seen only through SQL (Spark Connect: the client cannot
    list the server's storage, so a killed creation's empty ``_delta_log/`` is not cleared, docs/CONNECT.md).
    True when this call created it, False when it was there (or another process made it)."""
    what = what or str(ref)
    if exists(ref):
        return False
    for attempt in range(ATTEMPTS):
        try:
            create()
            return True
        except Exception as exc:  # noqa: BLE001
            if not _is_race(exc):
                raise
            if exists(ref):
                return True
            time.sleep(0.2 * (attempt + 1))
    raise StateError(f"the catalog table could not be created after {ATTEMPTS} attempts", table=what)


def ensure_path_table(spark: SparkSession, ref: TableRef, create: Callable[[], object],
                      what: str | None = None) -> bool:
    """Run ``create`` (an idempotent ``CREATE TABLE IF NOT EXISTS``-like action) until the path ``ref`` holds a
    Delta commit, on a classic session (its JVM lists the location); True when this call created it, False
    when it was there (or another process made it).

    A log folder without a commit younger than :data:`SETTLE_SECONDS` may be another process's creation
    under way: it is given that long to commit before it is taken for a killed one's."""
    assert ref.path is not None, "a path's table"
    what = what or str(ref)
    settled = time.monotonic() + SETTLE_SECONDS
    last = None
    attempt = 0
    while not has_commit(spark, ref.path):
        found = clear_uncommitted(spark, ref.path, what, SETTLE_SECONDS if time.monotonic() < settled else 0.0)
        if found == "fresh":
            time.sleep(0.25)
            continue
        if found == "table":
            return False
        try:
            create()
        except Exception as exc:  # noqa: BLE001 - a race with another creator is retried below
            if not _is_race(exc):
                raise
            last = exc
        if has_commit(spark, ref.path):
            return last is None
        attempt += 1
        if attempt >= ATTEMPTS:
            raise StateError("the Delta table could not be created: its location holds no commit after "
                             f"{ATTEMPTS} attempts" + (f" (last error: {_first_line(last)})" if last else ""),
                             table=what, path=ref.path)
        time.sleep(0.2 * attempt)
    return False


def _is_race(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {str(exc)[:2000]}"
    return any(marker in text for marker in _RACES)


def _first_line(exc: BaseException | None) -> str:
    text = str(exc or "").strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
