"""Build pgoutput streams for tests: bronze rows as PostgreSQL would send them.

>>> b = StreamBuilder("shop")
>>> users = b.relation("public", "users", [("id", "int4", True), ("name", "text", False)])
>>> with b.transaction() as tx:
...     tx.insert(users, {"id": 1, "name": "Ada"})
>>> [type(m).__name__ for m in b.messages()]
['Relation', 'Begin', 'Insert', 'Commit']

Seq numbers are consecutive from 0 (override with ``start_seq``), LSNs grow
with the bytes sent, Begin's final LSN equals its Commit's commit LSN, and
messages inside stream blocks carry the (sub)transaction's xid, as on the wire.
Values are rendered in PostgreSQL's text format unless given as ``bytes``
(binary format) or :data:`UNCHANGED_TOAST`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Iterator, Mapping, Sequence

from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.encoder import encode

BUILTIN_TYPE_OIDS = {
    "bool": 16, "bytea": 17, "char": 18, "name": 19, "int8": 20, "int2": 21, "int4": 23, "text": 25,
    "oid": 26, "json": 114, "xml": 142, "float4": 700, "float8": 701, "money": 790, "macaddr": 829,
    "inet": 869, "cidr": 650, "bpchar": 1042, "varchar": 1043, "date": 1082, "time": 1083,
    "timestamp": 1114, "timestamptz": 1184, "interval": 1186, "timetz": 1266, "bit": 1560, "varbit": 1562,
    "numeric": 1700, "uuid": 2950, "jsonb": 3802, "_int4": 1007, "_text": 1009, "_int8": 1016,
}
BASE_TIMESTAMP = 848_000_000_000_000  # 2026-11-15 UTC in microseconds since 2000-01-01


def render_text(value: Any) -> m.ColumnValue:
    """A Python value as PostgreSQL's text output (bools 't'/'f'); bytes pass through as binary."""
    if value is None or value is m.UNCHANGED_TOAST or isinstance(value, (str, bytes)):
        return value
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    return str(value)


@dataclass(frozen=True, slots=True)
class Rel:
    """A relation as the builder knows it (the Relation message and column order)."""

    message: m.Relation

    @property
    def oid(self) -> int:
        return self.message.relation_id

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.message.columns)

    def tuple_of(self, values: Mapping[str, Any] | Sequence[Any], key_only: bool = False) -> m.TupleData:
        if isinstance(values, Mapping):
            unknown = set(values) - set(self.names)
            if unknown:
                raise KeyError(f"no such column(s) in {self.message.name}: {sorted(unknown)}")
            out = []
            for col in self.message.columns:
                out.append(render_text(values.get(col.name)) if (col.key or not key_only) else None)
            return tuple(out)
        return tuple(render_text(v) for v in values)


