"""The records of GaussDB / openGauss parallel logical decoding, binary decode-style ``'b'``.

One dataclass per record kind, with the fields exactly as they travel (see
``docs/GAUSSDB.md`` for the layout): LSNs and CSNs are ints, names and values
are ``str``, commit timestamps are the *text* the server sent (for example
``2024-05-20 10:00:00.5+08``; :func:`~cdc_apply.gaussdb.timestamps.parse_timestamp`
turns it into microseconds since 2000-01-01 UTC).

A tuple is a tuple of :data:`Column` items ``(name, type_oid, value)`` in the
order the server sent them; ``value`` is ``None`` for SQL NULL. Column names are
as sent: openGauss sends them through ``quote_identifier``, so a name that
needs quoting arrives in double quotes (:func:`unquote_name` undoes that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

Column = tuple[str, int, Union[str, None]]  # (name as sent, type OID, text value or None for NULL)
GTuple = tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class Begin:
    """``B``: a transaction starts. ``lsn`` is its first LSN (the record header's LSN).

    The optional parts travel as ``'X'``, ``'T'``, then ``'O'`` and ``'N'``; openGauss writes
    ``X``/``T``/``O``, GaussDB's page lists ``T``/``N``.
    """

    lsn: int
    csn: int
    first_lsn: int
    commit_ts: str | None = None  # optional part 'T' (include-timestamp)
    user_name: str | None = None  # optional part 'N' (include-user)
    xid: int | None = None  # optional part 'X' (include-xids), the 64-bit top-level xid
    origin_id: int | None = None  # optional part 'O' (include-originid), a replication origin id; 0 = local
    KIND = "B"


@dataclass(frozen=True, slots=True)
class Commit:
    """``C``: a transaction commits. ``lsn`` is the end LSN of its commit record."""

    lsn: int
    xid: int | None = None  # optional part 'X' (include-xids), a 64-bit xid
    commit_ts: str | None = None  # optional part 'T' (include-timestamp)
    KIND = "C"


@dataclass(frozen=True, slots=True)
class Insert:
    lsn: int
    schema: str
    table: str
    new: GTuple | None
    KIND = "I"


@dataclass(frozen=True, slots=True)
class Update:
    """``old`` holds the replica identity columns (every column under REPLICA IDENTITY FULL)."""

    lsn: int
    schema: str
    table: str
    new: GTuple | None
    old: GTuple | None
    KIND = "U"


@dataclass(frozen=True, slots=True)
class Delete:
    lsn: int
    schema: str
    table: str
    old: GTuple | None
    KIND = "D"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """``h``: a heartbeat. It has no LSN header; its positions are LSNs, or CSNs under CSN decoding.

    ``sent_position``: end of the WAL read (or the CSN sent) when the heartbeat was sent;
    ``flush_position``: WAL flushed to disk (or the next CSN to be assigned);
    ``timestamp``: the int64 as sent — the generation time of the latest decoded transaction
    or checkpoint, counted from 1970-01-01 (unit: see :func:`~cdc_apply.gaussdb.timestamps.heartbeat_micros`).
    """

    sent_position: int
    flush_position: int
    timestamp: int
    KIND = "h"


DmlRecord = Union[Insert, Update, Delete]
# The kind bytes of the records above a decoder reads from a payload (a Heartbeat is a payload of its own).
RecordKind = Literal["B", "C", "I", "U", "D"]
DmlKind = Literal["I", "U", "D"]
Record = Union[Begin, Commit, Insert, Update, Delete, Heartbeat]

RECORD_NAMES = {"B": "Begin", "C": "Commit", "I": "Insert", "U": "Update", "D": "Delete", "h": "Heartbeat"}


def qualified_name(record: DmlRecord) -> str:
    """``schema.table`` as configuration names it."""
    return f"{record.schema}.{record.table}"


def unquote_name(name: str) -> str:
    """A column name as PostgreSQL stores it: ``"Mixed"`` becomes ``Mixed``, ``"a""b"`` becomes ``a"b``.

    ``quote_identifier`` quotes every name containing a double quote, so a name
    not starting with one is already bare. A malformed quoted name raises
    ``ValueError``.
    """
    if not name.startswith('"'):
        return name
    if len(name) < 2 or not name.endswith('"'):
        raise ValueError(f"unterminated quoted column name {name!r}")
    inner = name[1:-1]
    if inner.replace('""', "").count('"'):
        raise ValueError(f"lone double quote inside quoted column name {name!r}")
    return inner.replace('""', '"')
