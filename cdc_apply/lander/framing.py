"""The few fields of pgoutput messages the lander needs, read straight from the bytes.

The lander never decodes changes; it only needs the framing (which transaction
or stream block a message belongs to) and the positions that identify a
transaction when the walsender sends it again after a reconnect. Offsets follow
PostgreSQL's "Logical Replication Message Formats" (protocol 1-4).
"""

from __future__ import annotations

import hashlib
import re

from cdc_apply.errors import LandError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.pgoutput.wire import UINT32, UINT64


def _kind(cls) -> bytes:
    return cls.TYPE.encode()


# The type bytes as the lander compares them (payload[:1]), from the one table in pgoutput.messages.
BEGIN, COMMIT, ORIGIN, RELATION, TYPE = map(_kind, (m.Begin, m.Commit, m.Origin, m.Relation, m.Type))
MESSAGE = _kind(m.Message)
BEGIN_PREPARE, PREPARE, COMMIT_PREPARED, ROLLBACK_PREPARED = map(
    _kind, (m.BeginPrepare, m.Prepare, m.CommitPrepared, m.RollbackPrepared))
STREAM_START, STREAM_STOP, STREAM_COMMIT, STREAM_ABORT, STREAM_PREPARE = map(
    _kind, (m.StreamStart, m.StreamStop, m.StreamCommit, m.StreamAbort, m.StreamPrepare))

# Row changes: inside a transaction being landed they only count and extend its digest (the fast path of
# Sequencer.feed_many).
CHANGES = frozenset(map(_kind, (m.Insert, m.Update, m.Delete)))
# Runs of row changes among the type bytes of a read (wire.first_bytes): each run is numbered in one step.
CHANGE_RUNS = re.compile(b"[" + b"".join(sorted(CHANGES)) + b"]+")

# Relation and Type messages are resent whenever the walsender's cache says so (a new session,
# any invalidation), so their number and place differ between two sendings of the same
# transaction. They are never compared when a re-sent transaction is matched against bronze.
SCHEMA_KINDS = frozenset((RELATION, TYPE))

# pg_logical_emit_message(transactional => true) sets bit 0 of the flags byte.
_MESSAGE_TRANSACTIONAL = 1


# Callers check lengths first (check_length: every field read below lies in a message's fixed part).
def _u32(payload: bytes, offset: int) -> int:
    return UINT32.unpack_from(payload, offset)[0]


def _u64(payload: bytes, offset: int) -> int:
    return UINT64.unpack_from(payload, offset)[0]


def _cstring(payload: bytes, offset: int) -> str:
    end = payload.find(b"\0", offset)
    return payload[offset:end if end >= 0 else len(payload)].decode("utf-8", "replace")


_MIN_LENGTH = {BEGIN: 21, BEGIN_PREPARE: 30, COMMIT: 26, PREPARE: 31, COMMIT_PREPARED: 31,
               ROLLBACK_PREPARED: 39, STREAM_START: 6, STREAM_COMMIT: 30, STREAM_ABORT: 9,
               STREAM_PREPARE: 31, MESSAGE: 2}


def check_length(kind: bytes, payload: bytes, lsn: int) -> None:
    """Raise :class:`LandError` when a framing message is shorter than its fixed part."""
    need = _MIN_LENGTH.get(kind, 1)
    if len(payload) < need:
        raise LandError(f"the server sent a {kind.decode()!r} message of {len(payload)} bytes "
                        f"(at least {need} expected)", lsn=format_lsn(lsn))


def begin(payload: bytes) -> tuple[int, int]:
    """Begin: ``(final_lsn, xid)``; final_lsn is where the commit record starts."""
    return _u64(payload, 1), _u32(payload, 17)


def begin_prepare(payload: bytes) -> tuple[int, int, int, str]:
    """Begin Prepare: ``(prepare_lsn, end_lsn, xid, gid)``."""
    return _u64(payload, 1), _u64(payload, 9), _u32(payload, 25), _cstring(payload, 29)


def commit_end(payload: bytes) -> int:
    """Commit: the end LSN of the commit record."""
    return _u64(payload, 10)


def prepare(payload: bytes) -> tuple[int, str]:
    """Prepare, Stream Prepare and Commit Prepared: ``(end_lsn, gid)``."""
    return _u64(payload, 10), _cstring(payload, 30)


def rollback_prepared(payload: bytes) -> tuple[int, str]:
    """Rollback Prepared: ``(rollback_end_lsn, gid)``."""
    return _u64(payload, 10), _cstring(payload, 38)


def prepared_xid(payload: bytes) -> int:
    """The xid of Prepare, Stream Prepare and Commit Prepared."""
    return _u32(payload, 26)


def stream_start(payload: bytes) -> tuple[int, bool]:
    """Stream Start: ``(xid, first_segment)``."""
    return _u32(payload, 1), payload[5] == 1


def stream_commit(payload: bytes) -> tuple[int, int]:
    """Stream Commit: ``(xid, end_lsn)``."""
    return _u32(payload, 1), _u64(payload, 14)


def stream_abort(payload: bytes) -> tuple[int, int]:
    """Stream Abort: ``(xid, subxid)``; a top-level abort has ``xid == subxid``."""
    return _u32(payload, 1), _u32(payload, 5)


def message_is_transactional(payload: bytes) -> bool:
    """Whether a Message outside any stream block is transactional (flags bit 0)."""
    return bool(payload[1] & _MESSAGE_TRANSACTIONAL)


def synthetic_stream_abort(xid: int) -> bytes:
    """A Stream Abort of a whole streamed transaction (the 9-byte form of protocol 2-3)."""
    return STREAM_ABORT + xid.to_bytes(4, "big") + xid.to_bytes(4, "big")


def continued_stream_start(xid: int) -> bytes:
    """A Stream Start for a block that continues a transaction bronze already holds in part."""
    return STREAM_START + xid.to_bytes(4, "big") + b"\0"


def chain(digest: bytes, payload: bytes) -> bytes:
    """Extend a running digest by one message (order-sensitive; 16 bytes)."""
    h = hashlib.blake2b(digest, digest_size=16)
    h.update(len(payload).to_bytes(4, "big"))
    h.update(payload)
    return h.digest()


def decision_lsn(payload: bytes) -> int | None:
    """Where a message outside stream blocks decides something in commit order: a Begin's final LSN (its
    commit), a Stream Commit's or a Commit Prepared's commit LSN, a non-transactional Message's LSN;
    ``None`` for every other message (lengths checked by :func:`check_length` first)."""
    kind = payload[:1]
    if kind == BEGIN:
        return _u64(payload, 1)
    if kind == STREAM_COMMIT:
        return _u64(payload, 6)
    if kind == COMMIT_PREPARED:
        return _u64(payload, 2)
    if kind == MESSAGE and not message_is_transactional(payload) and len(payload) >= 10:
        return _u64(payload, 2)
    return None
