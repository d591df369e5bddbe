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
from dataclasses import dataclass
from typing import Iterable, Iterator

from cdc_apply.pgoutput import messages as m

SNAPSHOT_XID = 2  # FrozenTransactionId: never a transaction's xid
SNAPSHOT_PREFIX = "cdc_apply.snapshot"


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Rows whose ``column`` (the first column of the table's replica identity key, an integer type) lies
    in ``[low, high)``; ``None`` leaves that end open. ``rows``: how many the chunk holds."""

    column: str
    low: int | None
    high: int | None
    rows: int | None = None

    def holds(self, value: int) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value < self.high)

    def as_json(self) -> dict:
        body = {"column": self.column, "low": self.low, "high": self.high}
        return body if self.rows is None else {**body, "rows": self.rows}

    @classmethod
    def from_json(cls, body: dict) -> "KeyRange":
        low, high, rows = body.get("low"), body.get("high"), body.get("rows")
        return cls(str(body["column"]), None if low is None else int(low), None if high is None else int(high),
                   None if rows is None else int(rows))


def snapshot_marker(relation: m.Relation, lsn: int, chunks: int | None = None,
                    key_range: KeyRange | None = None, serves: list | None = None) -> m.Message:
    """The message that opens a snapshot: which relation, consistent with which LSN (and which key range;
    ``serves``: the snapshot requests it serves, for a lander's own snapshots)."""
    content = {"relation_id": relation.relation_id, "namespace": relation.namespace, "name": relation.name,
               "lsn": lsn, "lsn_text": m.format_lsn(lsn)}
    if chunks is not None:
        content["chunks"] = chunks
    if key_range is not None:
        content["range"] = key_range.as_json()
    if serves is not None:
        content["serves"] = list(serves)
    return m.Message(SNAPSHOT_XID, True, lsn, SNAPSHOT_PREFIX, json.dumps(content, sort_keys=True).encode())


def snapshot_range(content: bytes | str) -> KeyRange | None:
    """The key range a snapshot message names (``None``: the whole table)."""
    body = json.loads(content)
    return KeyRange.from_json(body["range"]) if body.get("range") is not None else None


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
    The lander writes the same sequence, chunk by chunk, from COPY BINARY rows."""
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
