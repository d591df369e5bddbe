"""Plan one micro-batch: which rows to decode, with which relation versions, for which transaction.

Input per source: the carried :class:`SourceState`, the batch's control
messages and its largest seq. Output: a :class:`BatchPlan` the Spark layer
follows — the seq ranges to re-read from bronze (transactions begun in
earlier batches and decided now), the :class:`DecodePlan` for the parallel
decode, the committed transactions in commit order, and the next state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Sequence

from cdc_apply.config.choices import Origin
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.snapshot import SNAPSHOT_PREFIX, parse_snapshot_directive
from cdc_apply.pgoutput.types import TypeOptions, resolve_relation_column
from cdc_apply.planning.assemble import Assembly, DecidedTxn, assemble_transactions, excluded_ranges, merge_ranges
from cdc_apply.planning.decode_plan import QUARANTINE, SKIP, DecodePlan, Slot, SourcePlan
from cdc_apply.planning.schema import RelationVersion, SchemaHistory
from cdc_apply.planning.state import SeqRange, SourceState

# (source, ranges, subxids) -> {subxid: seq of its first change within the ranges}
FirstChangeLookup = Callable[[str, Sequence[SeqRange], Sequence[int]], Mapping[int, int]]


@dataclass(frozen=True, slots=True)
class SourceBatch:
    """What one source contributes to a batch."""

    source: str
    previous: SourceState
    assembly: Assembly
    committed: tuple[DecidedTxn, ...]   # after the origin filter, in commit order
    filtered: tuple[DecidedTxn, ...]    # committed at the source but filtered out (origin)
    new_versions: tuple[RelationVersion, ...]
    new_types: tuple[tuple[int, int, m.Type], ...]
    reread: tuple[SeqRange, ...]        # ranges with seq <= previous.applied_seq to read from bronze
    first_seq: int                      # smallest seq this batch decodes
    last_seq: int

    @property
    def state(self) -> SourceState:
        return self.assembly.state


@dataclass(frozen=True, slots=True)
class BatchPlan:
    sources: dict[str, SourceBatch]
    decode: DecodePlan
    slot_versions: tuple[RelationVersion, ...] = field(default=())

    @property
    def has_changes(self) -> bool:
        return any(b.committed or b.assembly.quarantined for b in self.sources.values())


def _subtract(ranges: Iterable[SeqRange], holes: Sequence[SeqRange]) -> list[SeqRange]:
    out = []
    for start, end in ranges:
        cursor = start
        for h0, h1 in holes:
            if h1 < cursor or h0 > end:
                continue
            if h0 > cursor:
                out.append((cursor, h0 - 1))
            cursor = max(cursor, h1 + 1)
        if cursor <= end:
            out.append((cursor, end))
    return out


DEFAULTS_PREFIX = "cdc_apply.column_defaults"


class _Defaults:
    """Column missing values from the source's event trigger (docs/SNAPSHOTS.md), in commit order:
    a Relation version that adds a column takes the value announced before it for that column — by a
    transaction committed before it, or by the transaction it is in (ALTER TABLE and the first change
    under the new definition in one transaction: the trigger's message precedes that Relation)."""

    def __init__(self, carried: Sequence[tuple[int, str, str]], committed: Sequence[DecidedTxn]) -> None:
        self.pending: dict[int, dict[str, str]] = {}
        for relation_id, column, value in carried:
            self.pending.setdefault(relation_id, {})[column] = value
        self.announced = sorted((t.decide_seq, t.ranges, content) for t in committed
                                for prefix, content in t.directives if prefix == DEFAULTS_PREFIX)
        self.taken = [False] * len(self.announced)

    def _take(self, upto: int) -> None:
        for index, (decided, ranges, content) in enumerate(self.announced):
            if self.taken[index] or not (decided < upto or any(a <= upto <= b for a, b in ranges)):
                continue
            body = json.loads(content)
            self.pending.setdefault(int(body["relation_id"]), {}).update(
                {str(k): str(v) for k, v in body["columns"].items()})
            self.taken[index] = True

    def before(self, seq: int, message) -> dict[str, str] | None:
        self._take(seq)
        return self.pending.get(message.relation_id) if isinstance(message, m.Relation) else None

    def used(self, relation_id: int) -> None:
        self.pending.pop(relation_id, None)

    def remaining(self) -> tuple[tuple[int, str, str], ...]:
        self._take(float("inf"))  # type: ignore[arg-type]
        return tuple((r, c, v) for r, cols in sorted(self.pending.items()) for c, v in sorted(cols.items()))


def snapshot_skips(committed: Sequence[DecidedTxn], resets: tuple[tuple[int, int], ...]
                   ) -> tuple[dict[int, frozenset[int]], tuple[tuple[int, int], ...]]:
    """Which committed transactions skip which relations, and the snapshot resets still in force.

    A snapshot of relation R consistent with LSN C (docs/SNAPSHOTS.md) holds every change committed
    before C, so a transaction committed below C that lands after it skips R; the first transaction
    at or past C ends the rule (commit order follows LSN order from there on)."""
    active = dict(resets)
    skips: dict[int, set[int]] = {}
    for index, txn in enumerate(committed):
        for relation_id, lsn in list(active.items()):
            if txn.committed_lsn < lsn:
                skips.setdefault(relation_id, set()).add(index)
            else:
                del active[relation_id]
        for prefix, content in txn.directives:
            if prefix == SNAPSHOT_PREFIX:
                snapshot = parse_snapshot_directive(content)
                # A key-range chunk lands before every transaction committed at or past its LSN and
                # after every one below it (the lander holds the stream for it): nothing to skip.
                if snapshot.key_range is None:
                    active[snapshot.relation_id] = snapshot.lsn
    return {r: frozenset(t) for r, t in skips.items()}, tuple(sorted(active.items()))


def plan_source(source: str, state: SourceState, history: SchemaHistory,
                controls: Iterable[tuple[int, int, bytes]], last_seq: int,
                first_change_seq: FirstChangeLookup, origin_filter: Origin = "any",
                quarantine_controls: bool = False) -> tuple[SourceBatch, SourcePlan]:
    """Assemble one source's transactions and lay out its seq ranges for the decode."""
    assembly = assemble_transactions(state, controls, last_seq, source, quarantine_controls)
    new_versions, new_types = [], []
    defaults = _Defaults(state.column_defaults, assembly.committed)
    for event in assembly.schema_events:
        missing = defaults.before(event.seq, event.message)
        recorded = history.record(event.seq, event.lsn, event.message, missing)
        if isinstance(recorded, RelationVersion):
            new_versions.append(recorded)
            defaults.used(recorded.relation_id)
        elif isinstance(recorded, m.Type):
            new_types.append((event.seq, event.lsn, recorded))
    assembly = replace(assembly, state=replace(assembly.state, column_defaults=defaults.remaining()))

    committed: list[DecidedTxn] = []
    filtered: list[DecidedTxn] = []
    for txn in assembly.committed:
        (filtered if origin_filter == "none" and txn.origin is not None else committed).append(txn)
    skips, resets = snapshot_skips(committed, state.snapshot_resets)
    assembly = replace(assembly, state=replace(assembly.state, snapshot_resets=resets))

    # One bronze lookup for every transaction with subtransaction aborts, not one each (a batch can hold
    # dozens; docs/ARCHITECTURE.md, step 3): a subxid's changes lie only in its own transaction's stream
    # blocks, so the union of ranges answers each.
    aborting = [txn for txn in committed if txn.sub_aborts]
    first_changes = first_change_seq(source, merge_ranges(r for t in aborting for r in t.ranges),
                                     sorted({sub for t in aborting for sub, _ in t.sub_aborts})) if aborting else {}
    entries: list[tuple[int, int, int, bool]] = []  # start, end, txn index or SKIP, in_stream
    for index, txn in enumerate(committed):
        holes: tuple[SeqRange, ...] = ()
        if txn.sub_aborts:
            holes = excluded_ranges(txn, first_changes)
            entries.extend((a, b, SKIP, True) for a, b in holes)
        entries.extend((a, b, index, txn.in_stream) for a, b in _subtract(txn.ranges, holes))
    for txn in filtered + list(assembly.aborted):
        entries.extend((a, b, SKIP, txn.in_stream) for a, b in txn.ranges)
    for a, b in assembly.state.pending_ranges():
        entries.append((a, b, SKIP, False))
    reasons: dict[int, str] = {}
    for quarantined in assembly.quarantined:
        for a, b in quarantined.ranges:
            entries.append((a, b, QUARANTINE, False))
            reasons[a] = quarantined.reason
    entries.sort()

    decided = list(committed) + list(assembly.quarantined)
    reread = tuple(sorted((a, min(b, state.applied_seq)) for t in decided for a, b in t.ranges
                          if a <= state.applied_seq))
    first_seq = min([state.applied_seq + 1] + [a for a, _ in reread])
    splan = SourcePlan(
        range_starts=tuple(e[0] for e in entries),
        range_ends=tuple(e[1] for e in entries),
        range_txn=tuple(e[2] for e in entries),
        range_in_stream=tuple(e[3] for e in entries),
        txn_commit_lsn=tuple(t.committed_lsn for t in committed),
        txn_xid=tuple(t.xid for t in committed),
        txn_commit_ts=tuple(t.committed_ts + m.PG_EPOCH_UNIX_MICROS for t in committed),
        txn_origin=tuple(t.origin for t in committed),
        quarantine_reasons=reasons,
        skip_relations=skips,
    )
    batch = SourceBatch(source, state, assembly, tuple(committed), tuple(filtered), tuple(new_versions),
                        tuple(new_types), reread, first_seq, max(last_seq, state.applied_seq))
    return batch, splan


def plan_batch(sources: Mapping[str, tuple[SourceState, SchemaHistory, list, int]],
               first_change_seq: FirstChangeLookup, type_options: TypeOptions = TypeOptions(),
               origin_filter: Origin = "any", quarantine: bool = False,
               present_relations: Mapping[str, set[int]] | None = None,
               table_selected: Callable[[str], bool] = lambda name: True,
               txn_users: Mapping[str, Mapping[int, str]] | None = None,
               quarantine_controls: bool = False) -> BatchPlan:
    """Plan a batch over several sources: ``{source: (state, history, controls, last_seq)}``.

    ``present_relations`` (optional) narrows the decode slots to relations that
    may have changes in the batch; without it every relation version current
    somewhere in the decoded seq span gets a slot. ``quarantine`` makes the
    decode emit error rows instead of raising; ``quarantine_controls`` makes a
    bad control message quarantine its transaction instead of raising here.
    """
    batches: dict[str, SourceBatch] = {}
    splans: dict[str, SourcePlan] = {}
    slots: list[Slot] = []
    slot_versions: list[RelationVersion] = []
    for source, (state, history, controls, last_seq) in sorted(sources.items()):
        batch, splan = plan_source(source, state, history, controls, last_seq, first_change_seq, origin_filter,
                                   quarantine_controls)
        versions: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        ignored = frozenset(rid for rid, h in history.relations.items() if not table_selected(h.latest.qualified_name))
        if batch.committed or batch.assembly.quarantined:
            wanted = present_relations.get(source) if present_relations is not None else None
            for relation_id, rel_history in sorted(history.relations.items()):
                if (wanted is not None and relation_id not in wanted) or relation_id in ignored:
                    continue
                current = rel_history.between(batch.first_seq, batch.last_seq)
                if not current:
                    continue
                seqs, indexes = [], []
                for version in current:
                    seqs.append(version.seq)
                    indexes.append(len(slots))
                    slots.append(Slot(source, relation_id, version.seq, version.qualified_name, version.column_names,
                                      tuple(resolve_relation_column(c.type_oid, c.type_modifier, history.types,
                                                                    type_options, rel_history.latest.qualified_name,
                                                                    c.name) for c in version.columns),
                                      version.lineage))
                    slot_versions.append(version)
                versions[relation_id] = (tuple(seqs), tuple(indexes))
        users = (txn_users or {}).get(source)
        user_of = tuple(None if t.commit_lsn is None else users.get(t.commit_lsn)
                        for t in batch.committed) if users else ()
        splans[source] = replace(splan, versions=versions, ignored=ignored, txn_user=user_of)
        batches[source] = batch
    return BatchPlan(batches, DecodePlan(splans, tuple(slots), quarantine), tuple(slot_versions))
