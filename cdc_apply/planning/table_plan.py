"""Plan each silver table's part of one batch: which relation versions, which columns, which identity.

Input: the batch plan, each source's schema history, the decode's per-slot counts and the batch's
truncates. Output per touched relation a :class:`TablePlan` — the :class:`TableWork` of each segment
(consecutive relation versions with the same row identity, merged one after the other), the relation
version chain silver follows, and what the batch does to the table (rows, kinds, inserts, truncates).
The lake layer (:mod:`cdc_apply.lake.silver_tables`) carries the plans out; nothing here touches Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from cdc_apply.config import HistorySpec
from cdc_apply.config.choices import DropColumns, Retype
from cdc_apply.config.columns import REDACT, ColumnPolicy, Mask
from cdc_apply.errors import ConfigError, SchemaError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.snapshot import SNAPSHOT_PREFIX, SNAPSHOT_XID, KeyRange, parse_snapshot_directive
from cdc_apply.pgoutput.types import TypeOptions, resolve_relation_column
from cdc_apply.planning.columns import ChangeOp
from cdc_apply.planning.decode_plan import Pool
from cdc_apply.planning.masks import mask_value
from cdc_apply.planning.plan import BatchPlan
from cdc_apply.planning.schema import RelationHistory, RelationVersion, SchemaHistory
from cdc_apply.planning.tables import (
    NO_RULES,
    ColumnRules,
    SilverColumn,
    evolve,
    identity_of,
    resolve_rules,
    slot_mapping,
)

TypeOf = Callable[[int, int, str], str]   # (type OID, type modifier, column name) -> Spark type


@dataclass(frozen=True)
class SlotMap:
    """How one decode slot (a relation version) maps onto the silver table's columns."""

    slot: int
    mapping: tuple[int | None, ...]   # version column j -> silver column index
    ddls: tuple[str, ...]             # Spark type of version column j
    pooled: tuple[int, ...]           # version column j -> decoded column new_<p> / old_<p>
    version_seq: int = -1             # the relation version the slot decodes


@dataclass(frozen=True)
class TableWork:
    """Everything one silver table needs for one batch (one segment of it)."""

    source: str
    relation_id: int
    qualified_name: str
    ref: Any                                 # where the lake keeps the table (cdc_apply.delta.refs.TableRef)
    columns: tuple[SilverColumn, ...]
    key: tuple[str, ...] | None
    slots: tuple[SlotMap, ...]
    truncate_after: tuple[int, int] | None   # (commit_lsn, seq) of the last truncate: earlier changes are gone
    meta: tuple[tuple[str, str], ...]        # (silver column, decoded column): commit LSN, commit ts, xid, origin
    has_toast: bool = True
    # Some update sent an old/key tuple and unchanged TOAST: only such a change can be a key move with
    # gaps to fill (an update without an old tuple kept its key).
    toast_moves: bool = True
    # (silver column index, seq of the version that added it, value): changes of older versions carry
    # the column's missing value (ADD COLUMN ... DEFAULT), as PostgreSQL shows for rows older than it.
    defaults: tuple[tuple[int, int, object], ...] = ()
    # Key-range snapshot chunks after the last truncate, in commit order: silver's rows whose column
    # lies in the range are replaced by the chunk's, and earlier changes of keys in it are gone.
    clears: tuple["Clear", ...] = ()
    # (silver column index, "sha256" | "redact"): the projection masks these columns' values; the salt
    # of "sha256" rides along unprinted (docs/MASKING.md).
    masks: tuple[tuple[int, Mask], ...] = ()
    salt: str = field(default="", repr=False, compare=False)
    # Soft deletes: the silver column marking deleted rows (``<metadata_prefix>deleted``); None: deletes remove rows.
    deleted: str | None = None

    @property
    def key_index(self) -> tuple[int, ...]:
        names = [c.name for c in self.columns]
        return tuple(names.index(k) for k in (self.key or ()))


class SlotCount(NamedTuple):
    """One row of the decode's counts: the batch's changes of one kind in one slot (relation version), per
    source — or, for a snapshot load's rows, of one transaction (``txn``)."""

    source: str
    txn: int | None
    slot: int | None
    op: ChangeOp | None
    n: int
    toasted: int = 0          # ... with unchanged TOAST values
    moved_toasted: int = 0    # ... of them updates with an old/key tuple
    errors: int = 0
    last_commit_lsn: int | None = None
    truncates: Sequence = ()  # the Truncate rows among them


