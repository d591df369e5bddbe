"""History tables: every version of every row of a silver table (SCD type 2), one MERGE per batch.

A table whose configuration asks for it (``[tables."ns.t"] history = true`` or ``[silver] history =
["ns.*"]``) gets a history table beside its silver table (:func:`cdc_apply.delta.refs.history_ref`):
silver's columns, then ``valid_from_lsn`` / ``valid_to_lsn`` (NULL while current), their commit
timestamps, the ``operation`` that opened the version, what ``closed_by`` it, ``copies`` (tables
without a key: identical rows), and ``is_current``, the table's partition column (a batch's MERGE
reads only the open versions). docs/HISTORY.md is the reference.

Each batch writes the history table before the silver table, in the table's own thread, exactly
once through the same ledger as silver's writes (:mod:`cdc_apply.lake.books.ledger`): every history
commit's ``userMetadata`` carries the history's own app id (``cdc_apply:<pipeline>:history:<source>:
<relation id>``) and its step (apply version * 64 + 1 for the seed below, + 2 + identity segment for
the batch's versions). The versions are computed from the history table's own open versions, never
from silver: a batch re-run after its history write finds the step recorded and skips it, whatever
silver holds by then.

A history table enabled for a silver table that already has rows starts from silver's rows (one
append, ``operation = 'seed'``, valid from each row's last commit LSN); it is complete for
states from the previous batch's end on, which its property ``cdc_apply.history_complete_from_lsn``
records (0: complete from the table's first change).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from cdc_apply.config import Config, HistorySpec
from cdc_apply.delta.ddl import (
    check_plain_names,
    column_list,
    is_mapped,
    property_list,
    reader_properties,
    set_properties,
    table_properties,
    warn_reader_features,
)
from cdc_apply.delta.names import quote_ident, quote_literal
from cdc_apply.delta.refs import TableRef, history_ref_for
from cdc_apply.errors import ApplyError, ConfigError, SchemaError, StateError
from cdc_apply.lake.books.ledger import STEPS_PER_VERSION, SilverLedger, batch_tag
from cdc_apply.lake.history.versions import (
    HistoryColumns,
    Truncates,
    keyed_versions,
    keyless_versions,
    merge_versions,
    open_versions_of,
)
from cdc_apply.lake.silver.appends import append_files
from cdc_apply.lake.silver.collapse import key_events
from cdc_apply.lake.silver.merge import project
from cdc_apply.lake.silver.merge_moves import resolve_moves
from cdc_apply.lake.silver.past_rules import created_properties
from cdc_apply.lake.silver.schema_changes import apply_schema_ops
from cdc_apply.lake.silver.soft_deletes import live_rows
from cdc_apply.planning import columns as cc
from cdc_apply.planning.table_plan import TableWork
from cdc_apply.planning.tables import evolve

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables

PROP_HISTORY_OF = "cdc_apply.history_of"
PROP_COMPLETE_FROM = "cdc_apply.history_complete_from_lsn"
PROP_RELATION = "cdc_apply.relation"
PROP_VERSION_SEQ = "cdc_apply.relation_version_seq"
SEED_STEP, FIRST_STEP = 1, 2
BROADCAST_KEYS = 200_000  # up to this many changes, the batch's keys are broadcast to find their open versions


def history_app_id(config: Config, source: str, relation_id: int) -> str:
    return f"cdc_apply:{config.pipeline}:history:{source}:{relation_id}"


class HistoryTables:
    """Writes the history tables of one apply job (one instance per :class:`SilverTables`)."""

    def __init__(self, config: Config, metadata, ledger: SilverLedger | None = None) -> None:
        self.config = config
        self.ledger = ledger if ledger is not None else SilverLedger()  # silver's: one read per table and process
        self.metadata = tuple(metadata)   # (silver column, decoded column, Spark type) of silver's metadata
        self.columns = HistoryColumns(config.silver.metadata_prefix)
        self._known: dict[str, tuple] = {}        # history table -> (source, relation id, version seq) it has

    def ref(self, planned) -> TableRef:
        return history_ref_for(self.config, planned.work.source, planned.chain)

    # -- one table, one batch -------------------------------------------------------------
    def apply(self, tables: SparkTables, decoded, planned, version: int, silver_recorded: int | None,
              previous_lsn: int | None, new_keys_are_new: bool = False) -> int | None:
        """Write the batch's versions of ``planned``'s table; returns the history table's Delta version
        after it (None when the history starts with the next batch).

        ``silver_recorded``: the silver table's newest ledger step (None: no write recorded; its writes
        before this batch say whether silver holds rows history must start from);
        ``previous_lsn``: the source's last applied commit LSN before this batch; ``new_keys_are_new``: a
        key a batch inserts cannot have an open version (the key is the relation's own identity).
        """
        work = planned.work
        spec: HistorySpec = planned.history
        self.check_spec(planned)
        ref = self.ref(planned)
        app_id = history_app_id(self.config, work.source, work.relation_id)
        self._ensure_table(tables, planned, ref)
        recorded = self._recorded_version(tables, ref, app_id, work, version)
        steps = len(planned.segments)
        if recorded is not None and recorded >= version * STEPS_PER_VERSION + FIRST_STEP + steps - 1:
            return tables.version(ref)  # this batch's history is written already
        if recorded is None:
            if silver_recorded is not None and silver_recorded // STEPS_PER_VERSION >= version:
                return None  # silver holds part of this batch already: history starts with the next one
            # Silver holding rows of earlier batches: history starts from them, complete from their end.
            complete_from = str(previous_lsn or 0) if silver_recorded is not None else "0"
            if table_properties(tables.spark, ref).get(PROP_COMPLETE_FROM) != complete_from:
                set_properties(tables.spark, ref, {PROP_COMPLETE_FROM: complete_from})  # first: a re-run seeds again
            if silver_recorded is not None:
                self._seed(tables, planned, ref, app_id, version)
        truncates = Truncates(tuple(planned.truncates), tuple(c.spark_ddl for c in work.columns))
        if work.key is None and any(p[4] is not None for p in planned.truncates):
            raise ApplyError(f"a key-range snapshot chunk of {work.qualified_name}, whose history is kept without "
                             "a key: set source.snapshot_chunk_rows = 0 for this source so that tables are copied "
                             "whole", table=work.qualified_name, source=work.source)
        tag = batch_tag(work.source, work.qualified_name, planned.last_commit_lsn, history=True)
        inserts_only = new_keys_are_new and planned.ops <= {"I"} and not truncates.points
        for index, segment in enumerate(planned.segments):
            def write(metadata: str, segment: TableWork = segment) -> None:
                if inserts_only and segment.key is not None:
                    self._append_inserts(tables, decoded, segment, planned.inserts, ref, metadata)
                else:   # one MERGE: its userMetadata is the session's
                    self._write_segment(tables, decoded, planned, segment, ref, truncates, spec)

            # Skipped when written by a run that crashed before silver's writes or progress.
            self.ledger.write(tables, ref, app_id, version * STEPS_PER_VERSION + FIRST_STEP + index, tag, write)
        self._set_shape(tables, planned, ref)
        return tables.version(ref)

    def _write_segment(self, tables: SparkTables, decoded, planned, work: TableWork, ref: TableRef,
                       truncates: Truncates, spec: HistorySpec) -> None:
        """The segment's versions in one MERGE (its ``userMetadata``, with the step, is set on ``session``)."""
        from pyspark.sql import functions as F

        h = self.columns
        # Every change of the batch counts, those before a truncate too: each transaction is a version.
        projected = project(decoded, replace(work, truncate_after=None))
        # Over Spark Connect two sessions' DataFrames cannot be joined: read in the decoded rows' session.
        history = tables.on(tables.session_of(decoded)).read(ref)
        small = planned.rows <= BROADCAST_KEYS
        if work.key is None:
            versions = keyless_versions(projected, history, work, h, truncates, small)
        else:
            events = key_events(projected, work)
            if work.toast_moves:
                current = history.where(F.col(quote_ident(h.is_current)))
                events = resolve_moves(events, work, current)
            open_rows = open_versions_of(history, events, work, h, keyed=True, small=small)
            names = [c.name for c in work.columns]
            tracked = [names.index(c) for c in spec.track_columns] if spec.track_columns else None
            versions = keyed_versions(events, open_rows, work, h, truncates, tracked)
        # Materialised: the MERGE reads its source twice, and the source reads the table it changes.
        versions = versions.localCheckpoint()
        merge_versions(tables, ref, versions, work, h, truncates, keyed=work.key is not None)

    def _append_inserts(self, tables: SparkTables, decoded, work: TableWork, inserts: int, ref: TableRef,
                        metadata: str) -> None:
        """A batch that only inserts keys of the relation's own identity: each insert is a new key's first
        version, still open. One append, no read of the history table."""
        from pyspark.sql import functions as F

        h = self.columns
        rows = project(decoded, work).where(F.col(cc.OP) == "I").select(
            *[F.col(cc.value(i)).alias(c.name) for i, c in enumerate(work.columns)],
            *[F.col(src).alias(col) for col, src in work.meta],
            F.col(cc.COMMIT_LSN).alias(h.valid_from_lsn), F.lit(None).cast("bigint").alias(h.valid_to_lsn),
            F.col(cc.COMMIT_TS).alias(h.valid_from_ts), F.lit(None).cast("timestamp").alias(h.valid_to_ts),
            F.lit("insert").alias(h.operation), F.lit(None).cast("string").alias(h.closed_by),
            F.lit(1).cast("bigint").alias(h.copies), F.lit(True).alias(h.is_current))
        rows = rows.coalesce(append_files(inserts, len(work.columns)))
        ref.append(rows, None, 0, metadata)

    def _seed(self, tables: SparkTables, planned, ref: TableRef, app_id: str, version: int) -> None:
        """Silver's rows as the history's first open versions (one append, guarded like every write)."""
        from pyspark.sql import functions as F

        h = self.columns
        work = planned.segments[0]  # the identity silver's rows were written under
        p = self.config.silver.metadata_prefix
        silver = live_rows(tables.read(work.ref), p)   # a soft table's marked rows are no versions
        names = [c.name for c in work.columns if c.name in silver.columns]
        meta = [col for col, _ in work.meta if col in silver.columns]
        if work.key is None:
            latest = F.max_by(F.struct(*[F.col(quote_ident(c)) for c in meta]),
                              F.col(quote_ident(p + "commit_lsn"))).alias("_m")
            rows = (silver.groupBy(*[F.col(quote_ident(c)) for c in names])
                    .agg(latest, F.count(F.lit(1)).alias(h.copies))
                    .select(*[quote_ident(c) for c in names], *[F.col(f"_m.{quote_ident(c)}").alias(c) for c in meta],
                            h.copies))
        else:
            rows = silver.select(*[quote_ident(c) for c in names + meta], F.lit(1).cast("bigint").alias(h.copies))
        rows = rows.select("*", F.col(quote_ident(p + "commit_lsn")).alias(h.valid_from_lsn),
                           F.lit(None).cast("bigint").alias(h.valid_to_lsn),
                           F.col(quote_ident(p + "commit_ts")).alias(h.valid_from_ts),
                           F.lit(None).cast("timestamp").alias(h.valid_to_ts), F.lit("seed").alias(h.operation),
                           F.lit(None).cast("string").alias(h.closed_by), F.lit(True).alias(h.is_current))
        # Skipped when seeded by a run that crashed before the batch's versions.
        tag = {"source": work.source, "relation": work.qualified_name, "history": True, "part": "seed from silver"}
        self.ledger.write(tables, ref, app_id, version * STEPS_PER_VERSION + SEED_STEP, tag,
                          lambda metadata: ref.append(rows, None, 0, metadata))

    # -- the table itself -------------------------------------------------------------------
    def ready(self, tables: SparkTables, planned) -> TableRef:
        """The history table of ``planned``, created or evolved to the batch's columns (before its writes)."""
        ref = self.ref(planned)
        self._ensure_table(tables, planned, ref)
        return ref

    def check_spec(self, planned) -> None:
        """Raise :class:`ConfigError` when the table's history settings cannot apply to it."""
        work, spec = planned.work, planned.history
        key = f"tables.{work.qualified_name}.track_columns"
        if not spec.track_columns:
            return
        if any(segment.key is None for segment in planned.segments):
            raise ConfigError(f"{work.qualified_name} has no key (its rows are matched on every value, so every "
                              "change is a new version): track_columns cannot apply", key=key)
        names = {c.name for c in work.columns}
        missing = [c for c in spec.track_columns if c not in names]
        if missing:
            raise ConfigError(f"track_columns {missing} are not columns of {work.qualified_name}", key=key)

    def _recorded_version(self, tables: SparkTables, ref: TableRef, app_id: str, work: TableWork,
                          version: int) -> int | None:
        """The history table's newest ledger step (None: none; read once per process, kept by the ledger)."""
        newest = self.ledger.newest(tables, ref, app_id)
        recorded = None if newest < 0 else newest
        if recorded is not None and recorded // STEPS_PER_VERSION > version:
            raise StateError(
                f"history table {ref} holds writes of apply version {recorded // STEPS_PER_VERSION} of pipeline "
                f"{self.config.pipeline!r}, but the state is about to apply version {version}: the state was lost "
                "or restored from an older copy. Restore the state folder, or remove the silver and history tables "
                "together with the state to rebuild them from bronze", table=work.qualified_name, source=work.source)
        return recorded

    def _ensure_table(self, tables: SparkTables, planned, ref: TableRef) -> None:
        """Create, replace or evolve the history table to the batch's silver columns."""
        work = planned.work
        if self._known.get(str(ref), (None,))[:2] == (work.source, work.relation_id) and \
                self._known[str(ref)][2] == planned.chain[-1].seq:
            return
        owner = f"{work.source}:{work.relation_id}"
        if not tables.exists(ref):
            self._create(tables, planned, ref, replace_table=False)
            return
        props = table_properties(tables.spark, ref)
        if PROP_HISTORY_OF not in props:
            raise ApplyError(f"{ref} exists and is not a cdc_apply history table; rename it or change "
                             "silver.history_suffix", table=work.qualified_name, source=work.source)
        if props[PROP_HISTORY_OF] != owner:  # a new relation under the name: its history starts anew
            self._create(tables, planned, ref, replace_table=True)
            return
        reflected = props.get(PROP_VERSION_SEQ)
        chain = planned.chain
        start = next((i for i, v in enumerate(chain) if reflected is not None and v.seq == int(reflected)), 0)
        columns, ops = evolve(chain, planned.type_of, self.config.silver.drop_columns, self.config.silver.retype,
                              start=start, rules=planned.rules)
        fills = [(columns[c], value) for c, added, value in work.defaults if added > chain[start].seq]
        warn_reader_features(self.config, ref, props, work.qualified_name)
        check_plain_names([c.name for c in work.columns], work.qualified_name, is_mapped(props), work.source)
        if ops or fills:
            apply_schema_ops(tables, ref, ops, chain=f"{chain[start].seq}->{chain[-1].seq}", fills=fills,
                             fill_where=f"{quote_ident(self.columns.is_current)}", mapped=is_mapped(props))

    def _create(self, tables: SparkTables, planned, ref: TableRef, replace_table: bool) -> None:
        work = planned.work
        meta = [(c, t) for c, _, t in self.metadata]
        own = self.columns.ddl()
        taken = {c.name for c in work.columns}
        clash = [c for c, _ in own if c in taken]
        if clash:
            raise SchemaError(f"column {clash[0]!r} of {work.qualified_name} collides with a history column; set "
                              "silver.metadata_prefix", table=work.qualified_name)
        columns = [(c.name, c.spark_ddl) for c in work.columns] + meta + own
        readers = reader_properties(self.config)   # as silver's: silver.readers
        check_plain_names([c for c, _ in columns], work.qualified_name, is_mapped(readers), work.source)
        props = {**readers, PROP_HISTORY_OF: f"{work.source}:{work.relation_id}", PROP_RELATION: work.qualified_name,
                 PROP_VERSION_SEQ: str(planned.chain[-1].seq), **created_properties(planned.rules)}
        verb = "CREATE OR REPLACE TABLE" if replace_table else "CREATE TABLE IF NOT EXISTS"
        comment = f"cdc_apply history table of {work.source}:{work.qualified_name}"
        text = (f"{verb} {ref.sql} ({column_list(columns)}) USING delta "
                f"PARTITIONED BY ({quote_ident(self.columns.is_current)}) COMMENT {quote_literal(comment)} "
                f"TBLPROPERTIES ({property_list(props)})")
        if replace_table:
            tables.spark.sql(text)
        else:
            tables.ensure_table(ref, lambda: tables.spark.sql(text))

    def _set_shape(self, tables: SparkTables, planned, ref: TableRef) -> None:
        work = planned.work
        shape = (work.source, work.relation_id, planned.chain[-1].seq)
        if self._known.get(str(ref)) == shape:
            return
        props = {PROP_RELATION: work.qualified_name, PROP_VERSION_SEQ: str(planned.chain[-1].seq)}
        current = table_properties(tables.spark, ref)
        if any(current.get(k) != v for k, v in props.items()):
            set_properties(tables.spark, ref, props)
        self._known[str(ref)] = shape


__all__ = ["HistoryTables", "HistoryColumns", "history_app_id", "PROP_COMPLETE_FROM", "PROP_HISTORY_OF"]
