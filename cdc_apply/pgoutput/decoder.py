"""Decode one pgoutput message into a :mod:`~cdc_apply.pgoutput.messages` object.

This is the reference decoder: every message type of protocol versions 1-4,
strict about lengths, unknown type bytes and unknown tuple kinds. The bulk path
(:mod:`cdc_apply.pgoutput.columnar`) decodes DML column-at-a-time and falls
back to this module to explain any message it cannot take.

Whether DML, Relation, Type and Message carry an Xid is not in the message
itself: it depends on being inside a Stream Start ... Stream Stop block.
:class:`StreamDecoder` tracks that per source, in stream order.
"""

from __future__ import annotations

from typing import Callable

from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput.messages import (
    MESSAGE_NAMES,
    REPLICA_IDENTITIES,
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    ColumnValue,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Prepare,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
)
from cdc_apply.pgoutput.wire import BEGIN_FIELDS, COMMIT_FIELDS, Reader


def read_tuple_data(r: Reader) -> TupleData:
    """TupleData: Int16 column count, then per column 'n' | 'u' | 't' Int32 Byten | 'b' Int32 Byten."""
    count = r.i16()
    if count < 0:
        raise r.fail(f"negative column count {count}", offset=r.pos - 2)
    values: list[ColumnValue] = []
    append = values.append
    for index in range(count):
        kind_at = r.pos
        kind = r.byte()
        if kind == "t":
            start = r.pos
            raw = r.raw(r.i32())
            try:
                append(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise r.fail(f"text value of column {index} is not valid UTF-8", offset=start + 4 + exc.start) from None
        elif kind == "n":
            append(None)
        elif kind == "u":
            append(UNCHANGED_TOAST)
        elif kind == "b":
            append(r.raw(r.i32()))
        else:
            raise r.fail(f"unknown tuple column kind {kind!r} for column {index}", offset=kind_at)
    return tuple(values)


def _xid(r: Reader, in_stream: bool) -> int | None:
    return r.u32() if in_stream else None


def decode_begin(r: Reader, in_stream: bool) -> Begin:
    """Begin: Int64 final LSN, Int64 commit timestamp, Int32 xid."""
    return Begin(*r.fields(BEGIN_FIELDS))


def decode_logical_message(r: Reader, in_stream: bool) -> Message:
    """Message: [Int32 xid], Int8 flags (1 = transactional), Int64 LSN, String prefix, Int32 length, Byten content."""
    xid = _xid(r, in_stream)
    flags_at = r.pos
    flags = r.u8()
    if flags not in (0, 1):
        raise r.fail(f"unknown logical message flags {flags}", offset=flags_at)
    lsn = r.u64()
    prefix = r.cstring()
    content = r.raw(r.i32())
    return Message(xid, bool(flags), lsn, prefix, content)


def decode_commit(r: Reader, in_stream: bool) -> Commit:
    """Commit: Int8 flags, Int64 commit LSN, Int64 end LSN, Int64 commit timestamp."""
    return Commit(*r.fields(COMMIT_FIELDS))


def decode_origin(r: Reader, in_stream: bool) -> Origin:
    """Origin: Int64 commit LSN on the origin, String origin name."""
    return Origin(r.u64(), r.cstring())


def decode_relation(r: Reader, in_stream: bool) -> Relation:
    """Relation: [Int32 xid], Int32 oid, String namespace, String name, Int8 replica identity,
    Int16 column count, then per column Int8 flags, String name, Int32 type oid, Int32 typmod."""
    xid = _xid(r, in_stream)
    relation_id = r.u32()
    namespace = r.cstring()
    name = r.cstring()
    ident_at = r.pos
    identity = r.byte()
    if identity not in REPLICA_IDENTITIES:
        raise r.fail(f"unknown replica identity {identity!r}", offset=ident_at)
    count = r.i16()
    if count < 0:
        raise r.fail(f"negative column count {count}", offset=r.pos - 2)
    columns = tuple(RelationColumn(r.u8(), r.cstring(), r.u32(), r.i32()) for _ in range(count))
    return Relation(xid, relation_id, namespace, name, identity, columns)


def decode_type(r: Reader, in_stream: bool) -> Type:
    """Type: [Int32 xid], Int32 type oid, String namespace, String name."""
    return Type(_xid(r, in_stream), r.u32(), r.cstring(), r.cstring())


def decode_insert(r: Reader, in_stream: bool) -> Insert:
    """Insert: [Int32 xid], Int32 relation oid, 'N', TupleData."""
    xid = _xid(r, in_stream)
    relation_id = r.u32()
    marker_at = r.pos
    marker = r.byte()
    if marker != "N":
        raise r.fail(f"expected new tuple marker 'N', got {marker!r}", offset=marker_at)
    return Insert(xid, relation_id, read_tuple_data(r))


def decode_update(r: Reader, in_stream: bool) -> Update:
    """Update: [Int32 xid], Int32 relation oid, optional 'K' or 'O' TupleData, 'N' TupleData."""
    xid = _xid(r, in_stream)
    relation_id = r.u32()
    key = old = None
    marker_at = r.pos
    marker = r.byte()
    if marker == "K":
        key = read_tuple_data(r)
    elif marker == "O":
        old = read_tuple_data(r)
    if marker in ("K", "O"):
        marker_at = r.pos
        marker = r.byte()
    if marker != "N":
        raise r.fail(f"expected tuple marker 'K', 'O' or 'N', got {marker!r}", offset=marker_at)
    return Update(xid, relation_id, key, old, read_tuple_data(r))


def decode_delete(r: Reader, in_stream: bool) -> Delete:
    """Delete: [Int32 xid], Int32 relation oid, 'K' or 'O', TupleData."""
    xid = _xid(r, in_stream)
    relation_id = r.u32()
    marker_at = r.pos
    marker = r.byte()
    if marker == "K":
        return Delete(xid, relation_id, read_tuple_data(r), None)
    if marker == "O":
        return Delete(xid, relation_id, None, read_tuple_data(r))
    raise r.fail(f"expected tuple marker 'K' or 'O', got {marker!r}", offset=marker_at)


def decode_truncate(r: Reader, in_stream: bool) -> Truncate:
    """Truncate: [Int32 xid], Int32 relation count, Int8 options (1 CASCADE, 2 RESTART IDENTITY), Int32 oid each."""
    xid = _xid(r, in_stream)
    count_at = r.pos
    count = r.i32()
    if count < 0 or count * 4 + 1 > r.remaining():
        raise r.fail(f"relation count {count} does not fit the message", offset=count_at)
    options = r.u8()
    return Truncate(xid, options, tuple(r.u32() for _ in range(count)))


def decode_stream_start(r: Reader, in_stream: bool) -> StreamStart:
    """Stream Start: Int32 xid, Int8 first segment (1 or 0)."""
    xid = r.u32()
    first_at = r.pos
    first = r.u8()
    if first not in (0, 1):
        raise r.fail(f"first-segment flag must be 0 or 1, got {first}", offset=first_at)
    return StreamStart(xid, bool(first))


def decode_stream_stop(r: Reader, in_stream: bool) -> StreamStop:
    """Stream Stop: no fields."""
    return StreamStop()


def decode_stream_commit(r: Reader, in_stream: bool) -> StreamCommit:
    """Stream Commit: Int32 xid, Int8 flags, Int64 commit LSN, Int64 end LSN, Int64 commit timestamp."""
    return StreamCommit(r.u32(), r.u8(), r.u64(), r.u64(), r.i64())


def decode_stream_abort(r: Reader, in_stream: bool) -> StreamAbort:
    """Stream Abort: Int32 xid, Int32 subxid, then (protocol 4, streaming = parallel) Int64 abort LSN,
    Int64 abort timestamp."""
    xid, subxid = r.u32(), r.u32()
    if r.remaining() == 0:
        return StreamAbort(xid, subxid)
    return StreamAbort(xid, subxid, r.u64(), r.i64())


def decode_begin_prepare(r: Reader, in_stream: bool) -> BeginPrepare:
    """Begin Prepare: Int64 prepare LSN, Int64 end LSN, Int64 prepare timestamp, Int32 xid, String gid."""
    return BeginPrepare(r.u64(), r.u64(), r.i64(), r.u32(), r.cstring())


def decode_prepare(r: Reader, in_stream: bool) -> Prepare:
    """Prepare: Int8 flags, Int64 prepare LSN, Int64 end LSN, Int64 prepare timestamp, Int32 xid, String gid."""
    return Prepare(r.u8(), r.u64(), r.u64(), r.i64(), r.u32(), r.cstring())


def decode_commit_prepared(r: Reader, in_stream: bool) -> CommitPrepared:
    """Commit Prepared: Int8 flags, Int64 commit LSN, Int64 end LSN, Int64 commit timestamp, Int32 xid, String gid."""
    return CommitPrepared(r.u8(), r.u64(), r.u64(), r.i64(), r.u32(), r.cstring())


def decode_rollback_prepared(r: Reader, in_stream: bool) -> RollbackPrepared:
    """Rollback Prepared: Int8 flags, Int64 prepare end LSN, Int64 rollback end LSN,
    Int64 prepare timestamp, Int64 rollback timestamp, Int32 xid, String gid."""
    return RollbackPrepared(r.u8(), r.u64(), r.u64(), r.i64(), r.i64(), r.u32(), r.cstring())


def decode_stream_prepare(r: Reader, in_stream: bool) -> StreamPrepare:
    """Stream Prepare: Int8 flags, Int64 prepare LSN, Int64 end LSN, Int64 prepare timestamp, Int32 xid, String gid."""
    return StreamPrepare(r.u8(), r.u64(), r.u64(), r.i64(), r.u32(), r.cstring())


_DECODERS: dict[str, Callable[[Reader, bool], PgOutputMessage]] = {
    "B": decode_begin, "M": decode_logical_message, "C": decode_commit, "O": decode_origin,
    "R": decode_relation, "Y": decode_type, "I": decode_insert, "U": decode_update,
    "D": decode_delete, "T": decode_truncate, "S": decode_stream_start, "E": decode_stream_stop,
    "c": decode_stream_commit, "A": decode_stream_abort, "b": decode_begin_prepare,
    "P": decode_prepare, "K": decode_commit_prepared, "r": decode_rollback_prepared,
    "p": decode_stream_prepare,
}


def decode_message(payload: bytes, in_stream: bool = False) -> PgOutputMessage:
    """Decode one message (its bytes start with the type byte).

    ``in_stream`` says whether the message sits inside a Stream Start ... Stream
    Stop block. Raises :class:`DecodeError` naming the message type and byte offset
    for a truncated or garbled message, an unknown type byte or tuple kind, or
    trailing bytes.
    """
    if not payload:
        raise DecodeError("empty message", offset=0)
    type_byte = chr(payload[0])
    decode = _DECODERS.get(type_byte)
    if decode is None:
        raise DecodeError(f"unknown message type {type_byte!r} (0x{payload[0]:02x})", offset=0)
    r = Reader(payload, MESSAGE_NAMES[type_byte], 1)
    message = decode(r, in_stream)
    r.finish()
    return message


class StreamDecoder:
    """Decodes one source's messages in stream order, tracking Stream Start/Stop blocks."""

    __slots__ = ("in_stream", "stream_xid")

    def __init__(self, in_stream: bool = False, stream_xid: int | None = None) -> None:
        self.in_stream = in_stream
        self.stream_xid = stream_xid

    def decode(self, payload: bytes) -> PgOutputMessage:
        message = decode_message(payload, self.in_stream)
        if isinstance(message, StreamStart):
            if self.in_stream:
                raise DecodeError("Stream Start inside an open stream block", message_type="StreamStart",
                                  open_xid=self.stream_xid)
            self.in_stream, self.stream_xid = True, message.xid
        elif isinstance(message, StreamStop):
            if not self.in_stream:
                raise DecodeError("Stream Stop outside a stream block", message_type="StreamStop")
            self.in_stream, self.stream_xid = False, None
        return message
