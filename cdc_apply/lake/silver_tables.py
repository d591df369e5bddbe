"""Silver tables: where each relation lands, its schema, and one batch's truncate + MERGE.

A silver table belongs to a relation OID of a source and lives where the
relation's *first* name puts it (``<silver root>/<namespace>/<relation>``).
A table renamed in PostgreSQL keeps its silver table (the ``cdc_apply.relation``
property shows its current name); a new relation under a name that already has
a silver table (DROP TABLE + CREATE TABLE) replaces that table, as in
PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from cdc_apply.config import Config
from cdc_apply.config.choices import Retype
from cdc_apply.delta.ddl import (
    USER_METADATA,
    check_plain_names,
    create_table,
    is_mapped,
    set_properties,
    silver_properties,
    table_properties,
    warn_reader_features,
)
from cdc_apply.delta.refs import TableRef, silver_ref_for
from cdc_apply.delta.spark_errors import driver_stopped, driver_stopped_error, error_text, resource_cause
from cdc_apply.errors import ApplyError, CdcApplyError, SchemaError
from cdc_apply.lake.batch_context import BatchContext
from cdc_apply.lake.books.ledger import (
    MAX_SEGMENTS,
    SilverLedger,
    batch_tag,
    merge_step,
    new_keys_step,
    snapshot_step,
    truncate_step,
)
from cdc_apply.lake.books.state_match import check_tables
from cdc_apply.lake.history.tables import HistoryTables, history_app_id
from cdc_apply.lake.silver.appends import append_new_keys, append_rows, split_new_keys
from cdc_apply.lake.silver.collapse import collapse, key_events
from cdc_apply.lake.silver.merge import (
    BATCH_SETTINGS,
    NEW_KEYS_APPEND_MIN,
    PERSISTENT_DVS,
    MergeResult,
    collapse_partitions,
    key_range,
    merge_keyed,
    merge_keyless,
    project,
    writes_deletion_vectors,
)
from cdc_apply.lake.silver.merge_moves import resolve_moves
from cdc_apply.lake.silver.past_rules import apply_to_table, created_properties
from cdc_apply.lake.silver.replace_rows import ALLOW_EXISTS
from cdc_apply.lake.silver.schema_changes import apply_schema_ops
from cdc_apply.lake.silver.snapshot_loads import (
    MIN_SPLITS,
    batch_byte_limit,
    clear_ranges,
    drop_cleared,
    load_row_bytes,
    load_settings,
    load_snapshots,
    load_width,
)
from cdc_apply.lake.silver.soft_deletes import deleted_column, ensure_deleted_column, mark_deleted
from cdc_apply.pgoutput.types import TypeOptions
from cdc_apply.planning import columns as cc
from cdc_apply.planning.decode_plan import pool_columns
from cdc_apply.planning.plan import BatchPlan
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.table_plan import TablePlan, TableRules, TableWork, plan_table, touch_relations
from cdc_apply.planning.tables import SilverColumn, evolve
from cdc_apply.spark.executors import CLUSTER_KEYS
from cdc_apply.spark.session import session_settings

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables

PROP_SOURCE = "cdc_apply.source"
PROP_RELATION = "cdc_apply.relation"
PROP_RELATION_ID = "cdc_apply.relation_id"
PROP_VERSION_SEQ = "cdc_apply.relation_version_seq"
OWN_PROPERTIES = (PROP_SOURCE, PROP_RELATION, PROP_RELATION_ID, PROP_VERSION_SEQ)
# Parquet's writer setting (a Hadoop key; Spark passes a session's settings on): "#<column>" names one column.
DICTIONARY = "parquet.enable.dictionary"


@dataclass
class TableStats:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    truncated: bool = False
    changes: int = 0      # the batch's committed changes (I/U/D) of the table, before the collapse to one per key
    seconds: float = 0.0  # wall time of the table's work (tables run in parallel: they overlap)
    delta_version: int | None = None    # the silver table's Delta version after the batch
    history_version: int | None = None  # the history table's, when it keeps one
    last_commit_lsn: int | None = None  # of the batch's last change (or truncate) of the table
    past_rules: str | None = None       # what rules added since did to the rows already written (printed)
    # Rows the table's snapshot load wrote, by the snapshot's transaction index, when it had one load: the
    # transactions log counts them from here instead of from bronze.
    loaded: dict[int, int] = field(default_factory=dict, repr=False)


@dataclass
class KnownTable:
    """What this process knows of one silver table across batches (each table is written by one thread a
    batch), so that each batch need not read the table's properties and schema again."""

    shape: tuple[str, int, int] | None = None   # (source, relation id, version seq) its schema reflects
    checked: bool = False      # checked against the state (check_tables)
    empty: bool = False        # created or emptied by this process and not written since: a MERGE is an append
    properties: dict[str, str] | None = None    # the own properties it was last seen or set with
    key_file: str | None = None  # its one key column's name in its Parquet files, where known
    rules: object = None         # the column rules (ColumnRules) its rows were last brought under


