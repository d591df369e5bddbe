"""cdc_apply's snapshot transactions, written in pgoutput messages (docs/SNAPSHOTS.md).

A snapshot of one table, consistent with LSN ``C``, is a streamed transaction with xid
:data:`SNAPSHOT_XID` that PostgreSQL never gives a transaction: a first block with a
``cdc_apply.snapshot`` message, the Relation, a Truncate and the first rows; one block per further
chunk of rows; a Stream Commit at ``C`` — or a Stream Abort when the copy is abandoned. The apply
job needs nothing else: the Truncate empties the table at that point of the commit order, the
Inserts refill it, and the message's LSN makes later transactions committed below ``C`` skip the
table (:func:`cdc_apply.planning.plan.snapshot_skips`).
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator

from cdc_apply.pgoutput import messages as m

SNAPSHOT_XID = 2  # FrozenTransactionId: never a transaction's xid
SNAPSHOT_PREFIX = "cdc_apply.snapshot"


def snapshot_marker(relation: m.Relation, lsn: int, chunks: int | None = None) -> m.Message:
    """The message that opens a snapshot: which relation, consistent with which LSN."""
    content = {"relation_id": relation.relation_id, "namespace": relation.namespace, "name": relation.name,
               "lsn": lsn, "lsn_text": m.format_lsn(lsn)}
    if chunks is not None:
        content["chunks"] = chunks
    return m.Message(SNAPSHOT_XID, True, lsn, SNAPSHOT_PREFIX, json.dumps(content, sort_keys=True).encode())


def snapshot_head(relation: m.Relation, lsn: int, chunks: int | None = None) -> tuple[m.PgOutputMessage, ...]:
    """The first block's opening: Stream Start, the marker, the Relation and the Truncate."""
    return (m.StreamStart(SNAPSHOT_XID, True), snapshot_marker(relation, lsn, chunks),
            m.Relation(SNAPSHOT_XID, relation.relation_id, relation.namespace, relation.name,
                       relation.replica_identity, relation.columns),
            m.Truncate(SNAPSHOT_XID, 0, (relation.relation_id,)))


def snapshot_messages(relation: m.Relation, lsn: int, commit_ts: int,
                      chunks: Iterable[Iterable[m.TupleData]]) -> Iterator[m.PgOutputMessage]:
    """Every message of a whole snapshot (``commit_ts`` in PostgreSQL microseconds); one block per chunk.
    The lander writes the same sequence, chunk by chunk, from COPY BINARY rows."""
    first = True
    for rows in chunks:
        yield from snapshot_head(relation, lsn) if first else (m.StreamStart(SNAPSHOT_XID, False),)
        first = False
        for row in rows:
            yield m.Insert(SNAPSHOT_XID, relation.relation_id, row)
        yield m.StreamStop()
    if first:  # an empty table: the head alone still empties silver
        yield from snapshot_head(relation, lsn)
        yield m.StreamStop()
    yield m.StreamCommit(SNAPSHOT_XID, 0, lsn, lsn, commit_ts)


def snapshot_abort() -> m.StreamAbort:
    """Closes an abandoned snapshot: the apply drops every block of it."""
    return m.StreamAbort(SNAPSHOT_XID, SNAPSHOT_XID)
