"""GaussDB records -> pgoutput messages, so the pgoutput apply path serves both formats.

:class:`GaussdbTranscoder` is fed the records of one source's payloads in seq
order and keeps state across calls: table descriptions and relation ids
(:mod:`cdc_apply.gaussdb.tables`) and the transaction being received.

A GaussDB transaction can span payloads (a batch is cut at 1 MB, and without
``sending-batch`` every record is a payload), and a pgoutput Begin must carry
its Commit's LSN. So a transaction's records are buffered until its ``C`` and
then emitted whole, in one call's result: Begin, an Origin (when the Begin
named a replication origin other than 0, the local one), the ``gaussdb.user``
logical message (when the Begin carried a user name), Relation messages where
a table's description changed, the changes, Commit. Everything about the
transaction that pgoutput cannot carry — 64-bit xid, CSN, user name, origin
id, whether it was excluded — is in :attr:`TranscodeResult.transactions`;
heartbeats, which are no pgoutput message, are in
:attr:`TranscodeResult.heartbeats`.

Positions and times (``docs/GAUSSDB.md`` has the table):

* ``commit_position="lsn"`` (default): Begin.final_lsn = Commit.commit_lsn =
  Commit.end_lsn = the ``C`` record's LSN (the commit's end LSN, the only
  commit position the format has; increasing in commit-LSN output order).
  ``"csn"``: final_lsn = commit_lsn = the Begin's CSN, end_lsn = the ``C``
  record's LSN — for ``output-order=1`` (CSN order).
* commit_ts: the ``C``'s ``T``, else the ``B``'s ``T``, as microseconds since
  2000-01-01 UTC; 0 when neither was sent (``include-timestamp=0``).
* xid: the ``C``'s ``X``, else the ``B``'s ``X`` (openGauss sends both; they must
  agree), truncated to 32 bits (pgoutput's width); 0 without any ``X``.
* origin: the ``B``'s ``O``. openGauss sends the origin's id, not its name nor
  its commit LSN, so the Origin message names it by the id in decimal with
  commit LSN 0; id 0 (``InvalidRepOriginId``: a local transaction) sends none,
  as PostgreSQL does.

A call either succeeds or raises and leaves the transcoder as it was.
Transactions whose Begin names a user in ``exclude_users`` are dropped whole.
A Begin arriving while a transaction is open is an error, unless it is the
same transaction again (same first LSN and CSN: the server resent it after a
reconnect), which replaces what was received.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from cdc_apply.errors import CdcApplyError, ConfigError, DecodeError
from cdc_apply.gaussdb.decoder import decode_gaussdb_payload
from cdc_apply.gaussdb.encoder import encode_gaussdb
from cdc_apply.gaussdb.records import Begin, Commit, Heartbeat, Record
from cdc_apply.gaussdb.tables import TableMapper, TableState
from cdc_apply.gaussdb.timestamps import HEARTBEAT_UNITS, heartbeat_micros, parse_timestamp
from cdc_apply.pgoutput import messages as m

USER_MESSAGE_PREFIX = "gaussdb.user"
STATE_VERSION = 1


@dataclass(frozen=True, slots=True)
class OutMessage:
    """A pgoutput message and the LSN of the GaussDB record it came from (Begin's first LSN for Begin)."""

    message: m.PgOutputMessage
    lsn: int


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    """One transaction whose ``C`` was in this call; indexes point into :attr:`TranscodeResult.messages`."""

    csn: int
    first_lsn: int
    commit_lsn: int  # as in Begin.final_lsn / Commit.commit_lsn
    end_lsn: int
    xid: int | None  # the 64-bit xid from 'X' (the Commit's, else the Begin's)
    commit_ts: int | None  # microseconds since 2000-01-01 UTC; None when no 'T' was sent
    user_name: str | None
    origin_id: int | None  # the Begin's 'O'; None when not sent
    excluded: bool
    changes: int  # DML records (0 for an empty or excluded transaction)
    begin_index: int | None  # None when excluded
    commit_index: int | None


@dataclass(frozen=True, slots=True)
class HeartbeatInfo:
    sent_position: int
    flush_position: int
    timestamp_raw: int
    timestamp: int  # microseconds since 2000-01-01 UTC (see heartbeat_unit)


@dataclass(frozen=True, slots=True)
class TranscodeResult:
    messages: tuple[OutMessage, ...] = ()
    transactions: tuple[TransactionInfo, ...] = ()
    heartbeats: tuple[HeartbeatInfo, ...] = ()

    def pgoutput(self) -> tuple[m.PgOutputMessage, ...]:
        return tuple(o.message for o in self.messages)


@dataclass(slots=True)
class _Open:
    begin: Begin
    excluded: bool
    records: list = field(default_factory=list)


class GaussdbTranscoder:
    """Turns one source's GaussDB records into pgoutput messages; see the module docstring.

    ``keys`` maps ``"schema.table"`` to its key columns; ``exclude_users`` drops
    transactions by user name (the Begin's ``N``: needs ``include-user=1``);
    ``user_messages`` emits the ``gaussdb.user`` message; ``heartbeat_unit`` is
    ``"s"``, ``"ms"``, ``"us"`` or ``"auto"``.
    """

    def __init__(self, keys: Mapping[str, Sequence[str]] | None = None,
                 exclude_users: frozenset[str] = frozenset(), *, user_messages: bool = True,
                 commit_position: str = "lsn", heartbeat_unit: str = "auto") -> None:
        keys = dict(keys or {})
        for name, cols in keys.items():
            if isinstance(cols, str) or not cols or not all(isinstance(c, str) and c for c in cols):
                raise ConfigError("a key is a non-empty list of column names", key=f"keys.{name}")
        if commit_position not in ("lsn", "csn"):
            raise ConfigError(f"must be 'lsn' or 'csn', not {commit_position!r}", key="commit_position")
        if heartbeat_unit not in HEARTBEAT_UNITS:
            raise ConfigError(f"must be one of {HEARTBEAT_UNITS}, not {heartbeat_unit!r}", key="heartbeat_unit")
        self.keys = keys
        self.exclude_users = frozenset(exclude_users)
        self.user_messages = user_messages
        self.commit_position = commit_position
        self.heartbeat_unit = heartbeat_unit
        self.mapper = TableMapper(keys)
        self.open: _Open | None = None

    @property
    def pending(self) -> bool:
        """A transaction has begun and not yet committed."""
        return self.open is not None

    # -- transcoding ---------------------------------------------------------------------
    def transcode_payload(self, payload: bytes) -> TranscodeResult:
        return self.transcode(decode_gaussdb_payload(payload))

    def transcode(self, records: Sequence[Record]) -> TranscodeResult:
        """pgoutput messages, transactions and heartbeats for the records of one payload."""
        saved, count = self.open, len(self.open.records) if self.open else 0
        out: list[OutMessage] = []
        txns: list[TransactionInfo] = []
        beats: list[HeartbeatInfo] = []
        try:
            for rec in records:
                if isinstance(rec, Heartbeat):
                    beats.append(HeartbeatInfo(rec.sent_position, rec.flush_position, rec.timestamp,
                                               heartbeat_micros(rec.timestamp, self.heartbeat_unit)))
                elif isinstance(rec, Begin):
                    self._begin(rec)
                elif isinstance(rec, Commit):
                    txns.append(self._commit(rec, out))
                elif self.open is None:
                    raise DecodeError(f"{type(rec).__name__} outside a transaction", lsn=m.format_lsn(rec.lsn),
                                      table=f"{rec.schema}.{rec.table}")
                elif not self.open.excluded:
                    self.open.records.append(rec)
        except Exception:
            self.open = saved
            if saved is not None:
                del saved.records[count:]
            self.mapper.rollback()  # table changes of this call's transactions live in the overlay until now
            raise
        self.mapper.commit()
        return TranscodeResult(tuple(out), tuple(txns), tuple(beats))

    def _begin(self, rec: Begin) -> None:
        if self.open is not None:
            was = self.open.begin
            if (was.first_lsn, was.csn) != (rec.first_lsn, rec.csn):
                raise DecodeError(f"Begin of CSN {rec.csn} while the transaction begun at "
                                  f"{m.format_lsn(was.lsn)} (CSN {was.csn}) is still open", lsn=m.format_lsn(rec.lsn))
        self.open = _Open(rec, rec.user_name is not None and rec.user_name in self.exclude_users)

    def _commit(self, rec: Commit, out: list[OutMessage]) -> TransactionInfo:
        if self.open is None:
            raise DecodeError("Commit without a Begin", lsn=m.format_lsn(rec.lsn))
        txn, self.open = self.open, None
        begin = txn.begin
        text = rec.commit_ts if rec.commit_ts is not None else begin.commit_ts
        try:
            ts = parse_timestamp(text) if text is not None else None
        except ValueError as exc:
            raise DecodeError(f"commit timestamp: {exc}", lsn=m.format_lsn(rec.lsn)) from None
        xid = _transaction_xid(begin, rec)
        commit_lsn = rec.lsn if self.commit_position == "lsn" else begin.csn
        info = dict(csn=begin.csn, first_lsn=begin.first_lsn, commit_lsn=commit_lsn, end_lsn=rec.lsn, xid=xid,
                    commit_ts=ts, user_name=begin.user_name, origin_id=begin.origin_id, excluded=txn.excluded,
                    changes=len(txn.records))
        if txn.excluded:
            return TransactionInfo(**info, begin_index=None, commit_index=None)  # type: ignore[arg-type]
        begin_index = len(out)
        pg_ts = ts if ts is not None else 0
        out.append(OutMessage(m.Begin(commit_lsn, pg_ts, (xid or 0) & 0xFFFFFFFF), begin.lsn))
        if begin.origin_id:
            out.append(OutMessage(m.Origin(0, str(begin.origin_id)), begin.lsn))
        if self.user_messages and begin.user_name is not None:
            content = begin.user_name.encode("utf-8")
            out.append(OutMessage(m.Message(None, True, begin.lsn, USER_MESSAGE_PREFIX, content), begin.lsn))
        for change in txn.records:
            try:
                messages = self.mapper.change(change)
            except CdcApplyError as err:
                raise err.with_context(lsn=m.format_lsn(change.lsn), csn=begin.csn) from None
            out.extend(OutMessage(msg, change.lsn) for msg in messages)
        out.append(OutMessage(m.Commit(0, commit_lsn, rec.lsn, pg_ts), rec.lsn))
        return TransactionInfo(**info, begin_index=begin_index, commit_index=len(out) - 1)  # type: ignore[arg-type]

    # -- state -------------------------------------------------------------------------------
    def state_json(self) -> str:
        """Everything carried between calls, as JSON (tables, relation ids, the open transaction)."""
        open_txn = None
        if self.open is not None:
            payload = encode_gaussdb([self.open.begin, *self.open.records], batch=True)
            open_txn = {"records": payload.hex(), "excluded": self.open.excluded}
        return json.dumps({"version": STATE_VERSION, "commit_position": self.commit_position,
                           "tables": [t.to_json() for t in self.mapper.states()], "open": open_txn},
                          ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_state_json(cls, text: str, keys: Mapping[str, Sequence[str]] | None = None,
                        exclude_users: frozenset[str] = frozenset(), **options) -> "GaussdbTranscoder":
        """A transcoder continuing where the one that wrote ``text`` stopped."""
        data = json.loads(text)
        if data.get("version") != STATE_VERSION:
            raise ConfigError(f"unknown transcoder state version {data.get('version')!r}", key="gaussdb.state")
        options.setdefault("commit_position", data["commit_position"])
        self = cls(keys, exclude_users, **options)
        self.mapper = TableMapper(self.keys, [TableState.from_json(t) for t in data["tables"]])
        if data["open"] is not None:
            begin, *records = decode_gaussdb_payload(bytes.fromhex(data["open"]["records"]))
            self.open = _Open(begin, data["open"]["excluded"], records)  # type: ignore[arg-type]
        return self


def _transaction_xid(begin: Begin, commit: Commit) -> int | None:
    """The xid both ends name (openGauss writes it in Begin and Commit); a mismatch means a garbled stream."""
    if begin.xid is not None and commit.xid is not None and begin.xid != commit.xid:
        raise DecodeError(f"the Commit's xid {commit.xid} differs from the Begin's xid {begin.xid}",
                          lsn=m.format_lsn(commit.lsn), csn=begin.csn)
    return commit.xid if commit.xid is not None else begin.xid