class SilverTables:
    """The silver tables of one apply job: plans each batch's tables and applies them, one call per table
    (in threads). Keeps only what this process knows of the tables across batches; the batch itself
    comes in a :class:`~cdc_apply.lake.batch_context.BatchContext`."""

    def __init__(self, tables: SparkTables, config: Config, type_options: TypeOptions) -> None:
        self.tables = tables
        self.spark = tables.spark
        self.config = config
        self.type_options = type_options
        self._salt = config.mask_salt()   # "sha256" masks' salt: a missing variable stops the job here
        self._names: dict[tuple[str, int], str] = {}   # (source, relation id) -> its newest qualified name
        self._tables: dict[str, KnownTable] = {}   # table -> what this process knows of it
        self.ledger = SilverLedger()
        self.history = HistoryTables(config, self.metadata(), self.ledger)

    def known(self, ref) -> KnownTable:
        """This process's record of the table at ``ref`` (a fresh one the first time)."""
        return self._tables.setdefault(str(ref), KnownTable())

    def names_of(self, source: str, relation_ids) -> list[str]:
        return [self._names[(source, rid)] for rid in relation_ids if (source, rid) in self._names]

    def metadata(self) -> tuple[tuple[str, str, str], ...]:
        """(silver column, decoded column, Spark type) of the metadata columns."""
        p = self.config.silver.metadata_prefix
        meta = [(p + "commit_lsn", cc.COMMIT_LSN, "BIGINT"), (p + "commit_ts", cc.COMMIT_TS, "TIMESTAMP")]
        if self.config.silver.include_xid:
            meta.append((p + "xid", cc.XID, "BIGINT"))
        if self.config.silver.include_origin:
            meta.append((p + "origin", cc.ORIGIN, "STRING"))
        if self.config.gaussdb.include_user and "gaussdb" in self.config.formats.values():
            meta.append((p + "user", cc.USER, "STRING"))
        return tuple(meta)

    # -- planning (driver) -----------------------------------------------------------
    def plan_tables(self, plan: BatchPlan, histories: dict[str, SchemaHistory], counts, truncates) -> list[TablePlan]:
        """The batch's part of each silver table it touches (``counts``, ``truncates``: the decode's)."""
        tables = []
        pool = pool_columns(plan.decode)
        meta = tuple((c, d) for c, d, _ in self.metadata())
        for (source, rid), touch in sorted(touch_relations(plan, counts, truncates).items()):
            history = histories[source].relations.get(rid)
            if history is None:
                continue  # a truncate of a relation never described: nothing in silver to empty
            latest = touch.latest_version(history, plan.sources[source].last_seq + 1)
            if not self.config.table_selected(latest.qualified_name):
                continue
            self._names[(source, rid)] = latest.qualified_name
            soft = self.config.soft_deletes_for(latest.qualified_name)
            rules = TableRules(self.config.key_for(latest.qualified_name), self.config.silver.drop_columns,
                               self.config.silver.retype, meta, self.type_options,
                               self.config.history_for(latest.qualified_name),
                               self.config.columns_for(latest.qualified_name), self._salt,
                               deleted_column(self.config.silver.metadata_prefix) if soft else None)
            planned = plan_table(source, history, latest, histories[source], plan, touch, pool,
                                 silver_ref_for(self.config, source, history.versions), rules)
            tables.append(planned)
        return tables

    # -- applying (one thread per table) -------------------------------------------------
    def apply_table(self, batch: BatchContext, planned: TablePlan) -> TableStats:
        """The batch's changes to one silver table: schema, truncate, MERGE(s), properties. A Spark
        failure becomes an :class:`ApplyError` naming the table (usually one changed outside cdc_apply)."""
        work = planned.work
        try:
            return self._apply_table(batch, planned)
        except CdcApplyError:
            raise
        except Exception as exc:  # noqa: BLE001 - a JVM error: name the table, keep the cause
            text = error_text(exc)
            if any(marker in text for marker in ("Concurrent", "CONCURRENT")):
                raise  # another writer: the pipeline names it
            if driver_stopped(exc, text):  # out of memory, most often: the JVM printed why
                raise driver_stopped_error(text, table=work.qualified_name, source=work.source) from exc
            cause = resource_cause(text)
            if cause:  # a full disk, an exhausted heap: nothing is wrong with the table
                raise ApplyError(f"silver table {work.ref} could not take the batch: {cause}; free space or give "
                                 "the driver more memory and run the job again: it completes the batch, skipping "
                                 "the writes this run committed", table=work.qualified_name,
                                 source=work.source) from exc
            first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
            raise ApplyError(f"silver table {work.ref} could not take the batch ({first[:400]}); if it was changed "
                             "outside cdc_apply (columns dropped or retyped, properties or protocol changed), "
                             "restore it or remove it and rebuild it from bronze",
                             table=work.qualified_name, source=work.source) from exc

    def _apply_table(self, batch: BatchContext, planned: TablePlan) -> TableStats:
        # newSession, or a cloneSession over Spark Connect (reused: the settings a table's writes set are reset)
        with self.tables.child((PERSISTENT_DVS, USER_METADATA, ALLOW_EXISTS)) as tables:
            return self._apply_table_in(tables, batch, planned)

    def _apply_table_in(self, tables: SparkTables, batch: BatchContext, planned: TablePlan) -> TableStats:
        work, version = planned.work, batch.version
        # MERGE's source is already materialised (localCheckpoint): Delta need not copy it again.
        tables.spark.conf.set("spark.databricks.delta.merge.materializeSource", "none")
        # A child session starts from the static configuration: the job's own session may have been
        # given its cluster's task counts since (cdc_apply.spark.executors.cluster_settings).
        for key in CLUSTER_KEYS:
            value = self.spark.conf.get(key, None)
            if value is not None:
                tables.spark.conf.set(key, value)
        for key, value in BATCH_SETTINGS.items():  # the MERGE itself plans here
            tables.spark.conf.set(key, value)
        app_id = self.app_id(work)
        self._ensure_schema(tables, planned, batch.fault)
        stats = TableStats(truncated=work.truncate_after is not None, changes=planned.rows,
                           last_commit_lsn=planned.last_commit_lsn)
        if self.known(work.ref).rules != planned.rules:   # rules added since its rows were written reach them
            history = None if planned.history is None else lambda: self.history.ready(tables, planned)
            stats.past_rules = apply_to_table(tables, planned, (self.config.silver.drop_columns, Retype.REWRITE),
                                              self._salt, history, batch.fault)
            self.known(work.ref).rules = planned.rules
        if planned.history is not None:  # before silver's writes: see cdc_apply.lake.history.tables
            silver_newest = self.ledger.newest(tables, work.ref, app_id)
            stats.history_version = self.history.apply(tables, batch.decoded, planned, version,
                                                       None if silver_newest < 0 else silver_newest,
                                                       planned.previous_lsn, self._new_keys_are_new(batch, work))
            batch.fault(f"history:{work.qualified_name}")
        tag = batch_tag(work.source, work.qualified_name, planned.last_commit_lsn)
        known = self.known(work.ref)
        key_file = known.key_file
        if key_file is not None:   # silver's writes only: the history table above keeps a key's versions
            # One row per key in silver: Parquet's dictionary of the key column would be built for each
            # file's first page only to be dropped as larger than the plain values (~18 % of an 800k-row
            # append's time); the files come out the same.
            tables.spark.conf.set(f"{DICTIONARY}#{key_file}", "false")

        def write(step: int, action):
            """Run ``action(metadata)`` as the write of ``step`` unless the table has it (a re-run)."""
            return self.ledger.write(tables, work.ref, app_id, step, tag, action)

        if work.truncate_after is not None and work.deleted is not None:   # soft: the rows stay, marked
            lsn, seq = work.truncate_after
            ts = next((t[2] for t in planned.truncates if t[:2] == (lsn, seq)), None)
            write(truncate_step(version), lambda _: mark_deleted(tables, work, lsn, ts))
        elif work.truncate_after is not None:
            if write(truncate_step(version), lambda _: tables.delta_table(work.ref).delete()) is not None:
                known.empty = True
        elif work.clears and not known.empty:   # key-range chunks: only their ranges are emptied
            write(truncate_step(version), lambda _: clear_ranges(tables, work, planned.truncates))
        loads = [load for load in batch.loads_of(work) if load.in_force(work.truncate_after)]
        if loads:
            # The snapshots' rows go in right after their Truncate (or ranges) emptied the table.
            revive = work.deleted is not None and not known.empty   # marked rows stay
            # Read on the table's session, which plans the read's splits and the decode's batches.
            settings = load_settings(load_width(loads), tables.default_parallelism(),
                                     user_splits=tables.spark.conf.get(MIN_SPLITS, None),
                                     row_bytes=load_row_bytes(loads), batch_bytes=batch_byte_limit(tables.spark))

            def load(meta):
                with session_settings(tables.spark, settings):
                    return load_snapshots(tables, batch.messages(tables.spark), loads, work.clears, planned.segments,
                                          meta, revive)
            loaded = write(snapshot_step(version), load)
            if loaded is not None:
                stats.inserted += loaded
                if len(loads) == 1:
                    stats.loaded[loads[0].txn] = loaded
            known.empty = False
        if planned.has_rows:
            for segment_index, segment in enumerate(planned.segments):
                result = self._merge(tables, batch, segment, planned, segment_index, write)
                known.empty = False
                stats.inserted += result.inserted
                stats.updated += result.updated
                stats.deleted += result.deleted
        props = {PROP_SOURCE: work.source, PROP_RELATION: work.qualified_name,
                 PROP_RELATION_ID: str(work.relation_id), PROP_VERSION_SEQ: str(planned.chain[-1].seq)}
        # A property commit only when what it says changes (new table, rename, new relation version), in
        # this process or since the table was last written (_create_or_evolve reads them once a process):
        # the per-batch commit LSN rides on the data commits' userMetadata instead.
        if known.properties != props:
            set_properties(tables.spark, work.ref, props)
            known.properties = props
        stats.delta_version = tables.version(work.ref)
        return stats

    def check_tables(self, batch: BatchContext, planned_tables: list[TablePlan], written) -> None:
        """Before the batch's first write: the state must match every table it writes
        (:mod:`cdc_apply.lake.books.state_match`); checked once per table and process, as this process's own
        writes keep the two matching after."""
        version, bounds = batch.version, batch.bounds
        targets = []
        for planned in planned_tables:
            work = planned.work
            targets.append(("silver table", work.ref, self.app_id(work), work))
            if planned.history is not None:
                self.history.check_spec(planned)   # track_columns naming no column: before any table is made
                targets.append(("history table", self.history.ref(planned),
                                history_app_id(self.config, work.source, work.relation_id), work))
        for _, _, app_id, work in targets:
            self.ledger.expect(app_id, version, bounds[work.source])
        fresh = [t for t in targets if not self.known(t[1]).checked]
        check_tables(self.tables, self.ledger, fresh, version, bounds, written,
                     self.config.state.path or self.config.state.schema, self.config.apply.parallelism)
        for _, ref, _, _ in fresh:
            self.known(ref).checked = True

    def app_id(self, work: TableWork) -> str:
        return f"cdc_apply:{self.config.pipeline}:silver:{work.source}:{work.relation_id}"

    def _new_keys_are_new(self, batch: BatchContext, work: TableWork) -> bool:
        """Whether a key the batch inserts first cannot be in silver: the key is the relation's own
        replica identity (unique in PostgreSQL; a configured key need not be), and no change of the
        source was ever quarantined (silver might then hold a row PostgreSQL deleted). It also takes
        silver to be written by cdc_apply alone."""
        return (not self.config.key_for(work.qualified_name) and work.source not in batch.quarantined_sources
                and work.deleted is None)   # a soft table keeps deleted keys: an insert may revive one

    def _merge(self, tables: SparkTables, batch: BatchContext, work: TableWork, planned: TablePlan, segment: int,
               write) -> MergeResult:
        """One identity segment's writes, each through ``write(step, action)`` (skipped when done)."""
        spark = tables.spark
        projected = project(batch.decoded, work)
        empty = self.known(work.ref).empty
        insert_only = planned.ops <= {"I"}
        version = batch.version
        step = merge_step(version, segment)
        done = MergeResult(0)
        if work.key is None:
            if work.clears:
                raise ApplyError(f"a key-range snapshot chunk of {work.qualified_name}, which is applied without a "
                                 "key: set source.snapshot_chunk_rows = 0 for this source so that tables are copied "
                                 "whole", table=work.qualified_name, source=work.source)
            if insert_only:  # each Insert adds one copy: exactly an append
                return write(step, lambda meta: append_rows(spark, projected, work, meta, planned.inserts)) or done
            self._choose_deletion_vectors(tables, work, planned)
            return write(step, lambda _: merge_keyless(tables, projected, work, target_empty=empty)) or done
        new_keys = segment < MAX_SEGMENTS and self._new_keys_are_new(batch, work)
        if insert_only and (empty or new_keys) and not work.clears:  # every key is new: one append, no join
            return write(step, lambda meta: append_rows(spark, projected, work, meta, planned.inserts)) or done
        events = drop_cleared(key_events(projected, work), work)
        if work.toast_moves:
            # Over Spark Connect two sessions' DataFrames cannot be joined: read in the decoded rows' session.
            own = tables.on(tables.session_of(projected))
            target = None if work.truncate_after is not None else own.read(work.ref)
            events = resolve_moves(events, work, target)
        # Materialised once: MERGE reads its source more than once, and a plain scan plans fast.
        partitions = collapse_partitions(planned.rows, len(work.columns),
                                         int(tables.spark.conf.get("spark.sql.shuffle.partitions", "200") or 200))
        collapsed = collapse(events, work, work.has_toast, partitions).localCheckpoint()
        size = self._choose_deletion_vectors(tables, work, planned)  # only a MERGE writes deletion vectors
        if not (new_keys and planned.inserts >= NEW_KEYS_APPEND_MIN):
            # A table rewritten whole has a file or two: a key range skips none of them, and its job and the
            # MERGE's range condition cost a small batch's table ~0.6 s here.
            small = size is not None and size < self.config.silver.rewrite_table_bytes
            bounds = None if small or len(work.key_index) != 1 else key_range(collapsed, work)[1:]
            return write(step, lambda _: merge_keyed(tables, collapsed, work, bounds)) or done
        # Keys the batch inserted first are appended; only the others are joined with silver.
        rest = collapsed.where("NOT _new")
        rows, low, high, new_rows = split_new_keys(collapsed, work)
        merged = (write(step, lambda _: merge_keyed(tables, rest, work, (low, high))) if rows else None) or done
        appended = write(new_keys_step(version, segment),
                         lambda meta: append_new_keys(spark, collapsed, work, meta, new_rows))
        return MergeResult(merged.inserted + (appended or 0), merged.updated, merged.deleted)

    def _choose_deletion_vectors(self, tables: SparkTables, work: TableWork, planned: TablePlan) -> int | None:
        """Once per table and batch, before its MERGEs: mark rows, or rewrite the files they touch. Returns
        the bytes of the table's files when they were asked (None: not asked, or not known)."""
        def table_rows() -> int:
            if self.known(work.ref).empty:  # created, or truncated by this batch, and not written since
                return 0
            # Answered from the file statistics of the snapshot the MERGE is about to read.
            return tables.read(work.ref).count()

        silver = self.config.silver
        size = None   # asked only where a size decides (writes_deletion_vectors asks it first)
        if silver.rewrite_table_bytes:
            size = 0 if self.known(work.ref).empty else tables.files_bytes(work.ref)
        marks = writes_deletion_vectors(planned.rows, table_rows, silver.rewrite_share, lambda: size,
                                        silver.rewrite_table_bytes)
        tables.spark.conf.set(PERSISTENT_DVS, str(marks).lower())
        return size

    def _ensure_schema(self, tables: SparkTables, planned: TablePlan, fault: Callable[[str], None]) -> None:
        work = planned.work
        ref = work.ref
        shape = (work.source, work.relation_id, planned.chain[-1].seq)
        known = self.known(ref)
        if known.shape == shape:
            return
        self._create_or_evolve(tables, planned, known, fault)
        names = tables.file_column_names(ref) if work.key is not None and len(work.key_index) == 1 else None
        known.key_file = names.get(work.key[0]) if names and work.key is not None else None
        known.shape = shape

    def _create_or_evolve(self, tables: SparkTables, planned: TablePlan, known: KnownTable,
                          fault: Callable[[str], None]) -> None:
        work = planned.work
        ref = work.ref
        meta = [(c, t) for c, _, t in self.metadata()]
        names = {c.name for c in work.columns}
        for col in [c for c, _, _ in self.metadata()] + ([work.deleted] if work.deleted is not None else []):
            if col in names:
                raise SchemaError(f"column {col!r} of {work.qualified_name} collides with a metadata column; "
                                  f"set silver.metadata_prefix", table=work.qualified_name)
        columns = [(c.name, c.spark_ddl) for c in work.columns] + meta
        if work.deleted is not None:
            columns.append((work.deleted, "BOOLEAN"))
        comment = f"cdc_apply silver table of {work.source}:{work.qualified_name}"
        created = {**silver_properties(self.config), **created_properties(planned.rules)}
        if not tables.exists(ref):
            check_plain_names([c for c, _ in columns], work.qualified_name, is_mapped(created), work.source)
            create_table(tables, ref, columns, created, comment=comment)
            known.empty = True
            return
        props = table_properties(tables.spark, ref)
        if props.get(PROP_RELATION_ID) not in (None, str(work.relation_id)) or props.get(PROP_SOURCE) not in (
                None, work.source):
            # A new relation under a name that had a silver table: it replaces it, as in PostgreSQL.
            check_plain_names([c for c, _ in columns], work.qualified_name, is_mapped(created), work.source)
            create_table(tables, ref, columns, created, comment=comment, replace=True)
            known.empty = True
            return
        # What the table says now: the batch's property commit is skipped where it would say the same.
        known.properties = {k: props[k] for k in OWN_PROPERTIES if k in props}
        warn_reader_features(self.config, ref, props, work.qualified_name)
        check_plain_names([c for c, _ in columns], work.qualified_name, is_mapped(props), work.source)
        ensure_deleted_column(tables.spark, ref, work, tables.read(ref).columns,
                              f"tables.{work.qualified_name}.deletes")
        reflected = props.get(PROP_VERSION_SEQ)
        chain = planned.chain
        start = 0
        if reflected is not None:
            start = next((i for i, v in enumerate(chain) if v.seq == int(reflected)), 0)
        evolved, ops = evolve(chain, planned.type_of, self.config.silver.drop_columns, self.config.silver.retype,
                              start=start, rules=planned.rules)
        # Rows silver holds existed before a column added since: they read its missing value.
        fills = [(evolved[c], value) for c, added, value in work.defaults if added > chain[start].seq]
        if ops or fills:
            # Named by where the chain starts and ends: the table's commits say which steps are done.
            apply_schema_ops(tables, ref, ops, chain=f"{chain[start].seq}->{chain[-1].seq}", fills=fills,
                             mapped=is_mapped(props), after_step=lambda step: fault(f"schema:{work.qualified_name}"
                                                                                     f":{step}"))


__all__ = ["SilverTables", "TableStats", "SilverColumn", "TableRef"]
