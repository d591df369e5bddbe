"""Decode one GaussDB bronze payload (binary decode-style ``'b'``) into records.

A payload is what the server sends as one message, with or without
``sending-batch``. Big-endian throughout. Layouts read here::

    payload    := heartbeat | batch
    heartbeat  := 'h' Uint64 sent_position, Uint64 flush_position, Int64 timestamp, 'F'
    batch      := Uint32 0                                  (an empty batch)
                | record { 'P' record } ( 'F' | 'P' Uint32 0 )
    record     := Uint32 length, Uint64 LSN, Byte kind, body  (length counts LSN, kind and body,
                                                               not itself and not the separator)
    Begin  'B' := Uint64 CSN, Uint64 first_lsn, ['X' Uint64 xid], ['T' Uint32 n, n bytes timestamp],
                  then in either order ['O' Uint32 origin id] and ['N' Uint32 n, n bytes user]
    Commit 'C' := ['X' Uint64 xid], ['T' Uint32 n, n bytes timestamp]
    Insert 'I' | Update 'U' | Delete 'D'
               := Uint16 n, n bytes schema, Uint16 n, n bytes table, ['N' tuple], ['O' tuple]
    tuple      := Uint16 count, count x (Uint16 n, n bytes name, Uint32 type OID,
                                        Uint32 n, n bytes value | 0xFFFFFFFF for NULL)

Without ``sending-batch`` every payload is one record followed by ``'F'``;
with it, records are separated by ``'P'`` and the batch ends with ``'F'``
(openGauss) or a 0 length (the specification's rule 1); both are accepted.
A batch ends where the payload ends: bytes after ``'F'`` or the 0 length are
rejected. The heartbeat has no length or LSN header, so it is told apart by
its first byte: a record length starting with 0x68 would need a record of
1.7 GB. Optional parts must come in the order above; an Insert with ``'O'`` or
a Delete with ``'N'`` is rejected. Names, values, user names and timestamps
must be UTF-8; timestamps must parse (:func:`~cdc_apply.gaussdb.timestamps.parse_timestamp`).

Every read is bounds-checked through :class:`~cdc_apply.pgoutput.wire.Reader`
and every loop is bounded by a length checked against the bytes left, so
malformed input ends in a :class:`~cdc_apply.errors.DecodeError` naming the
byte offset within the payload, never in a hang.
"""

from __future__ import annotations

from typing import TypeGuard

from cdc_apply.errors import DecodeError
from cdc_apply.gaussdb.records import (
    RECORD_NAMES,
    Begin,
    Column,
    Commit,
    Delete,
    DmlKind,
    GTuple,
    Heartbeat,
    Insert,
    Record,
    RecordKind,
    Update,
)
from cdc_apply.gaussdb.timestamps import parse_timestamp
from cdc_apply.pgoutput.wire import Reader

NULL_LENGTH = 0xFFFFFFFF
_MIN_RECORD = 9  # LSN and kind byte
_MIN_COLUMN = 10  # name length, type OID, value length
HEARTBEAT_SIZE = 26


def _u16(r: Reader) -> int:
    return r.i16() & 0xFFFF


def _peek(r: Reader) -> str | None:
    return chr(r.buf[r.pos]) if r.pos < r.end else None


def _text(r: Reader, n: int, what: str) -> str:
    start = r.pos
    raw = r.raw(n)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise r.fail(f"{what} is not valid UTF-8", offset=start + exc.start) from None


def _timestamp(r: Reader) -> str:
    n = r.u32()
    start = r.pos
    text = _text(r, n, "commit timestamp")
    try:
        parse_timestamp(text)
    except ValueError as exc:
        raise r.fail(f"commit timestamp: {exc}", offset=start) from None
    return text


def read_tuple(r: Reader) -> GTuple:
    """tuple: Uint16 count, then per column Uint16 name length, name, Uint32 type OID, Uint32 value length, value."""
    count_at = r.pos
    count = _u16(r)
    if count * _MIN_COLUMN > r.remaining():
        raise r.fail(f"{count} columns cannot fit in the {r.remaining()} bytes left", offset=count_at)
    columns: list[Column] = []
    for index in range(count):
        name = _text(r, _u16(r), f"name of column {index}")
        type_oid = r.u32()
        length = r.u32()
        value = None if length == NULL_LENGTH else _text(r, length, f"value of column {index} ({name})")
        columns.append((name, type_oid, value))
    return tuple(columns)


def _xid_and_timestamp(r: Reader) -> tuple[int | None, str | None]:
    """The optional 'X' Uint64 xid, then the optional 'T' timestamp, that Begin and Commit both carry."""
    xid = commit_ts = None
    if _peek(r) == "X":
        r.pos += 1
        xid = r.u64()
    if _peek(r) == "T":
        r.pos += 1
        commit_ts = _timestamp(r)
    return xid, commit_ts


