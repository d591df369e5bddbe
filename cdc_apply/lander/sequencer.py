"""Turn what the walsender sends into what bronze must receive, exactly once.

A :class:`Sequencer` lives for one replication session. It starts from the
:class:`~cdc_apply.lander.state.ResumeState` of bronze and is fed every message
``(lsn, payload)`` in arrival order. It drops what bronze already holds, numbers
the rest with seq, and says where a batch may end. No I/O: PostgreSQL and Spark
are the caller's business, so every rule here is testable with plain bytes.

What the walsender sends again after a reconnect (START_REPLICATION at
``resume_lsn``, see docs/LANDER.md for why each holds):

* a transaction bronze holds only the head of (``txn``): sent whole again from
  its Begin, recognised by the Begin's final_lsn (prepare_lsn); its first
  ``count`` messages (Relation/Type aside) are dropped after checking their
  digest, the rest is landed;
* a streamed transaction with blocks in bronze (``streams``): streamed again
  from its first segment, cut into blocks anew. Its messages are matched
  against bronze the same way, across blocks, and the first block with new
  messages is landed as a continuation (Stream Start with first_segment = 0).
  When the new sending differs from bronze (a subtransaction that aborted in
  between is left out) the session ends with :class:`StreamDiverged`; the next
  session lands the transaction whole again after a Stream Abort of the old copy;
* a prepared transaction whose Prepare was decoded before the slot was
  two-phase is sent again (Begin Prepare ... Prepare) before its Commit
  Prepared; the ``prepared`` gids say whether bronze has it;
* anything else completed before ``resume_lsn`` is not sent again; should it
  come, it is dropped (counted in ``replayed``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from operator import itemgetter

from cdc_apply.errors import LandError
from cdc_apply.lander import framing as f
from cdc_apply.lander.state import Batch, OutputTracker, ResumeState
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.pgoutput.wire import first_bytes

_LSN, _PAYLOAD = itemgetter(0), itemgetter(1)     # of a message (lsn, payload)
_ROW_PAYLOAD = itemgetter(2)                        # of a row (seq, lsn, payload)

DROP, MATCH, LAND = "drop", "match", "land"


class StreamDiverged(Exception):
    """A re-sent streamed transaction differs from what bronze holds of it."""

    def __init__(self, xid: int, detail: str) -> None:
        super().__init__(f"streamed transaction xid {xid}: {detail}")
        self.xid = xid


@dataclass
class _Match:
    """Progress of matching a re-sent transaction against what bronze holds of it."""

    target_count: int
    target_digest: bytes
    count: int = 0
    digest: bytes = b""

    @property
    def done(self) -> bool:
        return self.count >= self.target_count

    def add(self, payload: bytes) -> None:
        self.count += 1
        self.digest = f.chain(self.digest, payload)

    @property
    def equal(self) -> bool:
        return self.digest == self.target_digest


@dataclass
class _Incoming:
    """The transaction or block the incoming message belongs to, and what to do with it."""

    mode: str
    xid: int
    match: _Match | None = None
    key: int = 0
    start: tuple[int, bytes] | None = None   # a dropped Stream Start (lsn, payload)
    opened: bool = False                     # a block: its Stream Start is landed

    @property
    def matching(self) -> _Match:
        """The progress of matching it against bronze: one in MATCH mode has it."""
        assert self.match is not None  # MATCH mode is only ever set together with a _Match
        return self.match


@dataclass
class Sequencer:
    """One session's filter and numbering; see the module docstring."""

    landed: ResumeState
    supersede: frozenset[int] = frozenset()
    source: str | None = None      # whose snapshot requests the resume state follows
    replayed: int = 0
    rows: list[tuple[int, int, bytes]] = field(default_factory=list)
    nbytes: int = 0

    def __post_init__(self) -> None:
        self._out = OutputTracker.starting_at(self.landed, self.source)
        self._deferred: list[tuple[int, bytes]] = []
        self._txn: _Incoming | None = None
        self._block: _Incoming | None = None
        self._streams: dict[int, _Incoming] = {}           # streams seen in this session
        self._pending_supersede = set(self.supersede)
        self._block_cut: tuple[int, ResumeState] | None = None
        self._txn_head: int | None = None    # index in rows of the open transaction's Begin, numbered this session

    # -- feeding ---------------------------------------------------------------
    def feed(self, lsn: int, payload: bytes) -> None:
        """Take one message from the walsender, in arrival order."""
        if not payload:
            raise LandError("the server sent an empty message", lsn=format_lsn(lsn))
        kind = payload[:1]
        f.check_length(kind, payload, lsn)
        if self._txn is not None:
            self._feed_txn(self._txn, lsn, payload, kind)
        elif self._block is not None:
            self._feed_block(self._block, lsn, payload, kind)
        else:
            self._feed_outside(lsn, payload, kind)

    def feed_many(self, messages: list[tuple[int, bytes]]) -> None:
        """:meth:`feed` each message in order; a run of row changes inside a transaction being landed is numbered
        in one step (C loops: no Python work per message)."""
        try:
            runs = [run.span() for run in f.CHANGE_RUNS.finditer(first_bytes(map(_PAYLOAD, messages)))]
        except IndexError:          # an empty message: feed refuses it where it comes
            runs = []
        done = 0
        for start, end in [*runs, (len(messages), len(messages))]:
            for lsn, payload in messages[done:start]:
                self.feed(lsn, payload)
            if start < end and not self._land_changes(messages[start:end]):
                for lsn, payload in messages[start:end]:
                    self.feed(lsn, payload)
            done = end

    def _land_changes(self, run: list[tuple[int, bytes]]) -> bool:
        """Number row changes of a transaction being landed as :meth:`_emit` would one by one (a change opens,
        closes and waits for nothing); False, with nothing done, when no such transaction is open outside a block."""
        out, txn = self._out, self._txn
        first, payloads = out.last_seq + 1, list(map(_PAYLOAD, run))
        if txn is None or txn.mode != LAND or not out.add_changes(payloads):
            return False
        self.rows.extend(zip(range(first, first + len(run)), map(_LSN, run), payloads))
        self.nbytes += sum(map(len, payloads))
        self._block_cut = None
        return True

    def _feed_outside(self, lsn: int, payload: bytes, kind: bytes) -> None:
        resume = self._out.resume_lsn
        if kind == f.BEGIN:
            key, xid = f.begin(payload)
            self._start_txn("B", key, xid, lsn, payload, done=key < resume)
        elif kind == f.BEGIN_PREPARE:
            key, end, xid, gid = f.begin_prepare(payload)
            self._start_txn("b", key, xid, lsn, payload, done=self._out.prepared.get(gid) == end)
        elif kind == f.STREAM_START:
            self._start_block(lsn, payload)
        elif kind in (f.STREAM_COMMIT, f.STREAM_PREPARE):
            if kind == f.STREAM_COMMIT:
                xid, end = f.stream_commit(payload)
            else:
                end, xid = f.prepare(payload)[0], f.prepared_xid(payload)
            if end <= resume:
                self.replayed += 1
                return
            state = self._streams.get(xid)
            if state is not None and state.mode == MATCH:
                raise StreamDiverged(xid, "the server concluded it before re-sending all bronze holds of it")
            self._streams.pop(xid, None)
            self._emit(lsn, payload)
        elif kind == f.STREAM_ABORT:
            xid, subxid = f.stream_abort(payload)
            if xid == subxid:
                if 0 < lsn <= resume:
                    self.replayed += 1
                    return
                # A top-level abort drops every copy of the transaction, however much of it matched.
                self._streams.pop(xid, None)
                self._emit(lsn, payload)
            else:
                state = self._streams.get(xid)
                if state is not None and state.mode == MATCH:
                    self._match(state, lsn, payload)
                else:
                    self._emit(lsn, payload)
        elif kind in (f.COMMIT_PREPARED, f.ROLLBACK_PREPARED):
            end = f.prepare(payload)[0] if kind == f.COMMIT_PREPARED else f.rollback_prepared(payload)[0]
            if end <= resume:
                self.replayed += 1
            else:
                self._emit(lsn, payload)
        elif kind == f.MESSAGE and not f.message_is_transactional(payload) and 0 < lsn <= resume:
            self.replayed += 1
        else:
            self._emit(lsn, payload)

    def _start_txn(self, kind: str, key: int, xid: int, lsn: int, payload: bytes, done: bool) -> None:
        self._drop_stream_copy(xid)
        if done:
            self._txn = _Incoming(DROP, xid, key=key)
            self.replayed += 1
            return
        held = self._out.txn
        if held is not None:
            held_kind, held_key, _, unit = held
            if (held_kind, held_key) != (kind, key):
                raise LandError(
                    f"bronze ends inside the transaction whose {'commit' if held_kind == 'B' else 'prepare'} "
                    f"is at {format_lsn(held_key)}, but the server sent the one at {format_lsn(key)} "
                    "instead of sending it again; bronze and the slot do not belong together",
                    lsn=format_lsn(lsn))
            self._txn = _Incoming(MATCH, xid, _Match(unit.count, unit.digest), key=key)
            self.replayed += 1
            self._check_txn_match(self._txn, lsn)
            return
        self._txn = _Incoming(LAND, xid, key=key)
        self._emit(lsn, payload, in_txn=True)

    def _drop_stream_copy(self, xid: int) -> None:
        """A transaction bronze has streamed blocks of is being sent whole: its old copy is void."""
        if xid in self._out.streams and self._streams.get(xid) is None:
            self._emit(0, f.synthetic_stream_abort(xid))
            self._pending_supersede.discard(xid)

    def _feed_txn(self, txn: _Incoming, lsn: int, payload: bytes, kind: bytes) -> None:
        closing = kind in (f.COMMIT, f.PREPARE)
        if txn.mode == DROP:
            self.replayed += 1
        elif txn.mode == MATCH:
            if closing:
                raise LandError(f"bronze holds {txn.matching.target_count} messages of the transaction at "
                                f"{format_lsn(txn.key)}, the server re-sent only {txn.matching.count}",
                                lsn=format_lsn(lsn))
            self.replayed += 1
            if kind not in f.SCHEMA_KINDS:
                txn.matching.add(payload)
                self._check_txn_match(txn, lsn)
        else:
            self._emit(lsn, payload, in_txn=True)
        if closing:
            self._txn = None
            self._flush_deferred()

    def _check_txn_match(self, txn: _Incoming, lsn: int) -> None:
        if not txn.matching.done:
            return
        if not txn.matching.equal:
            raise LandError(f"the transaction at {format_lsn(txn.key)} was re-sent with other messages than "
                            "bronze holds of it; bronze was changed by something else than this lander",
                            lsn=format_lsn(lsn))
        txn.mode = LAND

    def _start_block(self, lsn: int, payload: bytes) -> None:
        xid, first = f.stream_start(payload)
        state = self._streams.get(xid)
        if first:
            if state is not None:
                raise LandError(f"the server started streamed transaction xid {xid} twice in one session",
                                lsn=format_lsn(lsn))
            held = self._out.streams.get(xid)
            if held is not None and xid not in self._pending_supersede:
                state = _Incoming(MATCH, xid, _Match(held.count, held.digest))
            else:
                if held is not None:
                    self._emit(0, f.synthetic_stream_abort(xid))
                    self._pending_supersede.discard(xid)
                state = _Incoming(LAND, xid)
            self._streams[xid] = state
        elif state is None:
            raise LandError(f"the server continued streamed transaction xid {xid} without starting it "
                            "in this session", lsn=format_lsn(lsn))
        block = _Incoming(state.mode, xid, state.match, start=(lsn, payload))
        self._block = block
        if state.mode == MATCH:
            self.replayed += 1
            if state.matching.done:       # bronze holds nothing of it beyond its first block's start
                self._match_done(state, lsn)
                block.mode = LAND
        if block.mode == LAND:
            self._open_block(block, rewrite=first and state.match is not None)

    def _open_block(self, block: _Incoming, rewrite: bool) -> None:
        assert block.start is not None  # a block keeps its Stream Start (_start_block)
        lsn, payload = block.start
        self._emit(lsn, f.continued_stream_start(block.xid) if rewrite else payload)
        block.opened = True

    def _feed_block(self, block: _Incoming, lsn: int, payload: bytes, kind: bytes) -> None:
        if kind == f.STREAM_STOP:
            self._block = None
            if block.opened:
                self._emit(lsn, payload)
            else:
                self.replayed += 1
            return
        if block.mode == MATCH:
            self.replayed += 1
            if kind not in f.SCHEMA_KINDS:
                self._match(self._streams[block.xid], lsn, payload)
                if self._streams[block.xid].mode == LAND:
                    block.mode = LAND
            return
        if not block.opened:
            self._open_block(block, rewrite=True)
        self._emit(lsn, payload)

    def _match(self, state: _Incoming, lsn: int, payload: bytes) -> None:
        state.matching.add(payload)
        if state.matching.done:
            self._match_done(state, lsn)

    def _match_done(self, state: _Incoming, lsn: int) -> None:
        if not state.matching.equal:
            raise StreamDiverged(state.xid, f"the first {state.matching.count} messages re-sent differ from bronze's")
        state.mode = LAND

    # -- output ------------------------------------------------------------------
    def _emit(self, lsn: int, payload: bytes, in_txn: bool = False) -> None:
        # Bronze may end inside a transaction the server has not finished re-sending; anything
        # else that must be landed meanwhile (blocks of other streams) waits until it is closed.
        if self._out.txn is not None and not in_txn:
            self._deferred.append((lsn, payload))
            return
        kind = payload[:1]
        if self._out.block is None and kind == f.STREAM_START:
            self._block_cut = (len(self.rows), self._out.state())
        elif self._out.txn is None and (kind == f.BEGIN or kind == f.BEGIN_PREPARE):
            self._txn_head = len(self.rows)
        seq = self._out.last_seq + 1
        self._out.add(seq, lsn, payload)
        self.rows.append((seq, lsn, payload))
        self.nbytes += len(payload)
        if self._out.block is None:
            self._block_cut = None

    def _flush_deferred(self) -> None:
        deferred, self._deferred = self._deferred, []
        for lsn, payload in deferred:
            self._emit(lsn, payload)

    def abandon(self, xid: int) -> bool:
        """Void bronze's copy of a streamed transaction the server will never send again.

        For a transaction that aborted before the walsender streamed it again:
        the walsender then sends nothing of it, not even a Stream Abort.
        Returns whether anything was landed.
        """
        if xid not in self._out.streams or xid in self._streams:
            return False
        self._emit(0, f.synthetic_stream_abort(xid))
        self._pending_supersede.discard(xid)
        return True

    def unresolved_streams(self) -> tuple[int, ...]:
        """Streams bronze holds blocks of that the server has not sent again in this session."""
        return tuple(x for x in self._out.streams if x not in self._streams)

    # -- batches -------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Messages numbered and not yet taken."""
        return len(self.rows)

    @property
    def in_block(self) -> bool:
        """Whether the last numbered message is inside a stream block (a batch cannot end here)."""
        return self._out.block is not None

    @property
    def quiescent(self) -> bool:
        """Everything received is in bronze and nothing is open: the flush may follow wal_end."""
        return (not self.rows and not self._deferred and self._txn is None and self._block is None
                and self._out.txn is None and self._out.block is None)

    @property
    def settled(self) -> bool:
        """Nothing received, landed or not, is inside a transaction or a stream block."""
        return (self._txn is None and self._block is None and self._out.txn is None and self._out.block is None
                and not self._deferred)

    @property
    def between_units(self) -> bool:
        """Nothing numbered is inside a transaction or a stream block: bronze may take a unit of the lander's here."""
        return self._out.txn is None and self._out.block is None and not self._deferred

    def take(self, batch: int, at_unit: bool = False) -> Batch | None:
        """The rows up to the last point a batch may end at, as batch number ``batch``.

        A batch never ends inside a stream block (a block is at most about
        logical_decoding_work_mem), nor right after a Relation/Type message.
        ``at_unit``: neither inside a transaction, when a transaction ended
        among the rows (the apply then finds whole transactions in the batch,
        and reads nothing of earlier ones again).
        """
        if self._block_cut is not None:
            cut, state = self._block_cut
        elif at_unit and (head := self._head_cut()) is not None:
            cut = head
            # Inside a transaction being landed, only the numbering moves (OutputTracker.add): the state
            # before its Begin is the state now with the transaction closed and its messages unnumbered.
            state = replace(self._out.state(), txn=None, last_seq=self.rows[cut - 1][0],
                            messages=self._out.messages - (len(self.rows) - cut))
        else:
            cut = len(self.rows)
            while cut and self.rows[cut - 1][2][:1] in f.SCHEMA_KINDS:
                cut -= 1
            state = self._out.state()
            if cut < len(self.rows):
                # Relation/Type messages change nothing in the state but the numbering.
                state = replace(state, last_seq=self.rows[cut - 1][0] if cut else self.landed.last_seq,
                                messages=state.messages - (len(self.rows) - cut))
        if cut == 0:
            return None
        self._txn_head = None
        rows = tuple(self.rows[:cut])
        del self.rows[:cut]
        nbytes = sum(map(len, map(_ROW_PAYLOAD, rows)))
        self.nbytes -= nbytes
        if self._block_cut is not None:
            self._block_cut = (0, self._block_cut[1])
        state = replace(state, batch=batch)
        self.landed = state
        return Batch(rows, state, nbytes)

    def _head_cut(self) -> int | None:
        """Where the open transaction's Begin is among the rows, when rows come before it and its own hold
        no Message (a logical message may change the snapshot requests' state, which the cut could not undo)."""
        head = self._txn_head
        if head is None or head == 0 or self._out.txn is None or self._deferred:
            return None
        if self.rows[head][2][:1] not in (f.BEGIN, f.BEGIN_PREPARE):
            raise LandError("the open transaction's Begin is not where it was numbered", seq=self.rows[head][0])
        if any(r[2][:1] == f.MESSAGE for r in self.rows[head:]):
            return None
        return head