@dataclass(frozen=True, slots=True)
class Clear:
    """A key-range snapshot chunk's effect on its table: from ``(commit_lsn, seq)`` on, the rows whose
    silver column ``column`` lies in ``[low, high)`` are the chunk's (``None``: that end is open)."""

    commit_lsn: int
    seq: int
    column: int
    low: int | None
    high: int | None

    def after(self, other: tuple[int, int] | None) -> bool:
        return other is None or (self.commit_lsn, self.seq) > tuple(other)


@dataclass
class TableTouch:
    """What one batch does to one relation, summed from the decode's counts and the batch's truncates."""

    rows: int = 0              # committed changes (I/U/D)
    toasted: int = 0           # ... with unchanged TOAST values
    moved_toasted: int = 0     # ... of them updates with an old/key tuple (possible key moves)
    inserts: int = 0
    ops: set[ChangeOp] = field(default_factory=set)
    last_commit_lsn: int = 0   # of the last change or truncate
    version_seq: int = -1      # the newest relation version a committed change used
    truncate: tuple[int, int, int] | None = None   # the last truncate: (commit LSN, seq, options)
    truncate_seq: int | None = None
    # every truncate: (commit LSN, seq, commit time, cause "truncate" or "snapshot")
    truncates: list[tuple[int, int, object, str]] = field(default_factory=list)
    # key-range snapshot chunks: (commit LSN, seq of its first block, the range, commit time)
    ranges: list[tuple[int, int, KeyRange, object]] = field(default_factory=list)

    def latest_version(self, history: RelationHistory, next_seq: int) -> RelationVersion:
        """The version silver follows: the newest one a committed change of this batch used (a Relation
        message of a transaction still open, or later aborted, must not reshape silver yet); for a
        truncate alone, the one in force at the truncate."""
        if self.version_seq >= 0:
            return next(v for v in history.versions if v.seq == self.version_seq)
        at = self.truncate_seq if self.truncate_seq is not None else next_seq
        return history.at(at) or history.latest


def touch_relations(plan: BatchPlan, counts: Iterable, truncates: Iterable) -> dict[tuple[str, int], TableTouch]:
    """(source, relation id) -> :class:`TableTouch`. ``counts``: the decode's rows per (slot, op, errors)
    with ``n``, ``toasted``, ``moved_toasted``, ``last_commit_lsn``; ``truncates``: its Truncate rows."""
    touched: dict[tuple[str, int], TableTouch] = {}
    slot_rel = {k: (s.source, s.relation_id) for k, s in enumerate(plan.decode.slots)}
    for r in counts:
        if r.slot is not None and not r.errors and r.op in ("I", "U", "D"):
            touch = touched.setdefault(slot_rel[r.slot], TableTouch())
            touch.rows += r.n
            touch.toasted += r.toasted
            touch.moved_toasted += r.moved_toasted
            touch.ops.add(r.op)
            touch.inserts += r.n if r.op == "I" else 0
            touch.last_commit_lsn = max(touch.last_commit_lsn, r.last_commit_lsn or 0)
            touch.version_seq = max(touch.version_seq, plan.decode.slots[r.slot].version_seq)
    for source, batch in plan.sources.items():
        for txn in batch.committed:
            if txn.xid != SNAPSHOT_XID:
                continue
            for prefix, content in txn.directives:
                snapshot = parse_snapshot_directive(content) if prefix == SNAPSHOT_PREFIX else None
                if snapshot is not None and snapshot.key_range is not None:
                    touch = touched.setdefault((source, snapshot.relation_id), TableTouch())
                    committed_at = m.pg_timestamp_to_datetime(txn.commit_ts) if txn.commit_ts is not None else None
                    touch.ranges.append((txn.committed_lsn, txn.ranges[0][0], snapshot.key_range, committed_at))
                    touch.last_commit_lsn = max(touch.last_commit_lsn, txn.committed_lsn)
    for t in truncates:
        committed = plan.sources[t.source].committed
        ts = committed[t.txn].commit_ts if 0 <= t.txn < len(committed) else None
        snapshot = 0 <= t.txn < len(committed) and committed[t.txn].xid == SNAPSHOT_XID
        for rid in t.trunc_relids:
            touch = touched.setdefault((t.source, rid), TableTouch())
            touch.last_commit_lsn = max(touch.last_commit_lsn, t.commit_lsn)
            touch.truncate_seq = max(touch.truncate_seq if touch.truncate_seq is not None else -1, t.seq)
            if touch.truncate is None or (t.commit_lsn, t.seq) > touch.truncate[:2]:
                touch.truncate = (t.commit_lsn, t.seq, t.trunc_options)
            touch.truncates.append((t.commit_lsn, t.seq, m.pg_timestamp_to_datetime(ts) if ts is not None else None,
                                    "snapshot" if snapshot else "truncate"))
    return touched


