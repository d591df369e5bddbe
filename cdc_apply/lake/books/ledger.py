"""Which writes a silver table already has: exactly once without Delta's ``txnAppId`` check.

Every silver commit of a batch carries, in its ``userMetadata``, the pipeline's app id and its
*step* — ``apply version * STEPS_PER_VERSION + k`` (1 the truncate, 2 the load of a snapshot's rows,
``3 + 2j`` the MERGE of identity segment ``j``, ``4 + 2j`` the append of its new keys). A write whose
step is not above the newest step the table records for the app id is one a crashed run already
committed, and is skipped.

Delta's own idempotent writes (``txnAppId``/``txnVersion``) say the same, but their check rebuilds the
table's whole state on every write to read the transactions it recorded — three Spark jobs per table
per batch. Here the newest step is read once per table and process from the table's recent commits
(``DESCRIBE HISTORY``, which reads commit files, not the table's state) and kept up to date after.
Tables written before steps were recorded answer from Delta's recorded ``txnVersion`` once.

A step also records the bronze seqs its batch covered per source (``batch_seqs``: after the previous
batch's applied seq, up to this one's last). A crashed batch re-runs with the same seqs, so a write
found at the same step with other seqs means the state is not the one the table was written from (a
state folder lost, or restored from a copy one batch old): skipping would drop the rows between the two
ends, so it is a :class:`~cdc_apply.errors.StateError` instead.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from cdc_apply.delta.ddl import USER_METADATA
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import StateError
from cdc_apply.lake.books.commit_tag import app_marker, decode_tag, encode_tag
from cdc_apply.pgoutput.messages import format_lsn, parse_lsn

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables

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
T = TypeVar("T")


def batch_tag(source: str, relation: str, last_commit_lsn: int, history: bool = False) -> dict[str, Any]:
    """What a batch's data commit of a silver (or ``history``) table says besides its step
    (:mod:`cdc_apply.lake.books.commit_tag`): the source, the relation and the commit LSN of the last
    transaction it applies, as PostgreSQL writes it (``X/Y``) and as the BIGINT silver's and the
    bookkeeping's LSN columns hold."""
    tag: dict[str, Any] = {"source": source, "relation": relation}
    if history:
        tag["history"] = True
    tag.update(last_commit_lsn=format_lsn(last_commit_lsn), last_commit_lsn_bigint=last_commit_lsn)
    return tag


def tag_commit_lsn(tag: Mapping[str, Any]) -> int | None:
    """The commit LSN of the last transaction a :func:`batch_tag` says its commit applies (None: the tag
    says none)."""
    if tag.get("last_commit_lsn_bigint") is not None:
        return int(tag["last_commit_lsn_bigint"])
    return parse_lsn(tag["last_commit_lsn"]) if tag.get("last_commit_lsn") else None


