"""What bronze already holds of one source, in the terms the lander resumes from.

A :class:`ResumeState` is written as the ``userMetadata`` of every Delta commit
the lander makes (in the same commit as the rows, so the two never disagree)
and can also be rebuilt from the bronze rows alone (:func:`rebuild_state`).

* ``resume_lsn``: the largest end LSN of a *complete unit* in bronze — a
  transaction's Commit, Prepare, Commit Prepared, Rollback Prepared, Stream
  Commit, Stream Prepare or top-level Stream Abort, or a non-transactional
  logical message. The walsender decodes WAL in order and sends each unit when
  it decodes the record that completes it, so every unit completed before this
  position is in bronze. It is both the START_REPLICATION position and the
  flush LSN the lander confirms.
* ``txn``: a plain or prepared transaction bronze holds only the head of (a
  batch ended inside it); ``streams``: streamed transactions that have blocks in
  bronze but no Stream Commit/Abort/Prepare yet. For each, the number of
  messages landed (Relation/Type, Begin and block framing not counted) and a
  running digest of them, to recognise them when the server sends them again.
* ``prepared``: two-phase transactions whose Prepare is in bronze and whose
  Commit/Rollback Prepared is not yet (their gid and prepare end LSN).
* ``confirmed_lsn``: the farthest the lander may have confirmed the slot to —
  the slot's confirmed flush LSN when this source's landing began, or a later
  wal_end the lander wrote here before confirming it (when nothing was open).
  A slot that stands past ``max(resume_lsn, confirmed_lsn)`` is not the one
  bronze was landed from (dropped and created again, or advanced by hand).
  ``None``: not known (state rebuilt from rows, or written by an older lander).
* ``snapshots``: tables with a snapshot in bronze, snapshot requests not served
  yet, and a snapshot left open (:mod:`cdc_apply.lander.snapshots.state`). The
  lander's snapshot stream (xid 2) is not among ``streams``: it is never sent
  again by the server, and its Stream Commit does not move ``resume_lsn``
  (the snapshot's LSN belongs to another slot's position, docs/SNAPSHOTS.md).

A :class:`Batch` is what a bronze writer commits: rows and the state after them. These records sit below
the sequencer, the writers and the snapshots, which all hand them on (the snapshots import nothing of the
lander above this module and its connection settings).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Iterable

from cdc_apply.lander import framing as f
from cdc_apply.lander.snapshots.state import SnapshotState, SnapshotTracker, is_snapshot_stream

STATE_VERSION = 1


@dataclass(frozen=True)
class OpenTxn:
    """A plain (``B``) or prepared (``b``) transaction whose head is in bronze."""

    kind: str
    key: int        # Begin's final_lsn, or Begin Prepare's prepare_lsn: same when re-sent
    xid: int
    count: int = 0
    digest: bytes = b""


@dataclass(frozen=True)
class OpenStream:
    """A streamed transaction with blocks in bronze and no conclusion yet."""

    xid: int
    count: int = 0
    digest: bytes = b""


@dataclass(frozen=True)
class ResumeState:
    """Where one source's landing stands; see the module docstring."""

    batch: int = 0               # the last batch written (Delta txnVersion)
    last_seq: int = -1           # the largest seq in bronze (-1: none yet)
    resume_lsn: int = 0
    txn: OpenTxn | None = None
    streams: tuple[OpenStream, ...] = ()
    prepared: tuple[tuple[str, int], ...] = ()
    messages: int = 0            # messages landed so far (all runs), for progress only
    confirmed_lsn: int | None = 0
    snapshots: SnapshotState = SnapshotState()

    @property
    def landed(self) -> bool:
        """Whether bronze holds anything of this source."""
        return self.last_seq >= 0

    def to_json(self, app_id: str, run_id: str) -> str:
        """The ``userMetadata`` text of a bronze commit."""
        body = {
            "app": app_id, "run": run_id, "v": STATE_VERSION, "batch": self.batch,
            "last_seq": self.last_seq, "resume_lsn": self.resume_lsn, "messages": self.messages,
            "txn": None if self.txn is None else [self.txn.kind, self.txn.key, self.txn.xid,
                                                   self.txn.count, self.txn.digest.hex()],
            "streams": [[s.xid, s.count, s.digest.hex()] for s in self.streams],
            "prepared": [list(p) for p in self.prepared],
            "confirmed": self.confirmed_lsn,
        }
        if not self.snapshots.empty:
            body["snap"] = self.snapshots.to_body()
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> tuple[str, "ResumeState"]:
        """``(app_id, state)`` from a commit's ``userMetadata``; raises ``ValueError`` if it is not ours."""
        body = json.loads(text)
        if not isinstance(body, dict) or body.get("v") != STATE_VERSION or "app" not in body:
            raise ValueError("not a cdc_apply lander commit")
        txn = body["txn"]
        return body["app"], cls(
            batch=int(body["batch"]), last_seq=int(body["last_seq"]), resume_lsn=int(body["resume_lsn"]),
            txn=None if txn is None else OpenTxn(txn[0], int(txn[1]), int(txn[2]), int(txn[3]),
                                                 bytes.fromhex(txn[4])),
            streams=tuple(OpenStream(int(x), int(n), bytes.fromhex(d)) for x, n, d in body["streams"]),
            prepared=tuple((str(g), int(lsn)) for g, lsn in body["prepared"]),
            messages=int(body.get("messages", 0)),
            confirmed_lsn=None if body.get("confirmed") is None else int(body["confirmed"]),
            snapshots=SnapshotState.from_body(body.get("snap")),
        )


