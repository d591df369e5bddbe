"""Delta commits without a JVM: delta-rs (``deltalake``) creates a table and commits files pyarrow wrote.

The lander's bronze commits need no Spark job (:mod:`cdc_apply.delta.commit` only borrows Delta's JVM
classes for the log), so a table at a local path is created and appended to through delta-rs instead:
the same ``add`` actions with the same statistics, the same ``SetTransaction`` (app id, batch) and the
same ``commitInfo.userMetadata`` that Spark's ``DESCRIBE HISTORY`` shows.

Exactly once does not rest on delta-rs's conflict checker: every commit is tried with no retries at
the version after the snapshot whose app-id version was checked, so a commit of anyone else in between
(another run of the same source, another source, ``OPTIMIZE``) makes it fail; the table is then read
again, the check is made again on the newer snapshot, and the commit tried again
(:func:`commit_files`). Only tables whose features this path honours are written
(:func:`unwritable_reason`); the rest keep Spark's writer.

On object storage that loop is exactly once only if writing commit N+1 fails when it exists. delta-rs
first lists the log past its snapshot (a commit made before that is found there) and then writes the
commit with a conditional put (S3's ``If-None-Match: *``; Azure's and GCS's own), which fails when
another writer's commit of that version came in between; with the conditional put turned off it refuses
to commit at all (settings that do so are refused by name first:
:func:`cdc_apply.delta.storage.check_exclusive_settings`).
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterable, Sequence

import pyarrow as pa

from cdc_apply.delta import storage
from cdc_apply.delta.arrow_files import AddedFile
from cdc_apply.errors import StateError

# Writer features a commit of plain files honours: the files are written whole by pyarrow with the
# table's NOT NULL columns, never updated or deleted. Anything else (deletion vectors, column mapping,
# row tracking, check constraints, change data feed, generated columns, ...) keeps Spark's writer.
WRITABLE_FEATURES = frozenset({"appendOnly", "invariants"})
COMMIT_ATTEMPTS = 100          # commits by others in a row before giving up (OPTIMIZE, other sources)
CREATE_ATTEMPTS = 5


def _options(path: str) -> dict[str, str] | None:
    return storage.storage_options(path) if storage.object_uri(path) is not None else None


def is_table(path: str) -> bool:
    """Whether ``path`` (a local folder or an object store URI) holds a Delta table (a commit or a
    checkpoint in its log)."""
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(path, storage_options=_options(path))


def open_table(path: str):
    """The ``deltalake.DeltaTable`` at ``path`` (which must hold one)."""
    from deltalake import DeltaTable

    return DeltaTable(path, storage_options=_options(path))


def unwritable_reason(table, columns: Sequence[str]) -> str | None:
    """Why a commit of plain Parquet files through delta-rs would not honour ``table`` (None: it would):
    a protocol feature it does not implement, partitions, column mapping, or columns beyond ``columns``
    (a column of the user's own would be null in these files, its NOT NULL unchecked)."""
    protocol = table.protocol()
    metadata = table.metadata()
    features = set(protocol.writer_features or ()) | set(protocol.reader_features or ())
    if protocol.min_writer_version >= 7:
        unknown = sorted(features - WRITABLE_FEATURES)
    else:
        unknown = [f"writer version {protocol.min_writer_version}"] if protocol.min_writer_version > 2 else []
    if protocol.min_reader_version > 1 and (protocol.min_reader_version != 3 or protocol.reader_features):
        unknown = unknown or [f"reader version {protocol.min_reader_version}"]
    if unknown:
        return f"table features delta-rs does not write here: {', '.join(unknown)}"
    mapping = metadata.configuration.get("delta.columnMapping.mode", "none")
    if mapping not in ("none", None):
        return f"column mapping ({mapping})"
    if metadata.partition_columns:
        return f"partition columns ({', '.join(metadata.partition_columns)})"
    names = [f.name for f in table.schema().fields]
    if sorted(names) != sorted(columns):
        return f"columns beyond the contract's ({', '.join(sorted(set(names) - set(columns))) or 'missing ones'})"
    return None


def create_table(path: str, schema: pa.Schema, configuration: dict[str, str], what: str) -> bool:
    """Create an empty Delta table at ``path`` unless one is there; True when this call created it.

    Two processes creating it together both end with the one table (the loser's commit of version 0
    fails and the table is then found). A folder holding files but no Delta log is refused, as
    :mod:`cdc_apply.delta.table_create` refuses it: it is not ours to write into. A log folder without
    a commit (a creation killed midway) is written over: delta-rs writes version 0 if it is absent."""
    from deltalake import DeltaTable

    last = None
    options = _options(path)
    for attempt in range(CREATE_ATTEMPTS):
        if DeltaTable.is_deltatable(path, storage_options=options):
            return False
        # On object storage there are no folders: a prefix holding other files is not looked for.
        if options is None and os.path.isdir(path):
            others = sorted(n for n in os.listdir(path) if n != "_delta_log")
            if others and not os.path.isdir(os.path.join(path, "_delta_log")):
                raise StateError("the location holds files but no Delta table: it is not cdc_apply's to write "
                                 "into; move them away or point the setting at another folder", table=what,
                                 path=path, files=", ".join(others[:5]))
        try:
            DeltaTable.create(path, schema=schema, mode="error", configuration=configuration,
                              storage_options=options)
            return True
        except Exception as exc:  # noqa: BLE001 - another creator's version 0 came first: looked at again
            last = exc
        time.sleep(0.1 * (attempt + 1))
    if DeltaTable.is_deltatable(path, storage_options=options):
        return False
    cause = storage.redact(str(last).splitlines()[0][:300]) if last else "?"
    raise StateError(f"the Delta table could not be created after {CREATE_ATTEMPTS} attempts (last error: "
                     f"{cause})", table=what, path=path)


def app_version(table, app_id: str) -> int | None:
    """The newest version ``app_id`` recorded in the table's loaded snapshot (None: none)."""
    return table.transaction_version(app_id)


def newest_user_metadata(table, contains: str, probes: Iterable[int | None] = (50, None)) -> str | None:
    """The ``userMetadata`` of the newest commit whose text contains ``contains`` (None: no such commit),
    looking back ``probes`` commits at a time (None: all of them)."""
    for limit in probes:
        history = table.history(limit)
        for commit in sorted(history, key=lambda c: c.get("version", -1), reverse=True):
            text = commit.get("userMetadata")
            if isinstance(text, str) and contains in text:
                return text
        if limit is not None and len(history) < limit:
            return None
    return None


def commit_files(table, files: Sequence[AddedFile], app: tuple[str, int], user_metadata: str,
                 check: Callable[[int | None], None]) -> int:
    """One Delta commit adding ``files`` with ``SetTransaction`` ``app`` = (app id, version) and
    ``user_metadata``; its version. ``check`` is given the version the app id recorded in the snapshot
    the commit follows and may raise to stop it; see the module for why a concurrent commit cannot make
    it land twice. ``table`` is brought up to date first and after."""
    from deltalake import CommitProperties, Transaction
    from deltalake.transaction import AddAction

    now = int(time.time() * 1000)
    unmeasured = [f.name for f in files if f.stats is None]
    if unmeasured:   # delta-rs commits a file's statistics as given: the lander's files always carry them
        raise StateError(f"files without Delta statistics cannot be committed here: {', '.join(unmeasured)}")
    actions = [AddAction(f.name, f.size, {}, now, True, f.stats or "") for f in files]
    metrics = {"numFiles": str(len(files)), "numOutputRows": str(sum(f.rows for f in files)),
               "numOutputBytes": str(sum(f.size for f in files))}
    last = None
    for attempt in range(COMMIT_ATTEMPTS):
        table.update_incremental()
        check(app_version(table, app[0]))
        before = table.version()
        properties = CommitProperties(custom_metadata={"userMetadata": user_metadata,
                                                       "operationMetrics": metrics},
                                      app_transactions=[Transaction(app[0], app[1], now)], max_commit_retries=0)
        try:
            table.create_write_transaction(actions, mode="append", schema=table.schema(),
                                           commit_properties=properties)
        except Exception as exc:  # noqa: BLE001 - another commit took the version: read again, check again
            table.update_incremental()
            if type(exc).__name__ != "CommitFailedError" or table.version() == before:
                raise
            last = exc
            time.sleep(min(0.5, 0.01 * (attempt + 1)))
            continue
        table.update_incremental()
        return before + 1
    raise RuntimeError(f"{COMMIT_ATTEMPTS} commits in a row met another commit: {last}")