class SilverLedger:
    """The newest step of each silver table, per app id (one ledger per job; tables in threads)."""

    def __init__(self) -> None:
        self._steps: dict[str, int] = {}
        self._seqs: dict[str, tuple[int, int] | None] = {}   # the newest step's batch seqs, where recorded
        self._expected: dict[str, tuple[int, tuple[int, int]]] = {}   # app id -> (apply version, batch seqs)
        self._lock = threading.Lock()

    def expect(self, app_id: str, version: int, seqs: tuple[int, int]) -> None:
        """The batch about to write for ``app_id``: its apply version and the bronze seqs it covers."""
        with self._lock:
            self._expected[app_id] = (version, (int(seqs[0]), int(seqs[1])))

    def newest(self, tables: SparkTables, ref: TableRef, app_id: str) -> int:
        """The newest step the table records for ``app_id`` (-1: none)."""
        key = f"{ref}|{app_id}"
        with self._lock:
            known = self._steps.get(key)
        if known is None:
            known, seqs = _read_newest(tables, ref, app_id) if tables.exists(ref) else (-1, None)
            with self._lock:
                if known >= self._steps.get(key, -1):
                    self._steps[key], self._seqs[key] = known, seqs
        return known

    def check_batch(self, tables: SparkTables, ref: TableRef, app_id: str, what: str, **context) -> None:
        """Raise :class:`StateError` when the table holds a write of the expected batch's apply version made
        from other bronze seqs: a state that does not match the table (see the module's docstring)."""
        newest = self.newest(tables, ref, app_id)
        with self._lock:
            expected = self._expected.get(app_id)
            seqs = self._seqs.get(f"{ref}|{app_id}")
        if expected is None or seqs is None or newest // STEPS_PER_VERSION != expected[0] or seqs == expected[1]:
            return
        raise StateError(
            f"{what} {ref} holds a write of apply version {expected[0]} made from bronze seqs "
            f"{seqs[0] + 1}..{seqs[1]}, "
            f"but the state about to apply that version covers seqs {expected[1][0] + 1}..{expected[1][1]}: the state "
            "was lost or restored from an older copy, and applying now would skip rows. Restore the state folder "
            "that goes with the tables, or remove the silver (and history) tables together with the state to "
            "rebuild them from bronze", **context)

    def write(self, tables: SparkTables, ref: TableRef, app_id: str, step: int, tag: Mapping[str, Any],
              action: Callable[[str], T]) -> T | None:
        """Run ``action(metadata)`` as the write of ``step`` unless the table has it (a re-run): ``None``
        then. ``metadata``, the ``userMetadata`` of its commits (``tag`` plus the app id, step and batch
        seqs), is set on ``tables``' session while it runs; a writer that takes its own option gets it too."""
        metadata = self._claim(tables, ref, app_id, step, tag)
        if metadata is None:
            return None
        tables.spark.conf.set(USER_METADATA, metadata)
        try:
            result = action(metadata)
        finally:
            tables.spark.conf.unset(USER_METADATA)
        self.wrote(ref, app_id, step)
        return result

    def _claim(self, tables: SparkTables, ref: TableRef, app_id: str, step: int, tag: Mapping[str, Any]) -> str | None:
        """The ``userMetadata`` for a write of ``step`` (``tag`` plus the app id, step and batch seqs), or
        ``None`` when the table already has it: skip the write."""
        if step <= self.newest(tables, ref, app_id):
            return None
        body = {**tag, "app": app_id, "apply_step": step}
        with self._lock:
            expected = self._expected.get(app_id)
        if expected is not None and expected[0] == step // STEPS_PER_VERSION:
            body["batch_seqs"] = list(expected[1])
        return encode_tag(body)

    def wrote(self, ref: TableRef, app_id: str, step: int) -> None:
        with self._lock:
            key = f"{ref}|{app_id}"
            if step >= self._steps.get(key, -1):
                expected = self._expected.get(app_id)
                self._steps[key] = step
                self._seqs[key] = expected[1] if expected and expected[0] == step // STEPS_PER_VERSION else None


def _read_newest(tables: SparkTables, ref: TableRef, app_id: str) -> tuple[int, tuple[int, int] | None]:
    """The newest step the table's commits record for ``app_id`` and that commit's batch seqs."""
    from pyspark.sql import functions as F

    table = tables.delta_table(ref)
    needle = app_marker(app_id)
    for limit in HISTORY_PROBES:
        history = table.history(limit) if limit else table.history()
        rows = history.where(F.col("userMetadata").contains(needle)).select("userMetadata").collect()
        tags = [t for t in (_tag(r.userMetadata, app_id) for r in rows) if t is not None]
        if tags:
            return max(tags, key=lambda t: t[0])
        if limit is not None and history.count() < limit:
            break
    recorded = tables.recorded_txn_version(ref, app_id)  # written before steps were recorded
    return (-1 if recorded is None else recorded), None


def _tag(text: str, app_id: str) -> tuple[int, tuple[int, int] | None] | None:
    """(step, batch seqs or None) of a commit's ``userMetadata`` written for ``app_id``."""
    tag = decode_tag(text)
    if tag is None or tag.get("app") != app_id:
        return None
    try:
        seqs = tag.get("batch_seqs")
        return int(tag["apply_step"]), (int(seqs[0]), int(seqs[1])) if seqs else None
    except (ValueError, KeyError, TypeError, IndexError):
        return None
