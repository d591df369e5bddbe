"""Bronze I/O for the lander: where a source stands, and one Delta append per batch.

Each append records ``SetTransaction(appId = cdc_apply-land:<source>, version =`` the
batch number``)`` and, as ``userMetadata``, the
:class:`~cdc_apply.lander.state.ResumeState` after the batch. The state therefore
commits atomically with the rows it describes; on start the lander reads it
back from the newest such commit and checks it against ``max(seq)``. A plain
local table is appended to without Spark jobs (:mod:`cdc_apply.lander.bronze_commit`);
any other through Spark's writer with ``txnAppId``/``txnVersion``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import datetime, timezone

import pyarrow as pa

from cdc_apply.delta.bronze_schema import BRONZE_DDL, check_bronze_schema, create_bronze_table
from cdc_apply.delta.engine import SparkTables
from cdc_apply.delta.log import app_version, newest_snapshot
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import ConfigError, LandError
from cdc_apply.lander.bronze_commit import check_not_written, commit_files, direct_folder, stream_batch, write_file
from cdc_apply.lander.state import Batch, ResumeState, rebuild_state

HISTORY_PROBES = (50, None)    # commits to look back for the lander's last metadata: then all


class BronzeWriter:
    """The bronze table as one source's lander sees it."""

    file_system = None   # pyarrow writes its files into the local folder itself (RsBronzeWriter: maybe a store's)

    def __init__(self, tables: SparkTables, ref: TableRef, source: str, direct: bool = True) -> None:
        """``direct=False``: always append through Spark's writer (the fallback, also for tests)."""
        self.tables = tables
        self.spark = tables.spark
        self.ref = ref
        self.source = source
        self.app_id = f"cdc_apply-land:{source}"
        self.run_id = uuid.uuid4().hex
        self.rebuilt_from_rows = False
        self._location: str | None = ref.path
        self._direct = direct
        self.folder: str | None = None     # set by open(): where pyarrow writes this table's files, if it may

    # -- start -------------------------------------------------------------------
    def open(self) -> ResumeState:
        """Create the table if needed, check its schema, and return where this source stands."""
        from pyspark.sql import functions as F

        self._ensure_table()
        self.folder = direct_folder(self._location, self.delta_log()) if self._direct else None
        df = self.ref.read(self.spark)
        try:
            check_bronze_schema(df.schema, str(self.ref))
        except ConfigError as err:
            raise LandError(f"the bronze table does not have the bronze schema ({err.detail}); point "
                            "bronze.path/bronze.table at a bronze table or at a new location",
                            table=str(self.ref)) from None
        mine = df.where(F.col("source") == self.source)
        max_seq = mine.agg(F.max("seq").alias("m")).collect()[0].m
        written = self._txn_version()
        state = self._last_metadata()
        if state is not None and state.last_seq == (-1 if max_seq is None else int(max_seq)):
            return replace(state, batch=max(state.batch, written or 0))
        if max_seq is None:
            return ResumeState(batch=written or 0)
        # Rows without (matching) lander metadata: rebuild from the rows themselves.
        self.rebuilt_from_rows = True
        rows = mine.select("seq", "lsn", "payload").orderBy("seq").toLocalIterator()
        return rebuild_state(((r.seq, r.lsn, bytes(r.payload)) for r in rows),
                             batch=max(written or 0, state.batch if state else 0), source=self.source)

    def _ensure_table(self) -> None:
        if self.ref.path is not None:
            if not self.tables.exists(self.ref):
                create_bronze_table(self.tables, self.ref.path)
            return
        if not self.tables.exists(self.ref):
            self.tables.ensure_table(self.ref, lambda: self.spark.sql(
                f"CREATE TABLE IF NOT EXISTS {self.ref.sql} ({BRONZE_DDL}) USING delta "
                "TBLPROPERTIES ('delta.appendOnly' = 'true')"), what="bronze")
        try:
            detail = self.spark.sql(f"DESCRIBE DETAIL {self.ref.sql}").collect()[0]
            self._location = detail.location
        except Exception:  # not every catalog answers DESCRIBE DETAIL; the history path still works
            self._location = None

    def _last_metadata(self) -> ResumeState | None:
        from pyspark.sql import functions as F

        if self.ref.path is None and self.ref.name is None:
            raise ConfigError("bronze has neither a path nor a table name", key="bronze.path")
        table = self.tables.delta_table(self.ref)
        needle = '"app":' + json.dumps(self.app_id)
        for limit in HISTORY_PROBES:
            history = table.history(limit) if limit else table.history()
            rows = (history.where(F.col("userMetadata").contains(needle))
                    .orderBy(F.col("version").desc()).select("userMetadata").limit(1).collect())
            if rows:
                try:
                    app, state = ResumeState.from_json(rows[0].userMetadata)
                except (ValueError, KeyError, TypeError, IndexError):
                    return None
                return state if app == self.app_id else None
            if limit is not None and history.count() < limit:
                return None
        return None

    def delta_log(self):
        """The table's ``DeltaLog`` (None: no JVM to ask, as under Spark Connect, or no location known)."""
        if self._location is None:
            return None
        return self.tables.delta_log(TableRef(path=self._location))  # None: userMetadata alone then

    def _txn_version(self) -> int | None:
        """The newest batch Delta recorded for this source's app id (None: none, or unknown), from the
        version checksum where Delta keeps one."""
        log = self.delta_log()
        if log is None:
            return None
        return app_version(self.spark, newest_snapshot(log), self.app_id)

    # -- batches -------------------------------------------------------------------
    def append(self, batch: Batch, landed_at: datetime | None = None) -> None:
        """One Delta commit with the batch's rows (one file, seq order) and its resume state."""
        rows = stream_batch(self.source, batch.rows, landed_at or datetime.now(timezone.utc))
        if self.folder is not None:
            commit_files(self, [write_file(self.folder, [rows])] if batch.rows else [], batch.state)
        else:
            self.append_table(pa.Table.from_batches([rows]), batch.state)

    def commit_files(self, files, state: ResumeState) -> int:
        """One Delta commit adding ``files`` (written into :attr:`folder`) with ``state``; its version."""
        return commit_files(self, files, state)

    def append_table(self, table, state: ResumeState, files: int = 1) -> None:
        """Bronze rows (Arrow, the bronze schema) in one commit through Spark's writer, in ``files`` files,
        with ``txnAppId``/``txnVersion`` = this source's app id and ``state.batch``."""
        from cdc_apply.delta.bronze_schema import spark_schema

        version = state.batch
        check_not_written(self, self._txn_version(), version)
        df = self.spark.createDataFrame(table, schema=spark_schema()).coalesce(files)
        writer = (df.write.format("delta").mode("append")
                  .option("txnAppId", self.app_id).option("txnVersion", str(version))
                  .option("userMetadata", state.to_json(self.app_id, self.run_id)))
        if self.ref.path:
            writer.save(self.ref.path)
        else:
            writer.saveAsTable(self.ref.catalog_name)
        written = self._txn_version()
        if written is not None and written < version:
            raise LandError(f"Delta did not record batch {version} of source {self.source!r}",
                            table=str(self.ref), app_id=self.app_id)
