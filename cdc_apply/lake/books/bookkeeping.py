"""The bookkeeping tables under the ``[state]`` location.

=================  ==========================================================
schema_history     one row per Relation version (source, relation, columns, first seq, LSN)
type_cache         one row per Type message that named a type anew
transactions       one row per applied transaction, with per-table counts and truncate flags
messages           logical decoding messages ('M'), transactional and not
quarantine         messages that could not be decoded or applied (on_error = "quarantine")
progress           per source and apply version: applied-through seq and commit LSN, carried state, lag,
                   and the Delta version of every silver (and history) table the batch changed
failures           one row per failed batch attempt: the source its error names (NULL: none, the batch failed
                   as a whole), version, error
=================  ==========================================================

Every table has an ``apply_version`` column, and an append is skipped when the table already holds
rows of that apply version or a later one (read once per table and process, then kept; from the
statistics of the files the newest append added, which hold the largest version, or by a query when
they cannot tell): a re-run batch writes nothing twice. This replaces Delta's
``txnAppId``/``txnVersion`` here, whose check rebuilds the table's whole state on every append —
three Spark jobs per bookkeeping write. (Failures are recorded unguarded: an attempt may fail many
times.)
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from cdc_apply.config import Config
from cdc_apply.delta.ddl import column_list, create_table
from cdc_apply.delta.refs import TableRef, state_ref
from cdc_apply.errors import CdcApplyError
from cdc_apply.lake.books.state_files import local_columns, local_rows, newest_rows_per_source
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import decode_message
from cdc_apply.pgoutput.encoder import encode
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.state import SourceState

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession  # pyarrow is imported where it is used

    from cdc_apply.delta.engine import SparkTables

COLUMN_STRUCT = "STRUCT<name: STRING, type_oid: BIGINT, type_name: STRING, type_modifier: INT, key: BOOLEAN>"

SCHEMAS: dict[str, list[tuple[str, str]]] = {
    "schema_history": [
        ("source", "STRING"), ("relation_id", "BIGINT"), ("seq", "BIGINT"), ("lsn", "BIGINT"),
        ("namespace", "STRING"), ("name", "STRING"), ("replica_identity", "STRING"),
        ("columns", f"ARRAY<{COLUMN_STRUCT}>"), ("relation_message", "BINARY"),
        ("apply_version", "BIGINT"), ("recorded_at", "TIMESTAMP"),
        ("missing_values", "STRING"),  # JSON {column: text}: what rows before this version read for added columns
    ],
    "type_cache": [
        ("source", "STRING"), ("type_oid", "BIGINT"), ("namespace", "STRING"), ("name", "STRING"),
        ("seq", "BIGINT"), ("lsn", "BIGINT"), ("apply_version", "BIGINT"), ("recorded_at", "TIMESTAMP"),
    ],
    "transactions": [
        ("source", "STRING"), ("xid", "BIGINT"), ("kind", "STRING"), ("gid", "STRING"),
        ("commit_lsn", "BIGINT"), ("end_lsn", "BIGINT"), ("commit_ts", "TIMESTAMP"),
        ("origin", "STRING"), ("origin_lsn", "BIGINT"), ("begin_seq", "BIGINT"), ("commit_seq", "BIGINT"),
        ("changes", "BIGINT"),
        ("tables", "ARRAY<STRUCT<table: STRING, inserts: BIGINT, updates: BIGINT, deletes: BIGINT, "
                   "truncated: BOOLEAN, cascade: BOOLEAN, restart_identity: BOOLEAN>>"),
        ("apply_version", "BIGINT"), ("applied_at", "TIMESTAMP"),
    ],
    "messages": [
        ("source", "STRING"), ("seq", "BIGINT"), ("lsn", "BIGINT"), ("xid", "BIGINT"),
        ("transactional", "BOOLEAN"), ("prefix", "STRING"), ("content", "BINARY"),
        ("commit_lsn", "BIGINT"), ("commit_ts", "TIMESTAMP"), ("apply_version", "BIGINT"),
    ],
    "quarantine": [
        ("source", "STRING"), ("seq", "BIGINT"), ("lsn", "BIGINT"), ("payload", "BINARY"),
        ("error", "STRING"), ("apply_version", "BIGINT"), ("quarantined_at", "TIMESTAMP"),
    ],
    "progress": [
        ("source", "STRING"), ("apply_version", "BIGINT"), ("batch_id", "BIGINT"),
        ("applied_seq", "BIGINT"), ("applied_commit_lsn", "BIGINT"), ("applied_commit_ts", "TIMESTAMP"),
        ("applied_end_lsn", "BIGINT"), ("state", "STRING"), ("bronze_max_seq", "BIGINT"),
        ("messages", "BIGINT"), ("transactions", "BIGINT"), ("carried", "INT"),
        ("oldest_needed_seq", "BIGINT"), ("lag_seq", "BIGINT"), ("lag_seconds", "DOUBLE"),
        ("updated_at", "TIMESTAMP"),
        # The Delta version each table the batch changed has after it (time travel to batch ends: as_of.py).
        ("tables", "ARRAY<STRUCT<relation_id: BIGINT, table: STRING, silver_version: BIGINT, "
                   "history_version: BIGINT, last_commit_lsn: BIGINT>>"),
        # Every table of the source any batch changed, with the Delta versions the last such batch left it
        # at (JSON {"<relation id>": [silver, history]}): the state check reads it from the newest row alone.
        ("table_versions", "STRING"),
    ],
    "failures": [
        ("source", "STRING"), ("apply_version", "BIGINT"), ("error", "STRING"), ("failed_at", "TIMESTAMP"),
    ],
}


@dataclass(frozen=True)
class Bookkeeping:
    """The bookkeeping tables of one pipeline."""

    config: Config
    # table -> the newest apply version it holds (read once, then kept up to date by this process)
    _written: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    # source -> the table versions its newest progress row records (load_progress; None: the row has none)
    _table_versions: dict[str, dict | None] = field(default_factory=dict, compare=False, repr=False)

    def ref(self, table: str) -> TableRef:
        return state_ref(self.config, table)

    def create_all(self, tables: SparkTables) -> frozenset[str]:
        """Create the tables that are missing; add the columns a newer cdc_apply writes to older ones.
        Returns the tables this call created (empty: nothing to read from them yet)."""
        # A new pipeline's seven creates are seven Delta commits of driver work each (~0.2 s warm): run
        # side by side they take ~0.9 s instead of ~1.5 s.
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="cdc_apply-books") as pool:
            made = list(pool.map(lambda table: self._create(tables, table), SCHEMAS))
        return frozenset(table for table, created in zip(SCHEMAS, made) if created)

    def _create(self, tables: SparkTables, table: str) -> bool:
        ref, columns = self.ref(table), SCHEMAS[table]
        have = local_columns(ref)   # a local table's, without two Spark snapshot loads (~0.3 s a run)
        if have is None and tables.exists(ref):
            have = frozenset(f.name for f in tables.read(ref).schema.fields)
        if have is not None:
            missing = [(n, t) for n, t in columns if n not in have]
            if missing:
                tables.spark.sql(f"ALTER TABLE {ref.sql} ADD COLUMNS ({column_list(missing)})")
            return False
        return create_table(tables, ref, columns, {"delta.appendOnly": "true"},
                            comment=f"cdc_apply {table} of pipeline {self.config.pipeline}")

    def quarantined_sources(self, tables: SparkTables) -> set[str]:
        """The sources with a row in the quarantine table (read by delta-rs when the table is local)."""
        rows = local_rows(self.ref("quarantine"), ("source",))
        if rows is None:
            rows = tables.read(self.ref("quarantine")).select("source").distinct().collect()
        return {r.source for r in rows}

    def append(self, tables: SparkTables, table: str, rows: list[tuple], version: int) -> None:
        """Append rows (tuples in the table's column order); idempotent per apply version."""
        if rows and self._not_written(tables, table, version):
            self._append_rows(tables, table, rows, version)
            self._written[table] = version

    def append_table(self, tables: SparkTables, table: str, rows, version: int) -> None:
        """Append an Arrow table of rows (the table's columns, in its order); idempotent per apply version."""
        if rows.num_rows and self._not_written(tables, table, version):
            if not tables.append_arrow(self.ref(table), rows):
                self.ref(table).append(tables.spark.createDataFrame(rows), None, version)
            self._written[table] = version

    def _append_rows(self, tables: SparkTables, table: str, rows: list[tuple], version: int) -> None:
        """One commit of ``rows``: a Parquet file pyarrow wrote where the table takes one (no Spark job:
        ``delta.commit.append_arrow``), else Spark's writer."""
        arrow = arrow_rows(tables.spark, SCHEMAS[table], rows)
        if arrow is None or not tables.append_arrow(self.ref(table), arrow):
            self.ref(table).append(local_frame(tables.spark, SCHEMAS[table], rows, arrow), None, version)

    def _not_written(self, tables: SparkTables, table: str, version: int) -> bool:
        if table not in self._written:
            from pyspark.sql import functions as F

            ref = self.ref(table)
            # From the newest append's file statistics when they say it; a query otherwise.
            newest = tables.newest_added_max(ref, "apply_version")
            if newest is None:
                found = tables.read(ref).agg(F.max("apply_version")).collect()[0][0]
                newest = -1 if found is None else int(found)
            self._written[table] = newest
        return version > self._written[table]

    def record_failure(self, tables: SparkTables, sources, version: int, error: str) -> None:
        """A failed batch attempt, for ``cdc-apply status`` (an attempt may fail many times: no txn guard);
        ``sources``: those its error names (``[None]``: none)."""
        from datetime import datetime, timezone

        now = datetime.now(timezone.utc)
        self._append_rows(tables, "failures", [(source, version, error, now) for source in sources], version)

    def append_df(self, tables: SparkTables, df, table: str, version: int) -> None:
        if self._not_written(tables, table, version):
            self.ref(table).append(df.select(*[n for n, _ in SCHEMAS[table]]), None, version)
            self._written[table] = version

    # -- loading ---------------------------------------------------------------
    def load_progress(self, tables: SparkTables) -> tuple[int, dict[str, SourceState]]:
        """The latest apply version and every source's carried state at it (and, kept for
        :meth:`load_written`, the table versions its row records)."""
        from pyspark.sql import functions as F
        from pyspark.sql.window import Window

        latest = newest_rows_per_source(self.ref("progress"), ("source", "apply_version", "state", "table_versions"))
        if latest is None:   # not a local table delta-rs reads: Spark's query
            df = tables.read(self.ref("progress"))
            newest_first = Window.partitionBy("source").orderBy(F.desc("apply_version"))
            latest = (df.withColumn("_r", F.row_number().over(newest_first))
                      .where("_r = 1").select("source", "apply_version", "state", "table_versions").collect())
        version = max((r.apply_version for r in latest), default=0)
        self._table_versions.clear()
        self._table_versions.update({r.source: None if r.table_versions is None else json.loads(r.table_versions)
                                     for r in latest})
        if any(v is None for v in self._table_versions.values()):   # rows from before the column: ask them all
            for (source, rid, kind), found in self._query_written(tables).items():
                pair = (self._table_versions.get(source) or {}).get(str(rid), [None, None])
                pair[0 if kind == "silver table" else 1] = found
                self._table_versions[source] = {**(self._table_versions.get(source) or {}), str(rid): pair}
        return version, {r.source: SourceState.from_json(r.state) for r in latest}

    def table_versions(self, source: str) -> dict[str, list]:
        """``{"<relation id>": [silver version, history version]}`` of every table of the source a batch
        changed, as the newest progress row records them (to carry into the next row)."""
        return dict(self._table_versions.get(source) or {})

    def keep_table_versions(self, source: str, versions: dict) -> None:
        """What the source's progress row just written records (the next batch's row starts from it)."""
        self._table_versions[source] = versions

    def load_written(self) -> dict[tuple[str, int, str], int]:
        """The Delta version the progress rows last recorded for each table a batch changed, by
        ``(source, relation id, "silver table" | "history table")`` (from :meth:`load_progress`'s read)."""
        out = {}
        for source, versions in self._table_versions.items():
            for rid, pair in (versions or {}).items():
                for kind, found in zip(("silver table", "history table"), pair):
                    if found is not None:
                        out[(source, int(rid), kind)] = int(found)
        return out

    def _query_written(self, tables: SparkTables) -> dict[tuple[str, int, str], int]:
        from pyspark.sql import functions as F

        rows = (tables.read(self.ref("progress")).select("source", F.explode("tables").alias("t"))
                .groupBy("source", F.col("t.relation_id").alias("relation_id"))
                .agg(F.max("t.silver_version").alias("silver"), F.max("t.history_version").alias("history"))
                .collect())
        out = {}
        for r in rows:
            for kind, found in (("silver table", r.silver), ("history table", r.history)):
                if found is not None:
                    out[(r.source, int(r.relation_id), kind)] = int(found)
        return out

    def load_history(self, tables: SparkTables, sources: Iterable[str] | None = None,
                     through_version: int | None = None) -> dict[str, SchemaHistory]:
        """Every source's relation versions and types; with ``through_version``, only those recorded by apply
        versions up to it: a batch killed after its schema history append and before its progress left rows
        of a version that is re-run, and its re-run must record them again in seq order, not meet them
        already there (a Relation message that changed no shape is not a version, so it would be out of order)."""
        histories: dict[str, SchemaHistory] = {}
        through = None if through_version is None else f"apply_version <= {int(through_version)}"
        history_columns = ("source", "seq", "lsn", "relation_message", "missing_values")
        type_columns = ("source", "seq", "lsn", "type_oid", "namespace", "name")
        rows = local_rows(self.ref("schema_history"), history_columns, through)
        types = local_rows(self.ref("type_cache"), type_columns, through)
        if rows is None or types is None:   # not local tables delta-rs reads: Spark's reads
            history_rows = tables.read(self.ref("schema_history"))
            type_rows = tables.read(self.ref("type_cache"))
            if through is not None:
                history_rows, type_rows = history_rows.where(through), type_rows.where(through)
            rows = history_rows.select(*history_columns).collect()
            types = type_rows.select(*type_columns).collect()
        per_source: dict[str, list] = {}
        for r in rows:
            missing = json.loads(r.missing_values) if r.missing_values else None
            per_source.setdefault(r.source, []).append((r.seq, r.lsn, decode_message(bytes(r.relation_message)),
                                                        missing))
        for r in types:
            per_source.setdefault(r.source, []).append(
                (r.seq, r.lsn, m.Type(None, r.type_oid, r.namespace, r.name)))
        for source, entries in per_source.items():
            history = SchemaHistory()
            history.load(entries)
            histories[source] = history
        for source in sources or ():
            histories.setdefault(source, SchemaHistory())
        return histories


# An error rebuilt from its text (a Python worker's failure, the decode's error column: errors.error_from_text)
# keeps its context only in that text, rendered last: `` [source=<name>, seq=<n>, lsn=...]``. Names are
# rendered as they are, so the name is everything up to the last ``, seq=<n>``.
_SOURCE_IN_TEXT = re.compile(r" \[source=(.*), seq=-?\d+(?:, .*)?\]\Z", re.DOTALL)


def failed_source(error: BaseException) -> str | None:
    """The source a failed batch's error names, or None when it names none (the batch failed as a whole:
    the driver stopped, another job wrote the same tables): a failure is never put on a source it did
    not name."""
    if not isinstance(error, CdcApplyError):
        return None
    source = error.context.get("source")
    if source is not None:
        return str(source)
    found = _SOURCE_IN_TEXT.search(str(error))
    return found.group(1) if found else None


def relation_row(source: str, version, type_name, apply_version: int, now) -> tuple:
    """A schema_history row for a new relation version; ``type_name(oid, typmod)`` names column types."""
    message = m.Relation(None, version.relation_id, version.namespace, version.name, version.replica_identity,
                         version.columns)
    columns = [(c.name, c.type_oid, type_name(c.type_oid, c.type_modifier), c.type_modifier, c.key)
               for c in version.columns]
    names = dict(zip(version.lineage, version.column_names))
    missing = json.dumps({names[lin]: text for lin, text in version.missing}) if version.missing else None
    return (source, version.relation_id, version.seq, version.lsn, version.namespace, version.name,
            version.replica_identity, columns, encode(message), apply_version, now, missing)


_ARROW_SCHEMAS: dict[str, "pa.Schema"] = {}


def local_frame(spark: SparkSession, columns: list[tuple[str, str]], rows: list[tuple], arrow=False):
    """Rows (tuples in ``columns``' order, ``(name, Spark DDL)``) as a DataFrame, through Arrow: a batch of
    100,000 transactions gives the transactions log as many rows, which Spark's per-row conversion and
    type checks took ~15 s to take in. ``arrow``: the rows' :func:`arrow_rows` when already made."""
    table = arrow_rows(spark, columns, rows) if arrow is False else arrow
    if table is None:   # a value Arrow will not take as it is: Spark's way
        return spark.createDataFrame(rows, column_list(columns))
    return spark.createDataFrame(table)


def arrow_rows(spark: SparkSession, columns: list[tuple[str, str]], rows: list[tuple]):
    """Rows (tuples in ``columns``' order) as an Arrow table of the Spark schema; None when Arrow will not
    take a value as it is (Spark's own conversion may)."""
    import pyarrow as pa

    try:
        return arrow_table(spark, columns, list(zip(*rows)) if rows else [[] for _ in columns])
    except (pa.ArrowException, TypeError, ValueError):
        return None


def arrow_table(spark: SparkSession, columns: list[tuple[str, str]], values: list):
    """Columns (Arrow arrays or sequences of Python values, in ``columns``' order) as an Arrow table of
    the Spark schema ``columns`` describe."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    ddl = column_list(columns)
    schema = _ARROW_SCHEMAS.get(ddl)
    if schema is None:
        schema = _ARROW_SCHEMAS[ddl] = to_arrow_schema(spark.createDataFrame([], ddl).schema)
    arrays = [v.cast(f.type) if isinstance(v, pa.Array) else pa.array(list(v), type=f.type)
              for v, f in zip(values, schema)]
    return pa.Table.from_arrays(arrays, schema=schema)
