"""Encode messages back to pgoutput bytes, so users can build streams for their own tests.

``encode(message)`` is the inverse of :func:`~cdc_apply.pgoutput.decoder.decode_message`:
``decode_message(encode(m), in_stream=m_is_streamed) == m``. Whether an Xid is
written for Relation, Type, DML and Message follows the message's ``xid``
field (set inside stream blocks, ``None`` outside), as PostgreSQL does.

Tuple items: ``None`` -> 'n', :data:`UNCHANGED_TOAST` -> 'u', ``str`` -> 't'
(UTF-8), ``bytes`` -> 'b'.
"""

from __future__ import annotations

from functools import singledispatch

from cdc_apply.pgoutput.messages import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Prepare,
    Relation,
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
from cdc_apply.pgoutput.wire import INT32, UINT32, Writer

_N, _U, _T, _B = b"n", b"u", b"t", b"b"


def encode_tuple_data(values: TupleData) -> bytes:
    """TupleData bytes for a tuple of column values."""
    parts = [len(values).to_bytes(2, "big", signed=True)]
    for value in values:
        if value is None:
            parts.append(_N)
        elif value is UNCHANGED_TOAST:
            parts.append(_U)
        elif isinstance(value, str):
            data = value.encode("utf-8")
            parts += (_T, INT32.pack(len(data)), data)
        elif isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            parts += (_B, INT32.pack(len(data)), data)
        else:
            raise TypeError(f"tuple values are None, UNCHANGED_TOAST, str or bytes, not {type(value).__name__}")
    return b"".join(parts)


def _with_xid(type_byte: str, xid: int | None) -> Writer:
    w = Writer(type_byte)
    if xid is not None:
        w.u32(xid)
    return w


@singledispatch
def encode(message: PgOutputMessage) -> bytes:
    """The pgoutput bytes of one message, starting with its type byte."""
    raise TypeError(f"not a pgoutput message: {type(message).__name__}")


@encode.register
def _(m: Begin) -> bytes:
    return Writer("B").u64(m.final_lsn).i64(m.commit_ts).u32(m.xid).getvalue()


@encode.register
def _(m: Message) -> bytes:
    w = _with_xid("M", m.xid).u8(1 if m.transactional else 0).u64(m.lsn).cstring(m.prefix)
    return w.i32(len(m.content)).raw(m.content).getvalue()


@encode.register
def _(m: Commit) -> bytes:
    return Writer("C").u8(m.flags).u64(m.commit_lsn).u64(m.end_lsn).i64(m.commit_ts).getvalue()


@encode.register
def _(m: Origin) -> bytes:
    return Writer("O").u64(m.commit_lsn).cstring(m.name).getvalue()


@encode.register
def _(m: Relation) -> bytes:
    w = _with_xid("R", m.xid).u32(m.relation_id).cstring(m.namespace).cstring(m.name)
    w.byte(m.replica_identity).i16(len(m.columns))
    for c in m.columns:
        w.u8(c.flags).cstring(c.name).u32(c.type_oid).i32(c.type_modifier)
    return w.getvalue()


@encode.register
def _(m: Type) -> bytes:
    return _with_xid("Y", m.xid).u32(m.type_oid).cstring(m.namespace).cstring(m.name).getvalue()


@encode.register
def _(m: Insert) -> bytes:
    return _with_xid("I", m.xid).u32(m.relation_id).byte("N").raw(encode_tuple_data(m.new)).getvalue()


@encode.register
def _(m: Update) -> bytes:
    if m.key is not None and m.old is not None:
        raise ValueError("an Update carries a 'K' or an 'O' tuple, never both")
    w = _with_xid("U", m.xid).u32(m.relation_id)
    if m.key is not None:
        w.byte("K").raw(encode_tuple_data(m.key))
    elif m.old is not None:
        w.byte("O").raw(encode_tuple_data(m.old))
    return w.byte("N").raw(encode_tuple_data(m.new)).getvalue()


@encode.register
def _(m: Delete) -> bytes:
    if (m.key is None) == (m.old is None):
        raise ValueError("a Delete carries exactly one of a 'K' or an 'O' tuple")
    w = _with_xid("D", m.xid).u32(m.relation_id)
    if m.key is not None:
        return w.byte("K").raw(encode_tuple_data(m.key)).getvalue()
    return w.byte("O").raw(encode_tuple_data(m.old)).getvalue()  # type: ignore[arg-type]


@encode.register
def _(m: Truncate) -> bytes:
    w = _with_xid("T", m.xid).i32(len(m.relation_ids)).u8(m.options)
    w.raw(b"".join(UINT32.pack(oid) for oid in m.relation_ids))
    return w.getvalue()


@encode.register
def _(m: StreamStart) -> bytes:
    return Writer("S").u32(m.xid).u8(1 if m.first_segment else 0).getvalue()


@encode.register
def _(m: StreamStop) -> bytes:
    return b"E"


@encode.register
def _(m: StreamCommit) -> bytes:
    return Writer("c").u32(m.xid).u8(m.flags).u64(m.commit_lsn).u64(m.end_lsn).i64(m.commit_ts).getvalue()


@encode.register
def _(m: StreamAbort) -> bytes:
    w = Writer("A").u32(m.xid).u32(m.subxid)
    if (m.abort_lsn is None) != (m.abort_ts is None):
        raise ValueError("abort_lsn and abort_ts come together (protocol 4, streaming = parallel)")
    if m.abort_lsn is not None:
        w.u64(m.abort_lsn).i64(m.abort_ts)  # type: ignore[arg-type]
    return w.getvalue()


@encode.register
def _(m: BeginPrepare) -> bytes:
    return Writer("b").u64(m.prepare_lsn).u64(m.end_lsn).i64(m.prepare_ts).u32(m.xid).cstring(m.gid).getvalue()


@encode.register
def _(m: Prepare) -> bytes:
    w = Writer("P").u8(m.flags).u64(m.prepare_lsn).u64(m.end_lsn).i64(m.prepare_ts)
    return w.u32(m.xid).cstring(m.gid).getvalue()


@encode.register
def _(m: CommitPrepared) -> bytes:
    w = Writer("K").u8(m.flags).u64(m.commit_lsn).u64(m.end_lsn).i64(m.commit_ts)
    return w.u32(m.xid).cstring(m.gid).getvalue()


@encode.register
def _(m: RollbackPrepared) -> bytes:
    w = Writer("r").u8(m.flags).u64(m.prepare_end_lsn).u64(m.rollback_end_lsn)
    return w.i64(m.prepare_ts).i64(m.rollback_ts).u32(m.xid).cstring(m.gid).getvalue()


@encode.register
def _(m: StreamPrepare) -> bytes:
    w = Writer("p").u8(m.flags).u64(m.prepare_lsn).u64(m.end_lsn).i64(m.prepare_ts)
    return w.u32(m.xid).cstring(m.gid).getvalue()
