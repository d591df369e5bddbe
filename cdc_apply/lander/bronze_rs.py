"""Bronze without a JVM: the lander's appends to a bronze table at a local path or on object storage,
through delta-rs.

The lander does no Spark work: it writes Parquet with pyarrow and needs a Delta commit. For a bronze
table at a path that delta-rs may write (:func:`spark_reason`: a local folder, or ``s3://``/``s3a://``,
``abfss://``, ``gs://`` that the environment configures delta-rs for, :mod:`cdc_apply.delta.storage`),
:class:`RsBronzeWriter` does what
:class:`~cdc_apply.lander.bronze_writer.BronzeWriter` does — create the table, read back where this
source stands, one commit per batch with ``SetTransaction(cdc_apply-land:<source>, batch)`` and the
resume state as ``userMetadata`` — through :mod:`cdc_apply.delta.rs_commit`, so ``cdc-apply land``
starts no JVM. On object storage a commit is exclusive by delta-rs's conditional put; settings that
turn it off are refused at :meth:`RsBronzeWriter.open`
(:func:`~cdc_apply.delta.storage.check_exclusive_settings`), never written under. A catalog table, a path on a
store the environment does not configure, and a table Spark made with features this path does not write
(deletion vectors, column mapping, columns of the user's own, ...) keep Spark's writer; :func:`open_writer`
picks, and says why when a path bronze falls back.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from datetime import datetime, timezone

import pyarrow as pa

from cdc_apply.delta import files as delta_files
from cdc_apply.delta import rs_commit, storage
from cdc_apply.delta.bronze_schema import ARROW_SCHEMA, REQUIRED_COLUMNS
from cdc_apply.delta.names import pg_literal
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import CdcApplyError, LandError
from cdc_apply.lander.bronze_commit import BronzeFile, check_not_written, stream_batch, write_file
from cdc_apply.lander.state import Batch, ResumeState, rebuild_state

BRONZE_PROPERTIES = {"delta.appendOnly": "true"}
# delta-rs names Delta's primitive types as the protocol does; the contract states Spark's names.
_SPARK_NAMES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}


def spark_reason(ref: TableRef) -> str | None:
    """Why landing into ``ref`` needs Spark (None: delta-rs writes it, no JVM). A reason about the table
    itself (its features) is one a user may want to hear: the lander logs it once."""
    path = delta_files.rs_uri(ref)
    if path is None:
        if ref.path is None:
            return "bronze.table is a catalog table"
        if storage.object_uri(ref.path) is not None:
            return ("bronze.path is on object storage and the environment holds no credentials for delta-rs "
                    f"(set them, or {storage.ENGINE_VARIABLE}=delta-rs for the credential chain)")
        return "bronze.path is neither a local path nor on object storage delta-rs writes"
    try:
        if not rs_commit.is_table(path):
            return None
        return rs_commit.unwritable_reason(rs_commit.open_table(path), ARROW_SCHEMA.names)
    except CdcApplyError:
        raise
    except Exception as exc:  # noqa: BLE001 - a log delta-rs cannot read at all is Spark's to judge
        cause = storage.redact(str(exc).splitlines()[0][:200]) if str(exc) else type(exc).__name__
        return f"delta-rs cannot read its log ({cause})"


def open_writer(spark, ref: TableRef, source: str, say=None):
    """The writer of ``ref`` for ``source``: :class:`RsBronzeWriter` where :func:`spark_reason` allows,
    else Spark's :class:`~cdc_apply.lander.bronze_writer.BronzeWriter` (``spark`` must then be a session);
    ``say`` hears the one line on why a path bronze lands through Spark."""
    reason = spark_reason(ref)
    if reason is None:
        return RsBronzeWriter(ref, source)
    if spark is None:
        raise LandError(f"landing into this bronze table needs Spark: {reason}", table=str(ref))
    if ref.path is not None and say is not None:
        say(f"landing through Spark: {ref} has {reason}")
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lander.bronze_writer import BronzeWriter

    return BronzeWriter(spark_tables(spark), ref, source)


class RsBronzeWriter:
    """The bronze table at a path (local or object storage) as one source's lander sees it, written through
    delta-rs."""

    spark = None         # the snapshot appender's Spark fallback is never taken: every append is direct

    def __init__(self, ref: TableRef, source: str) -> None:
        self.ref = ref
        self.source = source
        self.app_id = f"cdc_apply-land:{source}"
        self.run_id = uuid.uuid4().hex
        self.rebuilt_from_rows = False
        uri = delta_files.rs_uri(ref)
        if uri is None:   # open_writer takes this writer for delta-rs's paths only
            raise LandError("delta-rs lands only into a bronze table at a local path or on object storage it "
                            "is configured for", table=str(ref))
        remote = storage.object_uri(uri) is not None
        self.folder: str = uri.rstrip("/") if remote else os.path.abspath(uri)
        # on object storage pyarrow writes the batch's file through delta-rs's store (its credentials)
        self.file_system = delta_files.StoreFiles(self.folder) if remote else None
        self._table = None

    # -- start -------------------------------------------------------------------
    def open(self) -> ResumeState:
        """Create the table if needed, check its schema, and return where this source stands. On object
        storage, settings that would make its commits non-exclusive are refused first (``ConfigError``)."""
        if storage.object_uri(self.folder) is not None:
            storage.check_exclusive_settings(self.folder)
        rs_commit.create_table(self.folder, ARROW_SCHEMA, BRONZE_PROPERTIES, what="bronze")
        table = self._table = rs_commit.open_table(self.folder)
        self._check_schema(table)
        reason = rs_commit.unwritable_reason(table, ARROW_SCHEMA.names)
        if reason is not None:     # changed since the writer was chosen: Spark's writer is the one to use
            raise LandError(f"the bronze table has {reason}: start the lander again to land through Spark",
                            table=str(self.ref))
        max_seq = self._newest_seq(table)
        written = rs_commit.app_version(table, self.app_id)
        state = self._last_metadata(table)
        if state is not None and state.last_seq == (-1 if max_seq is None else max_seq):
            return replace(state, batch=max(state.batch, written or 0))
        if max_seq is None:
            return ResumeState(batch=written or 0)
        # Rows without (matching) lander metadata: rebuild from the rows themselves.
        self.rebuilt_from_rows = True
        rows = delta_files.read_rows(table, ["seq", "lsn", "payload"],
                                     f"source = {pg_literal(self.source)}").sort_by("seq")
        return rebuild_state(zip(rows.column("seq").to_pylist(), rows.column("lsn").to_pylist(),
                                 rows.column("payload").to_pylist()),
                             batch=max(written or 0, state.batch if state else 0), source=self.source)

    def _check_schema(self, table) -> None:
        present = {f.name: _SPARK_NAMES.get(str(f.type.type), str(f.type.type)) if hasattr(f.type, "type")
                   else "complex" for f in table.schema().fields}
        wrong = [f"{n} is {present[n]}" if n in present else f"no column {n!r}"
                 for n, kind in REQUIRED_COLUMNS.items() if present.get(n) != kind]
        if wrong:
            raise LandError(f"the bronze table does not have the bronze schema ({'; '.join(wrong)}); point "
                            "bronze.path/bronze.table at a bronze table or at a new location", table=str(self.ref))

    def _newest_seq(self, table) -> int | None:
        """This source's newest seq: from the live files' statistics where a file holds this source alone,
        else from the file's rows."""
        newest = None
        for file in delta_files.live_files(table, ["source", "seq"]):
            low, high = file.low.get("source"), file.high.get("source")
            if low is not None and low == high and not file.deleted_rows:
                if low != self.source or file.records == 0:
                    continue
                top = file.high.get("seq")
            else:
                rows = delta_files.file_rows(table, file, ["source", "seq"])
                mine = [s for src, s in zip(rows.column("source").to_pylist(), rows.column("seq").to_pylist())
                        if src == self.source]
                top = max(mine) if mine else None
            if top is not None and (newest is None or top > newest):
                newest = int(top)
        return newest

    def _last_metadata(self, table) -> ResumeState | None:
        text = rs_commit.newest_user_metadata(table, '"app":' + json.dumps(self.app_id))
        if text is None:
            return None
        try:
            app, state = ResumeState.from_json(text)
        except (ValueError, KeyError, TypeError, IndexError):
            return None
        return state if app == self.app_id else None

    # -- batches -------------------------------------------------------------------
    def append(self, batch: Batch, landed_at: datetime | None = None) -> None:
        """One Delta commit with the batch's rows (one file, seq order) and its resume state."""
        rows = stream_batch(self.source, batch.rows, landed_at or datetime.now(timezone.utc))
        self.commit_files([write_file(self.folder, [rows], self.file_system)] if batch.rows else [], batch.state)

    def append_table(self, table: pa.Table, state: ResumeState, files: int = 1) -> None:
        """Bronze rows (Arrow, the bronze schema) in one commit, as one file."""
        self.commit_files([write_file(self.folder, table.to_batches(), self.file_system)] if table.num_rows else [],
                          state)

    def commit_files(self, files: list[BronzeFile], state: ResumeState) -> int:
        """One Delta commit adding ``files`` with ``state`` as userMetadata and batch ``state.batch``; its
        version. A :class:`LandError` when the batch is in bronze already (the files stay unreferenced:
        VACUUM removes them)."""
        checks = []

        def check(written: int | None) -> None:
            checks.append(written)
            if len(checks) > 1 and written is not None and written >= state.batch:
                raise LandError(f"batch {state.batch} of source {self.source!r} was committed to bronze by another "
                                "run while this one committed it: run one lander per source, then start this one "
                                "again", table=str(self.ref), app_id=self.app_id)
            check_not_written(self, written, state.batch)

        if self._table is None:
            self._table = rs_commit.open_table(self.folder)
        try:
            return rs_commit.commit_files(self._table, files, (self.app_id, state.batch),
                                          state.to_json(self.app_id, self.run_id), check)
        except CdcApplyError:
            raise
        except Exception as exc:  # noqa: BLE001 - storage, a log delta-rs refuses: named, with the batch
            cause = storage.redact(str(exc).strip().splitlines()[0][:300]) if str(exc).strip() else type(exc).__name__
            raise LandError(f"committing batch {state.batch} to bronze failed: {cause}",
                            table=str(self.ref), app_id=self.app_id) from None

    def _txn_version(self) -> int | None:
        """The newest batch bronze recorded for this source's app id (None: none)."""
        table = self._table or rs_commit.open_table(self.folder)
        table.update_incremental()
        return rs_commit.app_version(table, self.app_id)

