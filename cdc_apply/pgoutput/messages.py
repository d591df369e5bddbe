"""The pgoutput messages of protocol versions 1-4, as frozen dataclasses.

Field names follow PostgreSQL's documentation ("Logical Replication Message
Formats"). LSNs are ints; timestamps are ints in microseconds since the
PostgreSQL epoch (2000-01-01 UTC), exactly as on the wire (see
:func:`pg_timestamp_to_datetime`). ``xid`` on Relation, Type, Insert, Update,
Delete, Truncate and Message is set only inside a Stream Start ... Stream Stop
block, as on the wire.

A TupleData is a tuple with one item per column: ``None`` (``n``, NULL),
:data:`UNCHANGED_TOAST` (``u``), ``str`` (``t``, text format) or ``bytes``
(``b``, binary format).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Union


class _UnchangedToast:
    """Marker for an unchanged TOASTed value (``u``): the value was not sent."""

    __slots__ = ()
    _instance: "_UnchangedToast | None" = None

    def __new__(cls) -> "_UnchangedToast":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _UnchangedToast()

ColumnValue = Union[None, str, bytes, _UnchangedToast]
TupleData = tuple[ColumnValue, ...]

PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
PG_EPOCH_UNIX_MICROS = 946_684_800_000_000

REPLICA_IDENTITIES = {"d": "default", "n": "nothing", "f": "full", "i": "index"}

TRUNCATE_CASCADE = 1
TRUNCATE_RESTART_IDENTITY = 2


def pg_timestamp_to_datetime(micros: int) -> datetime:
    """A wire timestamp (microseconds since 2000-01-01 UTC) as an aware UTC datetime."""
    return PG_EPOCH + timedelta(microseconds=micros)


def format_lsn(lsn: int) -> str:
    """An LSN in PostgreSQL's ``X/Y`` notation."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


# pg_lsn_in's grammar: two runs of 1–8 hex digits around a slash, nothing else (no sign, no 0x, no
# underscores, no spaces) — what int(x, 16) alone would let through.
_LSN_TEXT = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def parse_lsn(text: str) -> int:
    """Parse PostgreSQL's ``X/Y`` notation as ``pg_lsn`` input does; ``ValueError`` for anything else."""
    match = _LSN_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f"not an LSN: {text!r}")
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    commit_ts: int
    xid: int
    TYPE = "B"


@dataclass(frozen=True, slots=True)
class Message:
    """A logical decoding message (``pg_logical_emit_message``)."""

    xid: int | None
    transactional: bool
    lsn: int
    prefix: str
    content: bytes
    TYPE = "M"


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int
    TYPE = "C"


@dataclass(frozen=True, slots=True)
class Origin:
    commit_lsn: int
    name: str
    TYPE = "O"


@dataclass(frozen=True, slots=True)
class RelationColumn:
    flags: int
    name: str
    type_oid: int
    type_modifier: int

    @property
    def key(self) -> bool:
        """Part of the replica identity key."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class Relation:
    xid: int | None
    relation_id: int
    namespace: str
    name: str
    replica_identity: str  # relreplident: 'd', 'n', 'f' or 'i'
    columns: tuple[RelationColumn, ...]
    TYPE = "R"

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.key)


@dataclass(frozen=True, slots=True)
class Type:
    xid: int | None
    type_oid: int
    namespace: str
    name: str
    TYPE = "Y"


@dataclass(frozen=True, slots=True)
class Insert:
    xid: int | None
    relation_id: int
    new: TupleData
    TYPE = "I"


@dataclass(frozen=True, slots=True)
class Update:
    """``key`` is set when the key changed ('K'), ``old`` under REPLICA IDENTITY FULL ('O')."""

    xid: int | None
    relation_id: int
    key: TupleData | None
    old: TupleData | None
    new: TupleData
    TYPE = "U"


@dataclass(frozen=True, slots=True)
class Delete:
    xid: int | None
    relation_id: int
    key: TupleData | None
    old: TupleData | None
    TYPE = "D"


@dataclass(frozen=True, slots=True)
class Truncate:
    xid: int | None
    options: int
    relation_ids: tuple[int, ...]
    TYPE = "T"

    @property
    def cascade(self) -> bool:
        return bool(self.options & TRUNCATE_CASCADE)

    @property
    def restart_identity(self) -> bool:
        return bool(self.options & TRUNCATE_RESTART_IDENTITY)


@dataclass(frozen=True, slots=True)
class StreamStart:
    xid: int
    first_segment: bool
    TYPE = "S"


@dataclass(frozen=True, slots=True)
class StreamStop:
    TYPE = "E"


@dataclass(frozen=True, slots=True)
class StreamCommit:
    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int
    TYPE = "c"


@dataclass(frozen=True, slots=True)
class StreamAbort:
    """``abort_lsn`` and ``abort_ts`` are present with protocol 4 and streaming = parallel."""

    xid: int
    subxid: int
    abort_lsn: int | None = None
    abort_ts: int | None = None
    TYPE = "A"


@dataclass(frozen=True, slots=True)
class BeginPrepare:
    prepare_lsn: int
    end_lsn: int
    prepare_ts: int
    xid: int
    gid: str
    TYPE = "b"


@dataclass(frozen=True, slots=True)
class Prepare:
    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_ts: int
    xid: int
    gid: str
    TYPE = "P"


@dataclass(frozen=True, slots=True)
class CommitPrepared:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int
    xid: int
    gid: str
    TYPE = "K"


@dataclass(frozen=True, slots=True)
class RollbackPrepared:
    flags: int
    prepare_end_lsn: int
    rollback_end_lsn: int
    prepare_ts: int
    rollback_ts: int
    xid: int
    gid: str
    TYPE = "r"


@dataclass(frozen=True, slots=True)
class StreamPrepare:
    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_ts: int
    xid: int
    gid: str
    TYPE = "p"


PgOutputMessage = Union[
    Begin, Message, Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate,
    StreamStart, StreamStop, StreamCommit, StreamAbort,
    BeginPrepare, Prepare, CommitPrepared, RollbackPrepared, StreamPrepare,
]

MESSAGE_CLASSES: dict[str, type] = {
    cls.TYPE: cls
    for cls in (Begin, Message, Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate,
                StreamStart, StreamStop, StreamCommit, StreamAbort,
                BeginPrepare, Prepare, CommitPrepared, RollbackPrepared, StreamPrepare)
}

MESSAGE_NAMES: dict[str, str] = {t: cls.__name__ for t, cls in MESSAGE_CLASSES.items()}

# The one table of message kinds by type byte. Changes: what a transaction does (the decode stage's).
# Control: everything else — transaction framing, streams, two-phase, Relation, Type (the driver's).
DML_TYPES = frozenset(b"IUD")
CHANGE_TYPES = frozenset(b"IUDTM")
CONTROL_TYPES = frozenset(t.encode()[0] for t in MESSAGE_CLASSES) - CHANGE_TYPES
# The stream messages: which transaction a streamed change belongs to depends on them.
STREAM_TYPES = frozenset(cls.TYPE.encode()[0] for cls in (StreamStart, StreamStop, StreamCommit, StreamAbort,
                                                          StreamPrepare))
# Message: Byte1('M'), [Int32 xid inside a stream block], Int8 flags, Int64 lsn, String prefix, ...:
# where the prefix starts (0-based), outside and inside a stream block.
MESSAGE_PREFIX_OFFSETS = (1 + 1 + 8, 1 + 4 + 1 + 8)