@dataclass(frozen=True)
class TableRules:
    """What the configuration says about one table, as its plan needs it."""

    configured_key: tuple[str, ...] | None
    drop_columns: DropColumns
    retype: Retype
    meta: tuple[tuple[str, str], ...]   # (silver column, decoded column) of the metadata columns
    type_options: TypeOptions
    history: HistorySpec | None = None
    columns: ColumnPolicy = ColumnPolicy()   # excluded and masked columns, by name
    salt: str = field(default="", repr=False, compare=False)
    deleted: str | None = None          # soft deletes: the column marking deleted rows


@dataclass(frozen=True)
class TablePlan:
    """One silver table's part of a batch."""

    work: TableWork                   # the table as of the newest version this batch applies
    segments: tuple[TableWork, ...]   # consecutive relation versions with the same row identity
    chain: tuple[RelationVersion, ...]
    type_of: TypeOf
    rows: int    # this batch's committed changes of the table
    last_commit_lsn: int
    ops: frozenset[ChangeOp]  # change kinds of this table in the batch (I, U, D)
    inserts: int
    history: HistorySpec | None = None  # the table keeps a history table
    # every truncate and key-range chunk: (commit LSN, seq, commit ts, cause, range) — range None for a
    # truncate, (silver column index, low, high) for a chunk
    truncates: tuple[tuple[int, int, object, str, tuple | None], ...] = ()
    previous_lsn: int | None = None     # the source's last applied commit LSN before the batch
    rules: ColumnRules = NO_RULES       # excluded and masked columns by lineage: every evolve of the table

    @property
    def has_rows(self) -> bool:
        return self.rows > 0


def type_of_in(schema: SchemaHistory, options: TypeOptions, table: str) -> TypeOf:
    """The Spark type of a column of relation ``table`` (its newest qualified name, as the decode plan's)."""
    return lambda oid, typmod, column: resolve_relation_column(oid, typmod, schema.types, options, table,
                                                               column).spark_ddl


def plan_table(source: str, history: RelationHistory, latest: RelationVersion, schema: SchemaHistory,
               plan: BatchPlan, touch: TableTouch, pool: Pool, ref: Any, rules: TableRules) -> TablePlan:
    """The :class:`TablePlan` of relation ``history`` of ``source`` for ``plan``, following ``latest``."""
    rid = latest.relation_id
    chain = tuple(v for v in history.versions if v.seq <= latest.seq)
    type_of = type_of_in(schema, rules.type_options, history.latest.qualified_name)
    column_rules = resolve_rules(chain, rules.columns)
    columns, _ = evolve(chain, type_of, rules.drop_columns, rules.retype, rules=column_rules)
    # Versions whose row identity differs (ADD PRIMARY KEY, REPLICA IDENTITY FULL) are merged
    # one after the other: an identity applies only to the changes written under it.
    segments: list[tuple[tuple[str, ...] | None, list[SlotMap]]] = []
    for k, slot in enumerate(plan.decode.slots):
        if slot.source != source or slot.relation_id != rid or slot.version_seq > latest.seq:
            continue
        version = next(v for v in history.versions if v.seq == slot.version_seq)
        key = identity_of(version, rules.configured_key)
        check_key_rules(version, key, column_rules)
        slot_map = SlotMap(k, slot_mapping(version, columns), tuple(t.spark_ddl for t in slot.column_types),
                           pool.columns[k], version.seq)
        if segments and segments[-1][0] == key:
            segments[-1][1].append(slot_map)
        else:
            segments.append((key, [slot_map]))
    if not segments:
        segments.append((identity_of(latest, rules.configured_key), []))
    truncate = touch.truncate
    masks = tuple((i, kind) for i, c in enumerate(columns) for lin, kind in column_rules.masked if lin == c.lineage)
    defaults = masked_defaults(column_defaults(chain, columns, schema, rules.type_options,
                                               history.latest.qualified_name), masks, rules.salt)
    every_clear = range_clears(touch.ranges, history, columns)
    if any(c.column == i for c in every_clear for i, _ in masks):
        raise ConfigError(f"{latest.qualified_name} is copied in key ranges of a masked column: set "
                          "source.snapshot_chunk_rows = 0 for its source so that it is copied whole",
                          key=f"tables.{latest.qualified_name}.mask_columns")
    clears = tuple(c for c in every_clear if c.after(truncate[:2] if truncate else None))
    points = [(*t, None) for t in touch.truncates] + [
        (c.commit_lsn, c.seq, ts, "snapshot", (c.column, c.low, c.high))
        for c, (*_, ts) in zip(every_clear, sorted(touch.ranges, key=lambda r: r[:2]))]
    works = tuple(TableWork(
        source=source, relation_id=rid, qualified_name=latest.qualified_name, ref=ref,
        columns=tuple(columns), key=key, slots=tuple(slot_maps), truncate_after=truncate[:2] if truncate else None,
        meta=rules.meta, has_toast=touch.toasted > 0, toast_moves=touch.moved_toasted > 0, defaults=defaults,
        clears=clears, masks=masks, salt=rules.salt, deleted=rules.deleted)
        for key, slot_maps in segments)
    return TablePlan(works[-1], works, chain, type_of, touch.rows, touch.last_commit_lsn, frozenset(touch.ops),
                     touch.inserts, rules.history, tuple(sorted(points, key=lambda t: t[:2])),
                     plan.sources[source].previous.last_commit_lsn, column_rules)


