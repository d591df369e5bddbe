"""A reference applier: the semantics of docs/ARCHITECTURE.md and README.md, one message at a time, in plain Python.

It is deliberately simple and sequential — the opposite of the Spark job — so
tests can check the job (and the planning code) against it: committed
transactions in commit order, streamed transactions with subtransaction
aborts, two-phase transactions, unchanged TOAST kept from the stored row,
REPLICA IDENTITY FULL rows matched on all values with exact duplicates,
TRUNCATE, and relation versions by position in the stream. Values stay raw
(text ``str`` or binary ``bytes``) as PostgreSQL sent them.

>>> from cdc_apply.testing.stream import StreamBuilder
>>> b = StreamBuilder()
>>> t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
>>> with b.transaction() as tx:
...     tx.insert(t, {"id": 1, "v": "a"})
>>> ref = ReferenceApplier()
>>> for _, seq, lsn, payload in b.rows():
...     ref.feed(seq, payload)
>>> ref.rows("public.t")
[{'id': '1', 'v': 'a'}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from cdc_apply.errors import ApplyError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import StreamDecoder
from cdc_apply.pgoutput.snapshot import SNAPSHOT_PREFIX, KeyRange, parse_snapshot_directive
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.tables import identity_of


@dataclass
class _Table:
    relation_id: int
    name: str
    lineage_names: dict[int, tuple[int, int]] = field(default_factory=dict)  # lineage -> (type oid, typmod) last seen
    keyed: dict[tuple, dict[int, Any]] = field(default_factory=dict)   # identity -> {lineage: value}
    bag: list[dict[int, Any]] = field(default_factory=list)            # keyless rows (duplicates kept)
    key_lineage: tuple[int, ...] | None = None                         # None: matched on all values

    def reshape(self, key_lineage: tuple[int, ...] | None) -> None:
        """Move the rows when the identity changes (ADD PRIMARY KEY, REPLICA IDENTITY FULL ...)."""
        if key_lineage == self.key_lineage:
            return
        rows = list(self.keyed.values()) + self.bag
        self.keyed, self.bag, self.key_lineage = {}, [], key_lineage
        for row in rows:
            if key_lineage is None:
                self.bag.append(row)
            else:
                self.keyed[tuple(row.get(lin) for lin in key_lineage)] = row


# What a transaction buffers: its changes and its transactional logical messages.
_Change = m.Insert | m.Update | m.Delete | m.Truncate | m.Message


@dataclass
class _Pending:
    changes: list[tuple[int, int | None, _Change]] = field(default_factory=list)  # (seq, xid, message)
    origin: str | None = None


class ReferenceApplier:
    """Feed messages of one source in seq order; read tables with :meth:`rows`.

    With ``convert`` (a function ``(RelationColumn, user types, raw value) -> value``)
    values are converted when applied, with the relation version current then —
    as the job does — and a retyped column's stored values are passed through
    ``recast(value, new ColumnType)``.
    """

    def __init__(self, keys: dict[str, tuple[str, ...]] | None = None,
                 origin_filter: str = "any", convert: Callable | None = None,
                 recast: Callable | None = None) -> None:
        self.convert = convert
        self.recast = recast
        self.decoder = StreamDecoder()
        self.history = SchemaHistory()
        self.tables: dict[int, _Table] = {}
        self.keys = keys or {}
        self.origin_filter = origin_filter
        self.open: _Pending | None = None
        self.open_kind: str | None = None
        self.open_gid: str | None = None
        self.streams: dict[int, _Pending] = {}
        self.prepared: dict[str, _Pending] = {}
        self.stream_xid: int | None = None
        self.messages: list[m.Message] = []
        self.committed: list[tuple[int, str]] = []  # (commit_lsn, kind)
        self.on_commit: Callable[[int], None] | None = None
        self.snapshot_resets: dict[int, int] = {}  # relation id -> LSN of a snapshot of it still in force

    # -- feeding ---------------------------------------------------------------
    def feed(self, seq: int, payload: bytes) -> None:
        msg = self.decoder.decode(payload)
        if isinstance(msg, (m.Relation, m.Type)):
            self.history.record(seq, 0, msg)
            return
        if isinstance(msg, (m.Insert, m.Update, m.Delete, m.Truncate)) or (
                isinstance(msg, m.Message) and msg.transactional):
            self._buffer().changes.append((seq, msg.xid, msg))
        elif isinstance(msg, m.Message):
            self.messages.append(msg)
        elif isinstance(msg, m.Begin):
            self.open, self.open_kind = _Pending(), "plain"
        elif isinstance(msg, m.BeginPrepare):
            self.open, self.open_kind, self.open_gid = _Pending(), "prepare", msg.gid
        elif isinstance(msg, m.Origin):
            self._buffer().origin = msg.name
        elif isinstance(msg, m.Commit):
            self._commit(self._open_transaction("Commit", seq), msg.commit_lsn, "plain")
            self.open = None
        elif isinstance(msg, m.Prepare):
            self.prepared[msg.gid] = self._open_transaction("Prepare", seq)
            self.open = None
        elif isinstance(msg, m.CommitPrepared):
            pending = self.prepared.pop(msg.gid, None)
            if pending is None:
                raise ApplyError("Commit Prepared of an unknown gid", gid=msg.gid, seq=seq)
            self._commit(pending, msg.commit_lsn, "prepared")
        elif isinstance(msg, m.RollbackPrepared):
            self.prepared.pop(msg.gid, None)
        elif isinstance(msg, m.StreamStart):
            if msg.first_segment or msg.xid not in self.streams:
                self.streams[msg.xid] = _Pending()
            self.stream_xid = msg.xid
        elif isinstance(msg, m.StreamStop):
            self.stream_xid = None
        elif isinstance(msg, m.StreamCommit):
            self._commit(self.streams.pop(msg.xid), msg.commit_lsn, "streamed")
        elif isinstance(msg, m.StreamPrepare):
            self.prepared[msg.gid] = self.streams.pop(msg.xid)
        elif isinstance(msg, m.StreamAbort):
            pending = self.streams.get(msg.xid)
            if pending is None:
                return
            if msg.subxid == msg.xid:
                del self.streams[msg.xid]
            else:  # drop from the subtransaction's first change on, as the apply worker truncates its spool
                first = next((i for i, (_, xid, _) in enumerate(pending.changes) if xid == msg.subxid), None)
                if first is not None:
                    del pending.changes[first:]

    def _open_transaction(self, kind: str, seq: int) -> _Pending:
        """The transaction a Commit or Prepare ends: one a Begin or Begin Prepare opened."""
        if self.open is None:
            raise ApplyError(f"{kind} outside a transaction", seq=seq)
        return self.open

    def _buffer(self) -> _Pending:
        if self.stream_xid is not None:
            return self.streams[self.stream_xid]
        if self.open is None:
            raise ApplyError("change outside a transaction")
        return self.open

    # -- applying --------------------------------------------------------------
    def _commit(self, pending: _Pending, commit_lsn: int, kind: str) -> None:
        self.committed.append((commit_lsn, kind))
        if self.origin_filter == "none" and pending.origin is not None:
            return
        # A snapshot consistent with LSN C already holds what transactions committed below C did to its
        # table (docs/SNAPSHOTS.md); the first transaction at or past C ends the rule.
        skip = {rid for rid, lsn in self.snapshot_resets.items() if commit_lsn < lsn}
        self.snapshot_resets = {rid: lsn for rid, lsn in self.snapshot_resets.items() if rid in skip}
        for seq, _, msg in pending.changes:
            if isinstance(msg, m.Truncate):
                for rid in msg.relation_ids:
                    if rid in self.tables and rid not in skip:
                        self.tables[rid].keyed.clear()
                        self.tables[rid].bag.clear()
            elif isinstance(msg, m.Message):
                self.messages.append(msg)
                if msg.prefix == SNAPSHOT_PREFIX:
                    snapshot = parse_snapshot_directive(msg.content)
                    if snapshot.key_range is None:
                        self.snapshot_resets[snapshot.relation_id] = snapshot.lsn
                    else:   # a key-range chunk: its range is emptied, its rows follow
                        self._clear_range(seq, snapshot.relation_id, snapshot.key_range)
            elif msg.relation_id not in skip:
                self._apply(seq, msg)
        if self.on_commit is not None:
            self.on_commit(commit_lsn)

    def _apply(self, seq: int, msg) -> None:
        version = self.history.version_at(msg.relation_id, seq)
        if version is None:
            raise ApplyError("change for an undescribed relation", relation_id=msg.relation_id, seq=seq)
        table = self.tables.setdefault(msg.relation_id, _Table(msg.relation_id, version.qualified_name))
        table.name = version.qualified_name
        self._retype(table, version)
        key = identity_of(version, self.keys.get(version.qualified_name))
        lineage = version.lineage
        idx = [version.column_names.index(k) for k in key] if key else None
        table.reshape(tuple(lineage[i] for i in idx) if idx is not None else None)

        def as_row(values) -> dict[int, Any]:
            if self.convert is None:
                return {lin: v for lin, v in zip(lineage, values)}
            return {lin: v if v is None or v is m.UNCHANGED_TOAST else self.convert(col, self.history.types, v)
                    for lin, col, v in zip(lineage, version.columns, values)}

        new = getattr(msg, "new", None)
        old = msg.key if getattr(msg, "key", None) is not None else getattr(msg, "old", None)
        if idx is None:
            if old is not None:
                target = as_row(old)
                for i, row in enumerate(table.bag):
                    if all(row.get(lin) == v for lin, v in target.items()):
                        prior = table.bag.pop(i)
                        break
                else:
                    prior = None
                if new is None:
                    return
                row = as_row(new)
                for lin, v in row.items():
                    if v is m.UNCHANGED_TOAST:   # the old row REPLICA IDENTITY FULL sends holds it too
                        row[lin] = prior.get(lin) if prior else target.get(lin)
                table.bag.append(row)
            elif new is not None:
                table.bag.append(as_row(new))
            return
        def ident(values) -> tuple:  # keyed from here on: a row is identified by its key columns
            row = as_row(values)
            return tuple(row[lineage[i]] for i in idx)

        if isinstance(msg, m.Delete):
            table.keyed.pop(ident(old), None)
            return
        old_ident = ident(old) if old is not None else ident(new)
        prior = table.keyed.pop(old_ident, None) if isinstance(msg, m.Update) else None
        row = dict(prior or {})
        for lin, v in as_row(new).items():
            if v is m.UNCHANGED_TOAST:
                if prior is None or lin not in prior:
                    continue  # not known: an update of a row we never saw
                continue
            row[lin] = v
        if isinstance(msg, m.Update) and prior is None and any(v is m.UNCHANGED_TOAST for v in msg.new):
            return  # like the apply worker: an update of a missing row is skipped
        for lin in lineage:
            row.setdefault(lin, None)
        live = set(lineage)
        table.keyed[ident(new)] = {lin: v for lin, v in row.items() if lin in live}

    def _clear_range(self, seq: int, relation_id: int, key_range: KeyRange) -> None:
        table = self.tables.get(relation_id)
        version = self.history.version_at(relation_id, seq)
        if table is None or version is None:
            return
        lineage = version.lineage[version.column_names.index(key_range.column)]

        def inside(row) -> bool:
            value = row.get(lineage)
            return value is not None and key_range.holds(_as_int(value))

        table.keyed = {k: row for k, row in table.keyed.items() if not inside(row)}
        table.bag = [row for row in table.bag if not inside(row)]

    def _retype(self, table: _Table, version) -> None:
        types = {lin: (c.type_oid, c.type_modifier) for lin, c in zip(version.lineage, version.columns)}
        changed = [lin for lin, t in types.items() if table.lineage_names.get(lin, t) != t]
        for lin, t in types.items():
            table.lineage_names[lin] = t
        if not changed or self.recast is None:
            return
        for row in list(table.keyed.values()) + table.bag:
            for lin in changed:
                if row.get(lin) is not None:
                    col = version.columns[version.lineage.index(lin)]
                    row[lin] = self.recast(row[lin], col, self.history.types)

    # -- reading -----------------------------------------------------------------
    def rows(self, name: str, at_seq: int | None = None) -> list[dict[str, Any]]:
        """Rows of a table by its qualified name, with the column names of the relation version
        current at ``at_seq`` (default: the latest)."""
        for table in self.tables.values():
            history = self.history.relations[table.relation_id]
            version = history.latest if at_seq is None else (history.at(at_seq) or history.latest)
            if version.qualified_name == name:
                source = list(table.keyed.values()) + table.bag
                return [{n: r.get(lin) for lin, n in zip(version.lineage, version.column_names)} for r in source]
        return []

    def table_names(self) -> list[str]:
        return sorted(t.name for t in self.tables.values())


def _as_int(value) -> int:
    """A key value as the integer a chunk's range bounds (typed, text, or a binary big-endian integer)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return int.from_bytes(bytes(value), "big", signed=True)
    return int(value)