def _begin(r: Reader, lsn: int) -> Begin:
    """Begin: Uint64 CSN, Uint64 first_lsn, optional 'X' xid, 'T' timestamp, then 'O' origin id and 'N' user name.

    openGauss writes 'X', 'T', 'O' (``ParallelOutputBegin``); GaussDB's page lists 'T', 'N'. Where a
    server sending both 'O' and 'N' puts them is written down nowhere, so after 'T' they are read in
    either order, each at most once.
    """
    csn = r.u64()
    first_lsn = r.u64()
    xid, commit_ts = _xid_and_timestamp(r)
    user = origin_id = None
    for _ in range(2):
        tag = _peek(r)
        if tag == "O" and origin_id is None:
            r.pos += 1
            origin_id = r.u32()
        elif tag == "N" and user is None:
            r.pos += 1
            user = _text(r, r.u32(), "user name")
    if r.remaining():
        raise r.fail(f"unexpected byte {_peek(r)!r} after the Begin fields "
                     "(optional parts are 'X', 'T', then 'O' and 'N' once each)")
    return Begin(lsn, csn, first_lsn, commit_ts, user, xid, origin_id)


def _commit(r: Reader, lsn: int) -> Commit:
    """Commit: optional 'X' Uint64 xid, optional 'T' timestamp."""
    xid, commit_ts = _xid_and_timestamp(r)
    if r.remaining():
        raise r.fail(f"unexpected byte {_peek(r)!r} after the Commit fields (optional parts are 'X', then 'T')")
    return Commit(lsn, xid, commit_ts)


def _dml(r: Reader, lsn: int, kind: DmlKind) -> Insert | Update | Delete:
    """Insert/Update/Delete: Uint16-prefixed schema and table, optional 'N' new tuple, optional 'O' old tuple."""
    schema = _text(r, _u16(r), "schema name")
    table = _text(r, _u16(r), "table name")
    new = old = None
    new_at = old_at = None
    if _peek(r) == "N":
        new_at = r.pos
        r.pos += 1
        new = read_tuple(r)
    if _peek(r) == "O":
        old_at = r.pos
        r.pos += 1
        old = read_tuple(r)
    if r.remaining():
        raise r.fail(f"unexpected byte {_peek(r)!r} after the {RECORD_NAMES[kind]} fields "
                     "(optional parts are 'N', then 'O')")
    if kind == "I":
        if old_at is not None:
            raise r.fail("an Insert carries no old tuple ('O')", offset=old_at)
        return Insert(lsn, schema, table, new)
    if kind == "D":
        if new_at is not None:
            raise r.fail("a Delete carries no new tuple ('N')", offset=new_at)
        return Delete(lsn, schema, table, old)
    return Update(lsn, schema, table, new, old)


def _is_record_kind(kind: str) -> TypeGuard[RecordKind]:
    # Narrows the byte read to the kinds dispatched on: past Begin and Commit, a DML kind for _dml.
    return kind in "BCIUD"


def decode_record(buf: bytes, start: int, end: int) -> Record:
    """One record's LSN, kind and body from ``buf[start:end]`` (offsets stay payload-absolute)."""
    r = Reader(buf, "GaussDB record", start)
    r.end = end
    lsn = r.u64()
    kind_at = r.pos
    kind = r.byte()
    if not _is_record_kind(kind):
        raise r.fail(f"unknown record kind {kind!r}", offset=kind_at)
    r.what = f"GaussDB {RECORD_NAMES[kind]}"
    if kind == "B":
        return _begin(r, lsn)
    if kind == "C":
        return _commit(r, lsn)
    return _dml(r, lsn, kind)


def decode_heartbeat(buf: bytes) -> Heartbeat:
    """Heartbeat: 'h', Uint64 sent position, Uint64 flush position, Int64 timestamp, 'F'."""
    r = Reader(buf, "GaussDB Heartbeat")
    r.pos = 1
    beat = Heartbeat(r.u64(), r.u64(), r.i64())
    end_at = r.pos
    if r.byte() != "F":
        raise r.fail(f"a heartbeat ends with 'F', not {chr(buf[end_at])!r}", offset=end_at)
    r.finish()
    return beat


def decode_gaussdb_payload(payload: bytes) -> list[Record]:
    """The records of one bronze payload: one decoding result, one batch, or one heartbeat."""
    buf = bytes(payload)
    if not buf:
        raise DecodeError("empty payload", message_type="GaussDB payload", offset=0)
    if buf[0] == 0x68:  # 'h'
        return [decode_heartbeat(buf)]
    r = Reader(buf, "GaussDB batch")
    records: list[Record] = []
    while True:
        at = r.pos
        if not r.remaining():
            raise r.fail("payload ends after 'P': expected another record or a 0 length")
        length = r.u32()
        if length == 0:
            r.finish()
            return records
        if length < _MIN_RECORD:
            raise r.fail(f"record length {length} is shorter than an LSN and a kind byte", offset=at)
        if length > r.remaining():
            raise r.fail(f"truncated: record length {length}, {r.remaining()} bytes left", offset=at)
        end = r.pos + length
        records.append(decode_record(buf, r.pos, end))
        r.pos = end
        if not r.remaining():
            raise r.fail("payload ends after a record without a separator 'P' or 'F'")
        separator = r.byte()
        if separator == "F":
            r.finish()
            return records
        if separator != "P":
            raise r.fail(f"expected a separator 'P' or 'F' after the record, got {separator!r}", offset=end)
