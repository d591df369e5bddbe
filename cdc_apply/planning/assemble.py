"""Assemble transactions from one source's control messages, in seq order.

Control messages are everything but the changes: Begin, Commit, Origin,
Relation, Type, the stream messages and the two-phase messages. Changes
(Insert, Update, Delete, Truncate, Message) are not needed here — a
transaction's changes are exactly the bronze rows inside its seq ranges:

* plain: ``[Begin, Commit]``; two-phase: ``[Begin Prepare, Prepare]`` — PostgreSQL
  sends such a transaction whole, nothing interleaves with it;
* streamed: its Stream Start ... Stream Stop blocks.

The rules follow PostgreSQL's apply worker (worker.c): Stream Commit, Commit
Prepared and Commit make changes visible; Stream Abort of the top-level xid
drops the transaction, of a subxid drops that subtransaction (see
:func:`excluded_ranges`); a Stream Start with first_segment = 1 for an xid
already seen restarts it (the walsender re-sends in-progress transactions
after a reconnect); Rollback Prepared drops the prepared transaction, and is
ignored when its Prepare was never received, as the apply worker does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

from cdc_apply.errors import CdcApplyError, DecodeError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import StreamDecoder
from cdc_apply.planning.state import OpenTxn, PreparedTxn, SeqRange, SourceState, StreamedTxn, TxnKind
from cdc_apply.planning.transactions import (  # noqa: F401  (re-exported: the assembly's results)
    Assembly,
    BadControl,
    DecidedTxn,
    QuarantinedTxn,
    SchemaEvent,
)

CHANGE_TYPES, CONTROL_TYPES = m.CHANGE_TYPES, m.CONTROL_TYPES
# Logical decoding messages under this prefix are cdc_apply's own (a lander's snapshot, an event
# trigger's column defaults): the driver reads them with the control messages.
DIRECTIVE_PREFIX = "cdc_apply."


class _Assembler:
    def __init__(self, state: SourceState, source: str | None, quarantine: bool = False) -> None:
        self.source = source
        self.quarantine = quarantine
        self.quarantined: list[QuarantinedTxn] = []
        self.bad: list[BadControl] = []
        self.open: OpenTxn | None = state.open_txn
        self.streams: dict[int, StreamedTxn] = {s.xid: s for s in state.streams}
        self.prepared: dict[str, PreparedTxn] = {p.gid: p for p in state.prepared}
        self.block_start = state.block_start
        self.block_xid = state.stream_xid
        self.committed: list[DecidedTxn] = []
        self.aborted: list[DecidedTxn] = []
        self.schema: list[SchemaEvent] = []
        self.decoder = StreamDecoder(state.in_stream, state.stream_xid)
        self.state = state

    def fail(self, detail: str, seq: int, lsn: int, **context) -> DecodeError:
        return DecodeError(detail, source=self.source, seq=seq, lsn=m.format_lsn(lsn), **context)

    def feed(self, seq: int, lsn: int, payload: bytes) -> None:
        try:
            msg = self.decoder.decode(payload)
        except CdcApplyError as err:
            err = err.with_context(source=self.source, seq=seq, lsn=m.format_lsn(lsn))
            self._bad(seq, lsn, payload, err, None)
            return
        handler = getattr(self, "on_" + type(msg).__name__, None)
        if handler is not None:
            try:
                handler(msg, seq, lsn)
            except CdcApplyError as err:  # a framing error: raised before the handler changed anything
                self._bad(seq, lsn, payload, err, msg)

    def _bad(self, seq: int, lsn: int, payload: bytes, err: CdcApplyError, msg) -> None:
        """A control message that cannot be decoded or breaks the framing. Under fail: the error. Under
        quarantine: the message goes to quarantine and so does the whole transaction it belongs to (the
        open one, or the one a garbled Begin starts) — never a part of one. A bad stream message stops
        the source even then: which blocks belong to which transaction is no longer known."""
        kind = payload[:1] if payload else b""
        if not self.quarantine or (kind and kind[0] in m.STREAM_TYPES) or self.decoder.in_stream:
            raise err from None
        self.bad.append(BadControl(seq, lsn, payload, str(err)))
        reason = f"its transaction holds a bad control message at seq {seq}: {err}"
        closes: dict[bytes, TxnKind] = {m.Commit.TYPE.encode(): "plain", m.Prepare.TYPE.encode(): "prepared"}
        begins: dict[bytes, TxnKind] = {m.Begin.TYPE.encode(): "plain", m.BeginPrepare.TYPE.encode(): "prepared"}
        if self.open is not None:
            if closes.get(kind) == self.open.kind:
                self._quarantine_open(seq, reason)
                return
            if kind in begins:  # a Begin while one is open: the open one lost its end
                self._quarantine_open(seq - 1, reason)
            else:
                self.open = replace(self.open, quarantined=self.open.quarantined or reason)
                return
        if kind in begins:
            if msg is not None:
                self.feed_decoded(msg, seq, lsn)
            else:
                self.open = OpenTxn(begins[kind], 0, seq, 0, 0, quarantined=reason)
        # Anything else outside a transaction is quarantined alone.

    def feed_decoded(self, msg, seq: int, lsn: int) -> None:
        getattr(self, "on_" + type(msg).__name__)(msg, seq, lsn)

    def _quarantine_open(self, end_seq: int, reason: str) -> None:
        txn, self.open = self.open, None
        assert txn is not None  # every caller has checked that a transaction is open
        self.quarantined.append(QuarantinedTxn(txn.begin_seq, end_seq, ((txn.begin_seq, end_seq),),
                                               txn.quarantined or reason))

    # -- plain and two-phase transactions -------------------------------------
    def on_Begin(self, msg: m.Begin, seq: int, lsn: int) -> None:
        self._open(OpenTxn("plain", msg.xid, seq, msg.final_lsn, msg.commit_ts), seq, lsn)

    def on_BeginPrepare(self, msg: m.BeginPrepare, seq: int, lsn: int) -> None:
        self._open(OpenTxn("prepared", msg.xid, seq, msg.prepare_lsn, msg.prepare_ts, gid=msg.gid), seq, lsn)

    def _open(self, txn: OpenTxn, seq: int, lsn: int) -> None:
        if self.open is not None:
            raise self.fail(f"transaction xid {txn.xid} begins while xid {self.open.xid} "
                            f"(begun at seq {self.open.begin_seq}) is still open", seq, lsn)
        if self.decoder.in_stream:
            raise self.fail("Begin inside a stream block", seq, lsn)
        self.open = txn

    def on_Origin(self, msg: m.Origin, seq: int, lsn: int) -> None:
        if self.open is not None:
            self.open = replace(self.open, origin=msg.name, origin_lsn=msg.commit_lsn)
        elif self.decoder.in_stream and self.decoder.stream_xid in self.streams:
            xid = self.decoder.stream_xid
            self.streams[xid] = replace(self.streams[xid], origin=msg.name, origin_lsn=msg.commit_lsn)
        else:
            raise self.fail("Origin outside a transaction", seq, lsn)

    def on_Commit(self, msg: m.Commit, seq: int, lsn: int) -> None:
        open_txn = self._check_close("plain", seq, lsn)
        if open_txn.quarantined:
            self._quarantine_open(seq, open_txn.quarantined)
            return
        if msg.commit_lsn != open_txn.begin_lsn:
            raise self.fail(f"Commit LSN {m.format_lsn(msg.commit_lsn)} differs from the Begin's final LSN "
                            f"{m.format_lsn(open_txn.begin_lsn)}", seq, lsn, xid=open_txn.xid)
        txn = self._close("plain", seq, lsn)
        self.committed.append(DecidedTxn("plain", txn.xid, txn.begin_seq, seq, ((txn.begin_seq, seq),), False,
                                         msg.commit_lsn, msg.end_lsn, msg.commit_ts,
                                         origin=txn.origin, origin_lsn=txn.origin_lsn, directives=txn.directives))

    def on_Prepare(self, msg: m.Prepare, seq: int, lsn: int) -> None:
        txn = self._check_close("prepared", seq, lsn)
        if not txn.quarantined and (msg.gid != txn.gid or msg.xid != txn.xid):
            raise self.fail(f"Prepare of gid {msg.gid!r} closes Begin Prepare of gid {txn.gid!r}", seq, lsn)
        if msg.gid in self.prepared:
            raise self.fail(f"gid {msg.gid!r} prepared twice", seq, lsn)
        self.open = None
        self._park(PreparedTxn(msg.xid, msg.gid, ((txn.begin_seq, seq),), False, (), txn.begin_seq, seq,
                               msg.prepare_lsn, msg.end_lsn, msg.prepare_ts, txn.origin, txn.origin_lsn,
                               quarantined=txn.quarantined, directives=txn.directives), seq, lsn)

    def _check_close(self, kind: TxnKind, seq: int, lsn: int) -> OpenTxn:
        """The open transaction, when it is one of ``kind``; else the framing error."""
        txn = self.open
        if txn is None or txn.kind != kind:
            what = "Commit" if kind == "plain" else "Prepare"
            raise self.fail(f"{what} without a matching Begin" + ("" if txn is None else f" (open: {txn.kind})"),
                            seq, lsn)
        return txn

    def _close(self, kind: TxnKind, seq: int, lsn: int) -> OpenTxn:
        txn = self._check_close(kind, seq, lsn)
        self.open = None
        return txn

    def _park(self, prepared: PreparedTxn, seq: int, lsn: int) -> None:
        if prepared.gid in self.prepared:
            raise self.fail(f"gid {prepared.gid!r} prepared twice", seq, lsn)
        self.prepared[prepared.gid] = prepared

    def on_CommitPrepared(self, msg: m.CommitPrepared, seq: int, lsn: int) -> None:
        if msg.gid not in self.prepared:
            raise self.fail(f"Commit Prepared for gid {msg.gid!r}, whose Prepare is not in bronze", seq, lsn,
                            xid=msg.xid)
        prepared = self.prepared.pop(msg.gid)
        if prepared.quarantined:
            self.quarantined.append(QuarantinedTxn(prepared.begin_seq, seq, prepared.ranges, prepared.quarantined))
            return
        self.committed.append(DecidedTxn(
            "prepared", prepared.xid, prepared.begin_seq, seq, prepared.ranges, prepared.in_stream,
            msg.commit_lsn, msg.end_lsn, msg.commit_ts, gid=msg.gid, origin=prepared.origin,
            origin_lsn=prepared.origin_lsn, sub_aborts=prepared.sub_aborts, directives=prepared.directives))

    def on_RollbackPrepared(self, msg: m.RollbackPrepared, seq: int, lsn: int) -> None:
        prepared = self.prepared.pop(msg.gid, None)
        if prepared is not None:
            self.aborted.append(DecidedTxn("prepared", prepared.xid, prepared.begin_seq, seq, prepared.ranges,
                                           prepared.in_stream, gid=msg.gid))

    # -- streamed transactions ---------------------------------------------------
    def on_StreamStart(self, msg: m.StreamStart, seq: int, lsn: int) -> None:
        if self.open is not None:
            raise self.fail(f"Stream Start inside transaction xid {self.open.xid}", seq, lsn)
        known = self.streams.get(msg.xid)
        if msg.first_segment:
            if known is not None and known.blocks:
                # The walsender restarted this transaction: what was received before is superseded.
                self.aborted.append(DecidedTxn("streamed", msg.xid, known.blocks[0][0], seq, known.blocks, True))
            self.streams[msg.xid] = StreamedTxn(msg.xid, first_lsn=lsn or None)
        elif known is None:
            raise self.fail(f"Stream Start continues xid {msg.xid}, whose first segment is not in bronze", seq, lsn)
        self.block_start, self.block_xid = seq, msg.xid

    def on_StreamStop(self, msg: m.StreamStop, seq: int, lsn: int) -> None:
        # The decoder has already checked that a block was open, so its Stream Start set both.
        assert self.block_xid is not None and self.block_start is not None
        stream = self.streams[self.block_xid]
        self.streams[self.block_xid] = replace(stream, blocks=stream.blocks + ((self.block_start, seq),))
        self.block_start = self.block_xid = None

    def on_StreamCommit(self, msg: m.StreamCommit, seq: int, lsn: int) -> None:
        stream = self._take_stream(msg.xid, "Stream Commit", seq, lsn)
        self.committed.append(DecidedTxn(
            "streamed", msg.xid, stream.blocks[0][0] if stream.blocks else seq, seq, stream.blocks, True,
            msg.commit_lsn, msg.end_lsn, msg.commit_ts, origin=stream.origin, origin_lsn=stream.origin_lsn,
            sub_aborts=stream.sub_aborts, directives=stream.directives))

    def on_StreamPrepare(self, msg: m.StreamPrepare, seq: int, lsn: int) -> None:
        stream = self._take_stream(msg.xid, "Stream Prepare", seq, lsn)
        begin = stream.blocks[0][0] if stream.blocks else seq
        self._park(PreparedTxn(msg.xid, msg.gid, stream.blocks, True, stream.sub_aborts, begin, seq,
                               msg.prepare_lsn, msg.end_lsn, msg.prepare_ts, stream.origin, stream.origin_lsn,
                               directives=stream.directives), seq, lsn)

    def _take_stream(self, xid: int, what: str, seq: int, lsn: int) -> StreamedTxn:
        if self.decoder.in_stream:
            raise self.fail(f"{what} inside a stream block", seq, lsn)
        stream = self.streams.pop(xid, None)
        if stream is None:
            raise self.fail(f"{what} for xid {xid}, whose stream is not in bronze", seq, lsn)
        return stream

    def on_StreamAbort(self, msg: m.StreamAbort, seq: int, lsn: int) -> None:
        stream = self.streams.get(msg.xid)
        if stream is None:
            return  # nothing of it was received, so there is nothing to drop
        if msg.subxid == msg.xid:
            del self.streams[msg.xid]
            begin = stream.blocks[0][0] if stream.blocks else seq
            self.aborted.append(DecidedTxn("streamed", msg.xid, begin, seq, stream.blocks, True))
        else:
            self.streams[msg.xid] = replace(stream, sub_aborts=stream.sub_aborts + ((msg.subxid, seq),))

    # -- cdc_apply's own messages -------------------------------------------------
    def on_Message(self, msg: m.Message, seq: int, lsn: int) -> None:
        if not msg.transactional or not msg.prefix.startswith(DIRECTIVE_PREFIX):
            return  # other messages are the decode's (the messages log); non-transactional ones the lander's
        directive = (msg.prefix, msg.content.decode("utf-8", "replace"))
        if self.open is not None:
            self.open = replace(self.open, directives=self.open.directives + (directive,))
        elif self.decoder.in_stream and self.decoder.stream_xid in self.streams:
            xid = self.decoder.stream_xid
            self.streams[xid] = replace(self.streams[xid], directives=self.streams[xid].directives + (directive,))
        else:
            raise self.fail("transactional Message outside any transaction", seq, lsn, message_type="Message")

    # -- schema ------------------------------------------------------------------
    def on_Relation(self, msg: m.Relation, seq: int, lsn: int) -> None:
        self.schema.append(SchemaEvent(seq, self._schema_lsn(lsn), msg))

    def on_Type(self, msg: m.Type, seq: int, lsn: int) -> None:
        self.schema.append(SchemaEvent(seq, self._schema_lsn(lsn), msg))

    def _schema_lsn(self, lsn: int) -> int:
        """Where a Relation or Type message takes effect. A walsender sends these with LSN 0 (only a
        callback's last write carries one: WalSndPrepareWrite), so the transaction they came in names
        it: its final LSN (Begin) or prepare LSN (Begin Prepare), or, streamed, its first LSN."""
        if lsn:
            return lsn
        if self.open is not None:
            return self.open.begin_lsn
        xid = self.block_xid
        stream = self.streams.get(xid) if self.decoder.in_stream and xid is not None else None
        return stream.first_lsn or 0 if stream is not None else 0

    def finish(self, last_seq: int) -> Assembly:
        state = replace(
            self.state,
            applied_seq=max(last_seq, self.state.applied_seq),
            in_stream=self.decoder.in_stream,
            stream_xid=self.decoder.stream_xid,
            block_start=self.block_start,
            open_txn=self.open,
            streams=tuple(sorted(self.streams.values(), key=lambda s: s.xid)),
            prepared=tuple(sorted(self.prepared.values(), key=lambda p: p.prepare_seq)),
        )
        if self.committed:
            last = self.committed[-1]
            state = replace(state, last_commit_lsn=last.commit_lsn, last_commit_ts=last.commit_ts,
                            last_end_lsn=last.end_lsn)
        return Assembly(tuple(self.committed), tuple(self.aborted), tuple(self.schema), state,
                        tuple(self.quarantined), tuple(self.bad))


def assemble_transactions(state: SourceState, controls: Iterable[tuple[int, int, bytes]], last_seq: int,
                          source: str | None = None, quarantine: bool = False) -> Assembly:
    """Walk ``(seq, lsn, payload)`` control messages (seq order, all with seq > ``state.applied_seq``).

    ``last_seq`` is the largest seq of the batch (changes included); it becomes
    the new ``applied_seq``. Change messages, if passed, are ignored here.
    Framing errors (Commit without Begin, a nested Begin, an unknown
    Commit Prepared ...) raise :class:`DecodeError` naming source, seq and LSN —
    or, with ``quarantine``, put the message and its whole transaction in
    ``bad_controls`` and ``quarantined`` (stream messages raise either way).
    """
    assembler = _Assembler(state, source, quarantine)
    for seq, lsn, payload in controls:
        if payload and payload[0] in CHANGE_TYPES and not is_directive(payload):
            continue
        assembler.feed(seq, lsn, payload)
    return assembler.finish(last_seq)


_DIRECTIVE_BYTES = DIRECTIVE_PREFIX.encode()
_MESSAGE_TYPE = m.Message.TYPE.encode()


def is_directive(payload: bytes) -> bool:
    """Whether a payload is a logical decoding message with cdc_apply's prefix (streamed or not:
    'M', [xid], flags, LSN, prefix)."""
    return payload[:1] == _MESSAGE_TYPE and any(payload[at:at + len(_DIRECTIVE_BYTES)] == _DIRECTIVE_BYTES
                                                for at in m.MESSAGE_PREFIX_OFFSETS)


def excluded_ranges(txn: DecidedTxn, first_change_seq: Mapping[int, int]) -> tuple[SeqRange, ...]:
    """Seq ranges of a streamed transaction dropped by subtransaction aborts.

    As PostgreSQL's apply worker truncates its spool file at the first change
    of the aborted subtransaction, everything from that change up to the
    Stream Abort is dropped (nested subtransactions started later included).
    ``first_change_seq`` maps a subxid to the seq of its first change in this
    transaction; a subxid with no change drops nothing. The result lies within
    the transaction's own ranges (stream blocks): blocks of other transactions
    streamed between the first change and the abort are theirs, and a range
    spanning them would hide this transaction's later blocks from the plan.
    """
    out = []
    for subxid, abort_seq in txn.sub_aborts:
        first = first_change_seq.get(subxid)
        if first is not None and first < abort_seq:
            out += [(max(a, first), min(b, abort_seq)) for a, b in txn.ranges if a <= abort_seq and b >= first]
    return merge_ranges(out)


def merge_ranges(ranges: Iterable[SeqRange]) -> tuple[SeqRange, ...]:
    """Sorted, disjoint and non-adjacent seq ranges covering exactly the given ones."""
    out: list[SeqRange] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)
