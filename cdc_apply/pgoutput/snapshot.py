"""cdc_apply's snapshot transactions, written in pgoutput messages (docs/SNAPSHOTS.md).

A snapshot of one table, consistent with LSN ``C``, is a streamed transaction with xid
:data:`SNAPSHOT_XID` that PostgreSQL never gives a transaction: a first block with a
``cdc_apply.snapshot`` message, the Relation, a Truncate and the first rows; one block per further
chunk of rows; a Stream Commit at ``C`` — or a Stream Abort when the copy is abandoned. The apply
job needs nothing else: the Truncate empties the table at that point of the commit order, the
Inserts refill it, and the message's LSN makes later transactions committed below ``C`` skip the
table (:func:`cdc_apply.planning.plan.snapshot_skips`).

A *key-range chunk* is the snapshot of the rows whose first key column lies in ``[low, high)``
(:class:`KeyRange`; ``None``: unbounded), consistent with its own ``C``: the message names the
range and the rows it holds, and there is no Truncate — the apply empties only the range.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Iterable, Iterator

from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.encoder import encode

SNAPSHOT_XID = 2  # FrozenTransactionId: never a transaction's xid
SNAPSHOT_PREFIX = "cdc_apply.snapshot"


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Rows whose ``column`` (the first column of the table's replica identity key, an integer type) lies
    in ``[low, high)``; ``None`` leaves that end open. ``rows``: how many the chunk holds; ``widest``: the
    length in bytes of its longest Insert payload, which bounds the apply's batches of its rows
    (``None``: not said, as by landers before it)."""

    column: str
    low: int | None
    high: int | None
    rows: int | None = None
    widest: int | None = None

    def holds(self, value: int) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value < self.high)

    def as_json(self) -> dict:
        body: dict[str, object] = {"column": self.column, "low": self.low, "high": self.high}
        if self.rows is not None:
            body["rows"] = self.rows
        if self.widest is not None:
            body["widest"] = self.widest
        return body

    @classmethod
    def from_json(cls, body: dict) -> "KeyRange":
        low, high, rows, widest = (body.get(k) for k in ("low", "high", "rows", "widest"))
        return cls(str(body["column"]), None if low is None else int(low), None if high is None else int(high),
                   None if rows is None else int(rows), None if widest is None else int(widest))


@dataclass(frozen=True, slots=True)
class SnapshotDirective:
    """What a ``cdc_apply.snapshot`` message says: which relation, consistent with which LSN, in how many
    chunks, which key range (``None``: the whole table) and which snapshot requests it serves (a lander's
    own snapshots; ``None``: not said). ``repair``: a key range copied again on request (``cdc-apply verify
    --repair``), not part of a table's copy: it leaves where an unfinished copy goes on as it was."""

    relation_id: int
    lsn: int
    namespace: str | None = None
    name: str | None = None
    chunks: int | None = None
    key_range: KeyRange | None = None
    serves: tuple[str | int, ...] | None = None
    repair: bool = False

    def content(self) -> bytes:
        """The message's content: JSON, keys sorted (the LSN also as PostgreSQL prints it)."""
        body: dict[str, object] = {"relation_id": self.relation_id, "namespace": self.namespace, "name": self.name,
                "lsn": self.lsn, "lsn_text": m.format_lsn(self.lsn)}
        if self.chunks is not None:
            body["chunks"] = self.chunks
        if self.key_range is not None:
            body["range"] = self.key_range.as_json()
        if self.serves is not None:
            body["serves"] = list(self.serves)
        if self.repair:
            body["repair"] = True
        return json.dumps(body, sort_keys=True).encode()


def parse_snapshot_directive(content: bytes | str) -> SnapshotDirective:
    """The :class:`SnapshotDirective` a ``cdc_apply.snapshot`` message's content holds; ``ValueError``,
    ``KeyError`` or ``TypeError`` when it holds none (not JSON, no relation or LSN)."""
    body = json.loads(content)
    chunks, key_range, serves = body.get("chunks"), body.get("range"), body.get("serves")
    return SnapshotDirective(
        int(body["relation_id"]), int(body["lsn"]), body.get("namespace"), body.get("name"),
        None if chunks is None else int(chunks), None if key_range is None else KeyRange.from_json(key_range),
        None if serves is None else tuple(e if isinstance(e, str) else int(e) for e in serves),
        bool(body.get("repair", False)))


def snapshot_marker(relation: m.Relation, lsn: int, chunks: int | None = None,
                    key_range: KeyRange | None = None, serves: list | None = None, repair: bool = False) -> m.Message:
    """The message that opens a snapshot: which relation, consistent with which LSN (and which key range;
    ``serves``: the snapshot requests it serves, for a lander's own snapshots)."""
    directive = SnapshotDirective(relation.relation_id, lsn, relation.namespace, relation.name, chunks, key_range,
                                  None if serves is None else tuple(serves), repair)
    return m.Message(SNAPSHOT_XID, True, lsn, SNAPSHOT_PREFIX, directive.content())


def snapshot_head(relation: m.Relation, lsn: int, chunks: int | None = None,
                  key_range: KeyRange | None = None) -> tuple[m.PgOutputMessage, ...]:
    """The first block's opening: Stream Start, the marker, the Relation and — for a whole table — the Truncate."""
    head = (m.StreamStart(SNAPSHOT_XID, True), snapshot_marker(relation, lsn, chunks, key_range),
            m.Relation(SNAPSHOT_XID, relation.relation_id, relation.namespace, relation.name,
                       relation.replica_identity, relation.columns))
    return head if key_range is not None else head + (m.Truncate(SNAPSHOT_XID, 0, (relation.relation_id,)),)


def snapshot_messages(relation: m.Relation, lsn: int, commit_ts: int,
                      chunks: Iterable[Iterable[m.TupleData]],
                      key_range: KeyRange | None = None) -> Iterator[m.PgOutputMessage]:
    """Every message of a whole snapshot (``commit_ts`` in PostgreSQL microseconds); one block per chunk.
    The lander writes the same sequence, chunk by chunk, from COPY BINARY rows — a key-range chunk's
    marker saying its longest Insert payload (:attr:`KeyRange.widest`) unless ``key_range`` says it."""
    if key_range is not None and key_range.widest is None:
        chunks = [list(rows) for rows in chunks]
        inserts = (m.Insert(SNAPSHOT_XID, relation.relation_id, row) for rows in chunks for row in rows)
        key_range = replace(key_range, widest=max((len(encode(i)) for i in inserts), default=None))
    first = True
    for rows in chunks:
        yield from snapshot_head(relation, lsn, key_range=key_range) if first else (
            m.StreamStart(SNAPSHOT_XID, False),)
        first = False
        for row in rows:
            yield m.Insert(SNAPSHOT_XID, relation.relation_id, row)
        yield m.StreamStop()
    if first:  # an empty table: the head alone still empties silver
        yield from snapshot_head(relation, lsn, key_range=key_range)
        yield m.StreamStop()
    yield m.StreamCommit(SNAPSHOT_XID, 0, lsn, lsn, commit_ts)


def snapshot_abort() -> m.StreamAbort:
    """Closes an abandoned snapshot: the apply drops every block of it."""
    return m.StreamAbort(SNAPSHOT_XID, SNAPSHOT_XID)