class StreamBuilder:
    """Accumulates messages of one source; see the module docstring."""

    def __init__(self, source: str = "test", start_seq: int = 0, start_lsn: int = 0x1000000,
                 start_xid: int = 700, start_oid: int = 16384) -> None:
        self.source = source
        self.start_seq = start_seq
        self._items: list[list[Any]] = []  # [message, lsn]
        self._lsn = start_lsn
        self._xid = start_xid
        self._oid = start_oid
        self._ts = BASE_TIMESTAMP

    # -- bookkeeping -----------------------------------------------------------
    def next_xid(self) -> int:
        self._xid += 1
        return self._xid

    def _tick(self) -> int:
        self._ts += 1000
        return self._ts

    def emit(self, message: m.PgOutputMessage) -> int:
        """Append a message; returns its index (for later patching)."""
        lsn = self._lsn
        self._lsn += len(encode(message)) + 24
        self._items.append([message, lsn])
        return len(self._items) - 1

    def patch(self, index: int, **fields: Any) -> None:
        self._items[index][0] = replace(self._items[index][0], **fields)

    def messages(self) -> list[m.PgOutputMessage]:
        return [item[0] for item in self._items]

    def rows(self) -> list[tuple[str, int, int, bytes]]:
        """Bronze rows ``(source, seq, lsn, payload)``."""
        return [(self.source, self.start_seq + i, lsn, encode(msg)) for i, (msg, lsn) in enumerate(self._items)]

    def to_bronze(self, spark):
        """The rows as a DataFrame with the bronze contract's schema."""
        from cdc_apply.delta.bronze_schema import spark_schema

        return spark.createDataFrame([(*r, None) for r in self.rows()], spark_schema())

    # -- schema ----------------------------------------------------------------
    def relation(self, namespace: str, name: str, columns: Sequence[tuple], replica_identity: str = "d",
                 oid: int | None = None, xid: int | None = None, emit: bool = True) -> Rel:
        """Declare a relation: columns are ``(name, type, key[, typmod])`` with type a name or an OID."""
        if oid is None:
            self._oid += 1
            oid = self._oid
        cols = []
        for spec in columns:
            col_name, type_, key = spec[:3]
            typmod = spec[3] if len(spec) > 3 else -1
            type_oid = BUILTIN_TYPE_OIDS[type_] if isinstance(type_, str) else int(type_)
            cols.append(m.RelationColumn(1 if key else 0, col_name, type_oid, typmod))
        rel = Rel(m.Relation(xid, oid, namespace, name, replica_identity, tuple(cols)))
        if emit:
            self.emit(rel.message)
        return rel

    def resend(self, rel: Rel, xid: int | None = None) -> None:
        self.emit(replace(rel.message, xid=xid))

    # -- transactions -------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self, xid: int | None = None, origin: str | None = None,
                    commit_lsn: int | None = None) -> Iterator["Tx"]:
        """Begin ... Commit around the changes made in the block (``commit_lsn``: its commit LSN, for
        a transaction that commits below what was landed before it, as after a snapshot)."""
        xid = xid or self.next_xid()
        ts = self._tick()
        begin = self.emit(m.Begin(0, ts, xid))
        if origin is not None:
            self.emit(m.Origin(0x42, origin))
        yield Tx(self, None)
        commit_lsn = self._lsn if commit_lsn is None else commit_lsn
        self.patch(begin, final_lsn=commit_lsn)
        self.emit(m.Commit(0, commit_lsn, commit_lsn + 40, ts))

    @contextlib.contextmanager
    def prepared_transaction(self, gid: str, xid: int | None = None) -> Iterator["Tx"]:
        """Begin Prepare ... Prepare; finish later with :meth:`commit_prepared` or :meth:`rollback_prepared`."""
        xid = xid or self.next_xid()
        ts = self._tick()
        begin = self.emit(m.BeginPrepare(0, 0, ts, xid, gid))
        yield Tx(self, None)
        lsn = self._lsn
        self.patch(begin, prepare_lsn=lsn, end_lsn=lsn + 40)
        self.emit(m.Prepare(0, lsn, lsn + 40, ts, xid, gid))

    def commit_prepared(self, gid: str, xid: int) -> None:
        lsn = self._lsn
        self.emit(m.CommitPrepared(0, lsn, lsn + 40, self._tick(), xid, gid))

    def rollback_prepared(self, gid: str, xid: int) -> None:
        lsn = self._lsn
        self.emit(m.RollbackPrepared(0, lsn, lsn + 40, self._ts, self._tick(), xid, gid))

    def stream(self, xid: int | None = None) -> "StreamedTx":
        """A streamed transaction: emit blocks with ``with s.block():`` then commit/abort/prepare it."""
        return StreamedTx(self, xid or self.next_xid())

    def snapshot(self, rel: "Rel", rows: Sequence[Mapping[str, Any] | Sequence[Any]], lsn: int | None = None,
                 chunk_rows: int = 1000, key_range=None) -> int:
        """A lander's snapshot of ``rel`` holding ``rows``, consistent with ``lsn`` (default: the next
        LSN); returns that LSN. ``key_range``: a :class:`~cdc_apply.pgoutput.snapshot.KeyRange` chunk
        (``rows`` are the rows in that range). See :mod:`cdc_apply.pgoutput.snapshot`."""
        from cdc_apply.pgoutput.snapshot import snapshot_messages

        lsn = self._lsn if lsn is None else lsn
        tuples = [rel.tuple_of(r) for r in rows]
        chunks = [tuples[i:i + chunk_rows] for i in range(0, len(tuples), chunk_rows)]
        for message in snapshot_messages(rel.message, lsn, self._tick(), chunks, key_range):
            self.emit(message)
        return lsn

    def logical_message(self, prefix: str, content: bytes, transactional: bool = False) -> None:
        self.emit(m.Message(None, transactional, self._lsn, prefix, content))


