"""Per-table state of the transcoder: relation ids, column lists, keys, and DML as pgoutput.

GaussDB records name their table and carry column names and type OIDs in every
tuple; pgoutput carries a relation id and sends a Relation message before the
first change of a relation and again whenever its description changes. This
module keeps one :class:`TableState` per (schema, table) and turns each DML
record into pgoutput messages: a :class:`~cdc_apply.pgoutput.messages.Relation`
when the description changed, then the Insert / Update / Delete.

Description (see ``docs/GAUSSDB.md``):

* columns: the new tuple's (name, type OID) list, in its order — a new tuple
  carries every column. Names are unquoted (:func:`~cdc_apply.gaussdb.records.unquote_name`);
  type modifiers are unknown (``-1``). A Delete of a table not described yet
  describes it by its old tuple; so does a Delete whose old tuple names every
  known column and more (a column added since).
* identity: configured keys (``"schema.table"``) give replica identity ``'d'``
  with those key flags. Otherwise the old tuple tells: it carries the replica
  identity columns, so an old tuple with every column means ``'f'`` (rows
  matched on all values) and one with fewer means ``'d'`` keyed by exactly
  those columns. Until an old tuple has been seen a table is described ``'f'``.
* a change that cannot be keyed raises :class:`~cdc_apply.errors.SchemaError`
  naming the table: an Update or Delete without an old tuple, or whose old
  tuple lacks a configured key column.

Changes made while a transaction is mapped live in an overlay until
:meth:`TableMapper.commit`, so a failed transaction leaves no trace.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from cdc_apply.errors import SchemaError
from cdc_apply.gaussdb.records import Delete, DmlRecord, GTuple, Insert, unquote_name
from cdc_apply.pgoutput import messages as m

_ID_SPACE = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class TableState:
    relation_id: int
    schema: str
    table: str
    columns: tuple[tuple[str, int], ...]  # (unquoted name, type OID)
    identity: str  # 'd' (keyed) or 'f' (all values)
    key: tuple[str, ...] = ()  # key column names in column order; empty under 'f'
    key_source: str = ""  # "config", "old tuple" or "" (none yet)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.columns)

    def relation(self) -> m.Relation:
        """The Relation message; under 'f' every column is flagged, as PostgreSQL does."""
        key = set(self.key)
        cols = tuple(m.RelationColumn(1 if self.identity == "f" or n in key else 0, n, oid, -1)
                     for n, oid in self.columns)
        return m.Relation(None, self.relation_id, self.schema, self.table, self.identity, cols)

    def to_json(self) -> list:
        return [self.relation_id, self.schema, self.table, [list(c) for c in self.columns], self.identity,
                list(self.key), self.key_source]

    @classmethod
    def from_json(cls, data: list) -> "TableState":
        rid, schema, table, columns, identity, key, source = data
        return cls(rid, schema, table, tuple((n, oid) for n, oid in columns), identity, tuple(key), source)


def relation_id_for(schema: str, table: str) -> int:
    """A stable 31-bit id from the names (collisions are resolved by :class:`TableMapper`)."""
    return (zlib.crc32(schema.encode("utf-8") + b"\x00" + table.encode("utf-8")) & _ID_SPACE) or 1


class TableMapper:
    def __init__(self, keys: Mapping[str, Sequence[str]], tables: Sequence[TableState] = ()) -> None:
        self.keys = {name: tuple(cols) for name, cols in keys.items()}
        self.tables: dict[tuple[str, str], TableState] = {(t.schema, t.table): t for t in tables}
        self.ids: dict[int, tuple[str, str]] = {t.relation_id: (t.schema, t.table) for t in tables}
        self._overlay: dict[tuple[str, str], TableState] = {}

    # -- overlay ---------------------------------------------------------------------
    def _get(self, name: tuple[str, str]) -> TableState | None:
        return self._overlay.get(name) or self.tables.get(name)

    def commit(self) -> None:
        for name, state in self._overlay.items():
            self.tables[name] = state
            self.ids[state.relation_id] = name
        self._overlay.clear()

    def rollback(self) -> None:
        self._overlay.clear()

    def states(self) -> list[TableState]:
        return sorted(self.tables.values(), key=lambda t: (t.schema, t.table))

    def _new_id(self, name: tuple[str, str]) -> int:
        taken = {s.relation_id for s in self._overlay.values()}
        rid = relation_id_for(*name)
        while rid in self.ids or rid in taken:  # another table got there first: probe on
            rid = rid % _ID_SPACE + 1
        return rid

    # -- mapping -----------------------------------------------------------------------
    def change(self, rec: DmlRecord) -> list[m.PgOutputMessage]:
        """pgoutput messages for one DML record: a Relation when the description changes, then the change."""
        qn = f"{rec.schema}.{rec.table}"
        name = (rec.schema, rec.table)
        before = self._get(name)
        new = None if isinstance(rec, Delete) else _columns(rec.new, qn, "new")
        old = None if isinstance(rec, Insert) else _columns(rec.old, qn, "old")
        if new is None and not isinstance(rec, Delete):
            raise SchemaError(f"this {type(rec).__name__} carries no new tuple", table=qn)
        if new is not None:
            if not new:
                raise SchemaError("the new tuple has no columns (the server could not decode the row)", table=qn)
            state = self._describe(before, name, tuple((n, oid) for n, oid, _ in new))
        elif old:
            state = self._describe_from_old(before, name, old, qn)
        else:  # a Delete without an old tuple
            raise _unkeyed(rec, qn)
        if not isinstance(rec, Insert):
            if not old:
                raise _unkeyed(rec, qn)
            state = self._identify(state, {n for n, _, _ in old}, qn)
        out: list[m.PgOutputMessage] = []
        if state != before:
            self._overlay[name] = state
            relation = state.relation()
            if before is None or before.relation() != relation:  # not for bookkeeping-only changes
                out.append(relation)
        out.append(_message(rec, state, new, old, qn))
        return out

    def _describe(self, state: TableState | None, name: tuple[str, str], cols: tuple[tuple[str, int], ...]
                  ) -> TableState:
        if state is None:
            state = TableState(self._new_id(name), name[0], name[1], cols, "f")
        elif state.columns != cols:
            state = replace(state, columns=cols)
        return self._with_key(state)

    def _describe_from_old(self, state: TableState | None, name: tuple[str, str], old: list, qn: str
                           ) -> TableState:
        cols = tuple((n, oid) for n, oid, _ in old)
        if state is None:
            return self._describe(None, name, cols)  # the best description there is until a new tuple comes
        if set(cols) <= set(state.columns):
            return self._with_key(state)
        names = {n for n, _ in cols}
        if set(state.names) <= names:
            return self._describe(state, name, cols)  # the old tuple lists every column: a newer description
        if names <= set(state.names):  # known columns, some retyped since the last new tuple
            retyped = dict(cols)
            return self._describe(state, name, tuple((n, retyped.get(n, oid)) for n, oid in state.columns))
        unknown = sorted(names - set(state.names))
        raise SchemaError(f"the old tuple names column(s) {unknown} that no new tuple has described, and "
                          "lacks others: the table's column list cannot be known", table=qn)

    def _with_key(self, state: TableState) -> TableState:
        """Apply the configured key, or drop a learned key whose columns are gone."""
        configured = self.keys.get(f"{state.schema}.{state.table}")
        if configured:
            missing = [k for k in configured if k not in state.names]
            if missing:
                raise SchemaError(f"configured key column(s) {missing} are not columns of the table",
                                  table=f"{state.schema}.{state.table}")
            ordered = tuple(n for n in state.names if n in configured)
            return replace(state, identity="d", key=ordered, key_source="config")
        if state.key_source == "config" or not set(state.key) <= set(state.names):
            return replace(state, identity="f", key=(), key_source="")
        return state

    def _identify(self, state: TableState, old_names: set[str], qn: str) -> TableState:
        """The identity an old tuple reveals (configured keys win; they must be in it)."""
        if state.key_source == "config":
            missing = [k for k in state.key if k not in old_names]
            if missing:
                raise SchemaError(f"cannot key this change: the old tuple lacks configured key column(s) {missing}",
                                  table=qn)
            return state
        if old_names >= set(state.names):
            return replace(state, identity="f", key=(), key_source="old tuple")
        return replace(state, identity="d", key=tuple(n for n in state.names if n in old_names),
                       key_source="old tuple")


def _columns(tup: GTuple | None, qn: str, which: str) -> list[tuple[str, int, str | None]] | None:
    if tup is None:
        return None
    out, seen = [], set()
    for raw, oid, value in tup:
        try:
            name = unquote_name(raw)
        except ValueError as exc:
            raise SchemaError(f"{which} tuple: {exc}", table=qn) from None
        if name in seen:
            raise SchemaError(f"{which} tuple names column {name!r} twice", table=qn)
        seen.add(name)
        out.append((name, oid, value))
    return out


def _unkeyed(rec: DmlRecord, qn: str) -> SchemaError:
    return SchemaError(f"cannot key this {type(rec).__name__}: no old tuple (set REPLICA IDENTITY "
                       "on the table, or configure its key and use REPLICA IDENTITY FULL)", table=qn)


def _message(rec: DmlRecord, state: TableState, new: list | None, old: list | None, qn: str) -> m.PgOutputMessage:
    rid = state.relation_id
    if isinstance(rec, Insert):
        return m.Insert(None, rid, tuple(v for _, _, v in new))  # type: ignore[union-attr]
    old_by_name = {}
    types = dict(state.columns)
    for n, oid, v in old:  # type: ignore[union-attr]
        if n not in types or types[n] != oid:
            raise SchemaError(f"the old tuple's column {n!r} (type {oid}) is not a column of the table as described "
                              f"by its new tuple", table=qn)
        old_by_name[n] = v
    if state.identity == "f":
        old_t = tuple(old_by_name[n] for n in state.names)
        if isinstance(rec, Delete):
            return m.Delete(None, rid, None, old_t)
        return m.Update(None, rid, None, old_t, tuple(v for _, _, v in new))  # type: ignore[union-attr]
    key = set(state.key)
    key_t = tuple(old_by_name[n] if n in key else None for n in state.names)
    if isinstance(rec, Delete):
        return m.Delete(None, rid, key_t, None)
    new_t = tuple(v for _, _, v in new)  # type: ignore[union-attr]
    changed = any(key_t[i] != new_t[i] for i, n in enumerate(state.names) if n in key)
    return m.Update(None, rid, key_t if changed else None, None, new_t)  # 'K' only when the key changed, as pgoutput