@dataclass(frozen=True)
class Batch:
    """Rows to append as one Delta commit, and the resume state after them."""

    rows: tuple[tuple[int, int, bytes], ...]    # (seq, lsn, payload)
    state: ResumeState
    nbytes: int


class _Unit:
    """The messages of one open unit landed so far: their number and running digest (:func:`framing.chain`).

    The digest is folded only when asked for (a batch cut inside the unit): most units are closed within
    the batch they began in and never need it, and hashing every message was most of the per-message cost.
    """

    __slots__ = ("count", "_digest", "_pending")

    def __init__(self, count: int = 0, digest: bytes = b"") -> None:
        self.count = count
        self._digest = digest
        self._pending: list[bytes] = []

    def add(self, payload: bytes) -> None:
        self.count += 1
        self._pending.append(payload)

    def extend(self, payloads: list[bytes]) -> None:
        self.count += len(payloads)
        self._pending.extend(payloads)

    @property
    def digest(self) -> bytes:
        if self._pending:
            digest = self._digest
            for payload in self._pending:
                digest = f.chain(digest, payload)
            self._digest, self._pending = digest, []
        return self._digest


@dataclass
class OutputTracker:
    """Follows the framing of the messages *as landed* and keeps the resume state up to date.

    Fed with every message appended to bronze, in seq order; :meth:`state`
    returns the :class:`ResumeState` after the last one.
    """

    base: ResumeState
    last_seq: int = 0
    resume_lsn: int = 0
    messages: int = 0
    txn: tuple[str, int, int, _Unit] | None = None     # (kind, key, xid, unit)
    block: int | None = None                           # xid of the open stream block
    streams: dict[int, _Unit] = field(default_factory=dict)
    prepared: dict[str, int] = field(default_factory=dict)
    snap: SnapshotTracker = field(default_factory=lambda: SnapshotTracker(None))

    @classmethod
    def starting_at(cls, state: ResumeState, source: str | None = None) -> "OutputTracker":
        """``source``: whose snapshot requests count (``None``: every request)."""
        t = cls(state, state.last_seq, state.resume_lsn, state.messages)
        t.snap = SnapshotTracker.of(state.snapshots, source)
        if state.txn is not None:
            t.txn = (state.txn.kind, state.txn.key, state.txn.xid, _Unit(state.txn.count, state.txn.digest))
        t.streams = {s.xid: _Unit(s.count, s.digest) for s in state.streams}
        t.prepared = dict(state.prepared)
        return t

    def add_snapshot_rows(self, count: int) -> None:
        """Account for ``count`` Inserts landed inside a block of the lander's snapshot stream (xid 2)."""
        if self.block is None or not is_snapshot_stream(self.block):
            raise ValueError("snapshot rows outside a block of the snapshot stream")
        self.last_seq += count
        self.messages += count

    def _complete(self, lsn: int) -> None:
        self.resume_lsn = max(self.resume_lsn, lsn)

    def add_changes(self, payloads: list[bytes]) -> bool:
        """Account for row changes (:data:`framing.CHANGES`) landed in a row inside an open transaction, as
        :meth:`add` would one by one; False, with nothing done, when no transaction is open outside a block
        (then :meth:`add` each)."""
        if self.txn is None or self.block is not None:
            return False
        self.last_seq += len(payloads)
        self.messages += len(payloads)
        self.txn[3].extend(payloads)
        return True

    def add(self, seq: int, lsn: int, payload: bytes) -> None:
        """Account for one landed message (``lsn``: the position the server sent it with)."""
        self.last_seq = seq
        self.messages += 1
        kind = payload[:1]
        if self.block is not None:
            if kind == f.STREAM_STOP:
                self.block = None
            elif is_snapshot_stream(self.block):
                self.snap.in_snapshot(payload)     # no digest: never sent again, never matched
            elif kind not in f.SCHEMA_KINDS:
                self.streams.setdefault(self.block, _Unit()).add(payload)
                if kind == f.MESSAGE:
                    self.snap.message(payload, f"s{self.block}")
            return
        if self.txn is not None:
            if kind == f.COMMIT:
                self.txn = None
                self._complete(f.commit_end(payload))
                self.snap.committed("t")
            elif kind == f.PREPARE:
                self.txn = None
                end, gid = f.prepare(payload)
                self.prepared[gid] = end
                self._complete(end)
                self.snap.prepared("t", gid)
            elif kind not in f.SCHEMA_KINDS:
                self.txn[3].add(payload)
                if kind == f.MESSAGE:
                    self.snap.message(payload, "t")
            return
        if kind == f.BEGIN:
            key, xid = f.begin(payload)
            self.txn = ("B", key, xid, _Unit())
        elif kind == f.BEGIN_PREPARE:
            key, _, xid, _ = f.begin_prepare(payload)
            self.txn = ("b", key, xid, _Unit())
        elif kind == f.STREAM_START:
            xid, first = f.stream_start(payload)
            self.block = xid
            if (first or xid not in self.streams) and not is_snapshot_stream(xid):
                self.streams[xid] = _Unit()
        elif kind == f.STREAM_ABORT:
            xid, subxid = f.stream_abort(payload)
            if is_snapshot_stream(xid):
                self.snap.snapshot_aborted()
            elif xid == subxid:
                self.streams.pop(xid, None)
                self.snap.dropped(f"s{xid}")
                self._complete(lsn)   # the abort record's end; 0 for the lander's own aborts
            elif xid in self.streams:
                self.streams[xid].add(payload)
        elif kind == f.STREAM_COMMIT:
            xid, end = f.stream_commit(payload)
            if is_snapshot_stream(xid):
                self.snap.snapshot_committed()     # its LSN is another slot's: resume_lsn stays
                return
            self.streams.pop(xid, None)
            self._complete(end)
            self.snap.committed(f"s{xid}")
        elif kind == f.STREAM_PREPARE:
            end, gid = f.prepare(payload)
            xid = f.prepared_xid(payload)
            self.streams.pop(xid, None)
            self.prepared[gid] = end
            self._complete(end)
            self.snap.prepared(f"s{xid}", gid)
        elif kind == f.COMMIT_PREPARED:
            end, gid = f.prepare(payload)
            self.prepared.pop(gid, None)
            self._complete(end)
            self.snap.committed("p" + gid)
        elif kind == f.ROLLBACK_PREPARED:
            end, gid = f.rollback_prepared(payload)
            self.prepared.pop(gid, None)
            self._complete(end)
            self.snap.dropped("p" + gid)
        elif kind == f.MESSAGE and not f.message_is_transactional(payload):
            self._complete(lsn)
            self.snap.message(payload, None)

    def state(self, batch: int | None = None) -> ResumeState:
        txn = None
        if self.txn is not None:
            kind, key, xid, unit = self.txn
            txn = OpenTxn(kind, key, xid, unit.count, unit.digest)
        return ResumeState(
            batch=self.base.batch if batch is None else batch, last_seq=self.last_seq,
            resume_lsn=self.resume_lsn, txn=txn,
            streams=tuple(OpenStream(x, u.count, u.digest) for x, u in sorted(self.streams.items())),
            prepared=tuple(sorted(self.prepared.items())), messages=self.messages,
            confirmed_lsn=self.base.confirmed_lsn, snapshots=self.snap.state())


def rebuild_state(rows: Iterable[tuple[int, int, bytes]], batch: int = 0, source: str | None = None) -> ResumeState:
    """The resume state after bronze rows ``(seq, lsn, payload)`` of one source, in seq order.

    Used when no lander commit metadata describes the table (it was written by
    something else, or its Delta history was cleaned up).
    """
    tracker = OutputTracker.starting_at(ResumeState(confirmed_lsn=None), source)
    for seq, lsn, payload in rows:
        tracker.add(seq, lsn, payload)
    return replace(tracker.state(), batch=batch)