class Tx:
    """Changes inside a transaction or a stream block (``xid`` set inside blocks)."""

    def __init__(self, builder: StreamBuilder, xid: int | None) -> None:
        self.b = builder
        self.xid = xid

    def insert(self, rel: Rel, new: Mapping[str, Any] | Sequence[Any]) -> None:
        self.b.emit(m.Insert(self.xid, rel.oid, rel.tuple_of(new)))

    def update(self, rel: Rel, new: Mapping[str, Any] | Sequence[Any], key: Mapping[str, Any] | None = None,
               old: Mapping[str, Any] | Sequence[Any] | None = None) -> None:
        """``key``: the old key when the key changed ('K'); ``old``: the old row (REPLICA IDENTITY FULL)."""
        key_t = rel.tuple_of(key, key_only=True) if key is not None else None
        old_t = rel.tuple_of(old) if old is not None else None
        self.b.emit(m.Update(self.xid, rel.oid, key_t, old_t, rel.tuple_of(new)))

    def delete(self, rel: Rel, key: Mapping[str, Any] | None = None,
               old: Mapping[str, Any] | Sequence[Any] | None = None) -> None:
        key_t = rel.tuple_of(key, key_only=True) if key is not None else None
        old_t = rel.tuple_of(old) if old is not None else None
        self.b.emit(m.Delete(self.xid, rel.oid, key_t, old_t))

    def truncate(self, rels: Sequence[Rel], cascade: bool = False, restart_identity: bool = False) -> None:
        options = (m.TRUNCATE_CASCADE if cascade else 0) | (m.TRUNCATE_RESTART_IDENTITY if restart_identity else 0)
        self.b.emit(m.Truncate(self.xid, options, tuple(r.oid for r in rels)))

    def message(self, prefix: str, content: bytes) -> None:
        self.b.emit(m.Message(self.xid, True, self.b._lsn, prefix, content))

    def relation(self, rel: Rel) -> None:
        self.b.emit(replace(rel.message, xid=self.xid))

    def sub(self, subxid: int) -> "Tx":
        """Changes made by subtransaction ``subxid`` (inside a stream block)."""
        return Tx(self.b, subxid)


class StreamedTx:
    def __init__(self, builder: StreamBuilder, xid: int) -> None:
        self.b = builder
        self.xid = xid
        self._first = True

    @contextlib.contextmanager
    def block(self) -> Iterator[Tx]:
        self.b.emit(m.StreamStart(self.xid, self._first))
        self._first = False
        yield Tx(self.b, self.xid)
        self.b.emit(m.StreamStop())

    def commit(self) -> None:
        lsn = self.b._lsn
        self.b.emit(m.StreamCommit(self.xid, 0, lsn, lsn + 40, self.b._tick()))

    def abort(self, subxid: int | None = None, parallel: bool = False) -> None:
        extra = (self.b._lsn, self.b._tick()) if parallel else (None, None)
        self.b.emit(m.StreamAbort(self.xid, subxid if subxid is not None else self.xid, *extra))

    def prepare(self, gid: str) -> None:
        lsn = self.b._lsn
        self.b.emit(m.StreamPrepare(0, lsn, lsn + 40, self.b._tick(), self.xid, gid))
