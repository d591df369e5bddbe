"""Encode GaussDB records as the server sends them (binary decode-style ``'b'``), for tests.

The inverse of :func:`~cdc_apply.gaussdb.decoder.decode_gaussdb_payload`,
written from the specification (layouts in :mod:`cdc_apply.gaussdb.decoder`):

* ``encode_gaussdb([record], batch=False)`` — one decoding result, as sent
  without ``sending-batch``: the record, then ``'F'``;
* ``encode_gaussdb(records, batch=True)`` — one batch: records separated by
  ``'P'``, ended by ``'F'`` (``end="F"``, as openGauss does) or by ``'P'`` and
  a 0 length (``end="0"``, the specification's rule 1); an empty batch is a
  lone 0 length;
* ``encode_gaussdb([heartbeat], ...)`` — a heartbeat, always alone.

Record fields are written as they are, so ``decode(encode(records)) == records``
for every record the decoder accepts (timestamps must be text that
:func:`~cdc_apply.gaussdb.timestamps.parse_timestamp` reads).
"""

from __future__ import annotations

from typing import Sequence

from cdc_apply.gaussdb.records import Begin, Commit, Delete, GTuple, Heartbeat, Insert, Record, Update
from cdc_apply.pgoutput.wire import INT64, UINT16, UINT32, UINT64

_NULL = UINT32.pack(0xFFFFFFFF)


def _short(text: str, what: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0xFFFF:
        raise ValueError(f"{what} is {len(data)} bytes; the format allows 65535")
    return UINT16.pack(len(data)) + data


def _long(text: str) -> bytes:
    data = text.encode("utf-8")
    return UINT32.pack(len(data)) + data


def encode_tuple(columns: GTuple) -> bytes:
    if len(columns) > 0xFFFF:
        raise ValueError(f"a tuple holds at most 65535 columns, not {len(columns)}")
    parts = [UINT16.pack(len(columns))]
    for name, type_oid, value in columns:
        parts += (_short(name, "a column name"), UINT32.pack(type_oid), _NULL if value is None else _long(value))
    return b"".join(parts)


def encode_body(record: Record) -> bytes:
    """A record without its length: LSN, kind and body."""
    head = UINT64.pack(record.lsn) + record.KIND.encode("ascii")  # type: ignore[union-attr]
    parts = [head]
    if isinstance(record, Begin):
        parts += (UINT64.pack(record.csn), UINT64.pack(record.first_lsn))
        if record.xid is not None:
            parts += (b"X", UINT64.pack(record.xid))
        if record.commit_ts is not None:
            parts += (b"T", _long(record.commit_ts))
        if record.origin_id is not None:  # openGauss's place for it: right after 'T'
            parts += (b"O", UINT32.pack(record.origin_id))
        if record.user_name is not None:
            parts += (b"N", _long(record.user_name))
    elif isinstance(record, Commit):
        if record.xid is not None:
            parts += (b"X", UINT64.pack(record.xid))
        if record.commit_ts is not None:
            parts += (b"T", _long(record.commit_ts))
    elif isinstance(record, (Insert, Update, Delete)):
        parts += (_short(record.schema, "a schema name"), _short(record.table, "a table name"))
        new = None if isinstance(record, Delete) else record.new
        old = None if isinstance(record, Insert) else record.old
        if new is not None:
            parts += (b"N", encode_tuple(new))
        if old is not None:
            parts += (b"O", encode_tuple(old))
    else:
        raise TypeError(f"not a GaussDB record with an LSN header: {type(record).__name__}")
    return b"".join(parts)


def encode_record(record: Record) -> bytes:
    """One record with its Uint32 length, without a separator."""
    body = encode_body(record)
    return UINT32.pack(len(body)) + body


def encode_heartbeat(beat: Heartbeat) -> bytes:
    return b"h" + UINT64.pack(beat.sent_position) + UINT64.pack(beat.flush_position) + INT64.pack(beat.timestamp) + b"F"


def encode_gaussdb(records: Sequence[Record], batch: bool, end: str = "F") -> bytes:
    """One payload: a single decoding result (``batch=False``), a batch, or a heartbeat."""
    if end not in ("F", "0"):
        raise ValueError(f"a batch ends with 'F' or a 0 length ('0'), not {end!r}")
    if any(isinstance(r, Heartbeat) for r in records):
        if len(records) != 1:
            raise ValueError("a heartbeat is a payload of its own")
        return encode_heartbeat(records[0])  # type: ignore[arg-type]
    if not batch:
        if len(records) != 1:
            raise ValueError(f"without sending-batch a payload holds one record, not {len(records)}")
        return encode_record(records[0]) + b"F"
    if not records:
        return UINT32.pack(0)
    joined = b"P".join(encode_record(r) for r in records)
    return joined + (b"F" if end == "F" else b"P" + UINT32.pack(0))