def check_key_rules(version: RelationVersion, key: tuple[str, ...] | None, rules: ColumnRules) -> None:
    """A key column (replica identity or configured) cannot be excluded or redacted: rows could no longer
    be matched. A hashed key still matches: every change's key is hashed the same way."""
    redacted = {lin for lin, kind in rules.masked if kind == REDACT}
    for name in key or ():
        lineage = version.lineage[version.column_names.index(name)]
        if lineage in rules.excluded or lineage in redacted:
            how = "excluded" if lineage in rules.excluded else "redacted"
            raise ConfigError(f"column {name!r} is a key of {version.qualified_name} and cannot be {how}",
                              key=f"tables.{version.qualified_name}."
                                  f"{'exclude' if how == 'excluded' else 'mask'}_columns")


def masked_defaults(defaults, masks, salt: str):
    """``defaults`` with a masked column's missing value masked as the projection masks its values."""
    kinds = dict(masks)
    return tuple((i, seq, mask_value(kinds[i], salt, value) if i in kinds else value) for i, seq, value in defaults)


def column_defaults(chain, columns, schema: SchemaHistory, options: TypeOptions,
                    table: str) -> tuple[tuple[int, int, object], ...]:
    """(silver column index, seq of the version adding it, typed value) for every column of ``chain``
    added with a missing value that silver still has."""
    from cdc_apply.pgoutput.values import convert_text_value

    index = {c.lineage: i for i, c in enumerate(columns) if not c.dropped}
    out = []
    for version in chain:
        for lineage, text in version.missing:
            if lineage in index:
                column = version.columns[version.lineage.index(lineage)]
                column_type = resolve_relation_column(column.type_oid, column.type_modifier, schema.types, options,
                                                      table, column.name)
                out.append((index[lineage], version.seq, convert_text_value(column_type, text)))
    return tuple(out)


def range_clears(ranges, history: RelationHistory, columns) -> list[Clear]:
    """The batch's key-range chunks of one table as :class:`Clear` records, their column named by its
    silver column (found by lineage in the relation version in force at the chunk)."""
    index = {c.lineage: i for i, c in enumerate(columns) if not c.dropped}
    out = []
    for commit_lsn, seq, key_range, _ in sorted(ranges, key=lambda r: r[:2]):
        version = history.at(seq) or history.latest
        if key_range.column not in version.column_names:
            raise SchemaError(f"a snapshot chunk of {version.qualified_name} names column {key_range.column!r}, "
                              "which its Relation does not have", relation_id=version.relation_id)
        lineage = version.lineage[version.column_names.index(key_range.column)]
        out.append(Clear(commit_lsn, seq, index[lineage], key_range.low, key_range.high))
    return out
