"""The lander: a PostgreSQL logical replication slot into the bronze table, exactly once.

One loop: read messages (:class:`~cdc_apply.lander.reader.ReplicationReader`),
filter and number them (:class:`~cdc_apply.lander.sequencer.Sequencer`), append
a batch when it is big or old enough (one Delta commit: through delta-rs,
:class:`~cdc_apply.lander.bronze_rs.RsBronzeWriter`, for a bronze path it may write; else Spark's
:class:`~cdc_apply.lander.bronze_writer.BronzeWriter`), and only then confirm
the batch's resume LSN to the server. A lost connection is reopened with
exponential backoff; each new session starts from what bronze holds.
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from operator import itemgetter
from typing import Callable, TextIO

from cdc_apply.config import Config
from cdc_apply.delta.refs import bronze_ref
from cdc_apply.errors import LandError
from cdc_apply.lander.bronze_files import ArrowAppender
from cdc_apply.lander.bronze_rs import open_writer
from cdc_apply.lander.dsn import (
    SourceLandError,
    Target,
    connection_error,
    is_transient,
    resolve_dsn,
    scrub,
    scrubbed_line,
)
from cdc_apply.lander.options import SESSION_SETTINGS, replication_options
from cdc_apply.lander.reader import ReplicationReader, StreamInterrupted
from cdc_apply.lander.sequencer import Sequencer, StreamDiverged
from cdc_apply.lander.server import SourceServer
from cdc_apply.lander.snapshots.port import SnapshotPort
from cdc_apply.lander.snapshots.take import Snapshots
from cdc_apply.lander.state import Batch, ResumeState
from cdc_apply.lander.summary import BatchReport, LandSummary, human_bytes
from cdc_apply.metrics.registry import record_connected, record_connection_lost, record_landed_batch
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.pgoutput.wire import first_bytes

POLL_SECONDS = 0.2
# An idle --once run waiting for the keepalive it asked for (_idle) reads with this timeout instead: a read
# returns only with messages or at its timeout, and the run ends as soon as the keepalive shows it is done.
IDLE_POLL_SECONDS = 0.02
ORPHAN_CHECK_SECONDS = 5.0
# Idle, the slot is confirmed past bronze's last unit (to the walsender's wal_end) only once it holds
# this much WAL back: each such confirmation costs a bronze commit (see Lander._follow).
FOLLOW_BYTES = 16 * 1024 * 1024
MAX_DIVERGENCES = 3
# Messages read at most between two passes of the session's checks (a batch due, an append done, stop).
READ_MESSAGES = 2000
_PAYLOAD = itemgetter(2)      # of a batch's (seq, lsn, payload) rows


@dataclass
class _SessionClock:
    """What one streaming session decides by (monotonic seconds)."""

    last_data: float                     # the last read that gave messages
    last_forward: float                  # the last confirmation of wal_end (_follow)
    stable: tuple[int, float]            # wal_end and since when it has not moved (an idle --once run)
    orphan_check: float = 0.0            # the last look for stream blocks whose end never came
    pending_since: float | None = None   # the oldest message waiting for a bronze commit
    idle_target: int | None = None       # an idle --once run's flush position to reach
    probe_at: float = 0.0                # the last keepalive asked for while idle
    snapshot_due: bool = False           # a snapshot waits for bronze to be between units


class Lander:
    """Lands the configured source's slot into bronze. ``probe`` is called at each step (tests crash there).
    ``spark`` is used only where bronze needs Spark's writer (:func:`~cdc_apply.lander.bronze_rs.spark_reason`);
    None is enough for a bronze path delta-rs writes."""

    def __init__(self, config: Config, spark=None, out: TextIO | None = None, stop: threading.Event | None = None,
                 probe: Callable[..., None] | None = None) -> None:
        self.config = config
        self.source = config.source
        self.land = config.land
        self.options = replication_options(config.source)
        self.dsn = resolve_dsn(config.source)
        self.target = Target.of(self.dsn)
        self.spark = spark
        self.out = out or sys.stdout
        self.stop = stop or threading.Event()
        self.probe = probe or (lambda event, **info: None)
        self._probe_messages = probe         # called for every message only when there is one to call
        self.server = SourceServer(self.dsn, config.source, config.source.connect_timeout)
        self.server.source_file = config.origin_file
        self.state = ResumeState()
        self.reports: list[BatchReport] = []
        self.replayed = 0
        self.reconnects = 0
        # One append may run while the next batch is read: (future, batch, started).
        self._inflight: tuple[Future, Batch, float] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._first_due = True               # the run's first batch is landed without waiting (see _session)

    @cached_property
    def writer(self):
        """The bronze writer (delta-rs's or Spark's), opened at first use: the constructor reads nothing."""
        return open_writer(self.spark, bronze_ref(self.config), self.source.name, say=self.say)

    @cached_property
    def snapshots(self) -> Snapshots:
        return Snapshots(SnapshotPort(self.source, self.dsn, self.server, self.writer,
                                      lambda: ArrowAppender(self.writer), self.land.batch_bytes,
                                      self.say, lambda event, **info: self.probe(event, **info)))

    def say(self, text: str) -> None:
        print(f"[land {self.source.name}] {text}", file=self.out, flush=True)

    # -- the run ---------------------------------------------------------------------
    def run(self, once: bool = False) -> LandSummary:
        """Land until idle (``once``) or until :attr:`stop` is set; returns what was done."""
        started = time.monotonic()
        try:
            self.server.lock()
            self.server.preflight()
            # A snapshot left open is closed first; a slot the lander creates comes with its initial snapshot.
            landed = self.snapshots.initial(self.snapshots.close_open(self.writer.open()))
            slot = self.server.ensure_slot(landed)
        except BaseException:
            self.server.close()         # the lander lock goes with the session: a next run may start
            raise
        unchecked = landed.landed and landed.confirmed_lsn is None
        # From here on the slot may stand where it stands now (checked above, or not checkable).
        self.state = replace(landed, confirmed_lsn=max(landed.confirmed_lsn or 0, slot.confirmed_flush_lsn))
        if self.server.created:
            self.say(f"created {' and '.join(self.server.created)}")
        self.say(f"slot {self.source.slot!r} (confirmed flush {format_lsn(slot.confirmed_flush_lsn)}) "
                 f"of {self.target.shown} -> {self.writer.ref}; "
                 + (f"bronze holds seq ..{landed.last_seq}" if landed.landed else "bronze is empty")
                 + f", resuming at lsn {format_lsn(landed.resume_lsn)}"
                 f"{' (state rebuilt from rows)' if self.writer.rebuilt_from_rows else ''}"
                 + ("; the slot's position is not checked against bronze: no lander commit records how far "
                    "it was confirmed" if unchecked else ""))
        attempt = 0
        supersede: set[int] = set()          # xids of transactions to land again whole
        diverged: dict[int, int] = {}        # xid -> how many times its re-read differed
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bronze-append")
        try:
            while not self.stop.is_set():
                if self.state.txn is None and self.snapshots.due(self.state):
                    self.state = self.snapshots.take(self.state)
                reader, seq = self._reader(), None
                try:
                    self._start(reader)
                    record_connected(self.source.name)
                    seq = Sequencer(self.state, frozenset(supersede), self.source.name)
                    if (self._session(reader, seq, once) and not self.snapshots.due(self.state)
                            and self.snapshots.flow is None):
                        break
                except StreamDiverged as err:
                    self._land(seq, reader, confirm=False)
                    diverged[err.xid] = diverged.get(err.xid, 0) + 1
                    if diverged[err.xid] > MAX_DIVERGENCES:
                        raise LandError(f"{err}; it differed again after {MAX_DIVERGENCES} re-reads") from None
                    supersede.add(err.xid)
                    self.say(f"{err}: reading the slot again to land it whole")
                except StreamInterrupted as err:
                    # Whatever arrived whole is landed; the next session starts after it.
                    self._land(seq, reader, confirm=False)
                    attempt = 1 if reader.received else attempt + 1
                    self._backoff(attempt, scrub(str(err), self.dsn))
                finally:
                    self.replayed += seq.replayed if seq is not None else 0
                    reader.close()
                self.reconnects += 1
                attempt = self._reconnect_checks(attempt)
        finally:
            self._pool.shutdown(wait=True)
            self.snapshots.close()
            self.server.close()
        summary = LandSummary(tuple(self.reports), self.replayed, self.reconnects,
                              time.monotonic() - started, self.state)
        rate = summary.messages / summary.seconds if summary.seconds > 0 else 0.0
        if self.snapshots.tables:
            self.say(f"snapshots: {self.snapshots.tables} tables, {self.snapshots.rows:,} rows")
        self.say(f"done: {len(summary.batches)} batches, {summary.messages} messages, "
                 f"{human_bytes(summary.nbytes)} in {summary.seconds:.1f} s ({rate:.0f} messages/s); "
                 f"{summary.replayed} re-sent messages skipped; resume lsn {format_lsn(self.state.resume_lsn)}")
        return summary

    def _reader(self) -> ReplicationReader:
        return ReplicationReader(self.dsn, self.source.slot, self.options, SESSION_SETTINGS,
                                 status_seconds=self.land.keepalive_seconds,
                                 connect_timeout=self.source.connect_timeout,
                                 application_name=f"cdc_apply-land-{self.source.name}")

    def _start(self, reader: ReplicationReader) -> None:
        import psycopg2

        try:
            reader.connect()
        except psycopg2.Error as exc:
            if is_transient(exc):
                raise StreamInterrupted(str(exc)) from None
            raise connection_error(exc, self.dsn, replication=True) from None
        try:
            reader.start(self.state.resume_lsn)
        except psycopg2.Error as exc:
            if is_transient(exc):
                raise StreamInterrupted(str(exc)) from None
            raise LandError(f"START_REPLICATION failed: {scrubbed_line(exc, self.dsn)}",
                            slot=self.source.slot, dsn=self.target.shown) from None
        # Everything up to the resume LSN is in bronze: say so at once (the previous run may
        # have stopped between its last Delta commit and its confirmation).
        reader.confirm(self.state.resume_lsn)

    def _backoff(self, attempt: int, why: str) -> None:
        if attempt > self.land.retries:
            raise LandError(f"the connection failed {attempt} times in a row, giving up (land.retries = "
                            f"{self.land.retries}); last error: {why}", dsn=self.target.shown)
        delay = min(self.land.backoff_max_seconds, self.land.backoff_seconds * 2 ** (attempt - 1))
        record_connection_lost(self.source.name, why.splitlines()[0] if why else "no message")
        self.say(f"connection lost ({why.splitlines()[0] if why else 'no message'}); "
                 f"reconnecting in {delay:.1f} s (attempt {attempt} of {self.land.retries})")
        self.stop.wait(delay)

    def _reconnect_checks(self, attempt: int) -> int:
        """Check the source again before streaming again; a server still starting is retried."""
        while not self.stop.is_set():
            try:
                self.server.close()
                self.server.connect()
                self.server.preflight()
                self.server.ensure_slot(self.state)
                break
            except LandError as err:
                if not (isinstance(err, SourceLandError) and err.transient):
                    raise
                attempt += 1
                self._backoff(attempt, err.detail)
        return attempt

    # -- one replication session ------------------------------------------------------------
    def _session(self, reader: ReplicationReader, seq: Sequencer, once: bool) -> bool:
        """Stream until idle (``once``) or stopped (True), or until a snapshot is due and bronze is between units
        (False: the caller takes it, then streams again from bronze's resume point)."""
        now = time.monotonic()
        clock = _SessionClock(last_data=now, last_forward=now, stable=(reader.wal_end, now))
        while True:
            if self.stop.is_set():
                self._land(seq, reader)
                return True
            # Whether a snapshot is due is asked at every pass, wherever the stream stands: a read of all that
            # arrived mostly ends inside a transaction on a busy stream. A due snapshot then waits for bronze to
            # be between units, messages read one at a time meanwhile, so the stream cannot put it off for ever.
            if clock.snapshot_due or self.snapshots.due(self.state, now):
                clock.snapshot_due = True
                if seq.between_units:
                    self._land(seq, reader)     # the append in flight first, then what is pending
                    return False
            messages = self._read(reader, seq, clock)
            if messages is None:
                # The stream reached the point of the chunks copied meanwhile: they land before this message,
                # which the walsender sends again in the next session.
                self._land(seq, reader)
                return False
            now = time.monotonic()
            self._take(seq, messages, clock, now)
            self._land_when_due(seq, reader, len(messages), clock, now)
            if messages:
                continue
            if self._may_follow(seq, reader) and (reader.reply_requested or (
                    reader.wal_end - reader.flush_lsn >= FOLLOW_BYTES
                    and now - clock.last_forward >= self.land.keepalive_seconds)):
                # The walsender waits for it (a server shutting down), or the slot holds much WAL back.
                self._follow(reader)
                clock.last_forward = now
            if once and now - clock.last_data >= self.land.idle_exit_seconds and self._idle(seq, reader, clock, now):
                return True

    def _read(self, reader: ReplicationReader, seq: Sequencer, clock: _SessionClock) -> list | None:
        """What has arrived, up to where the batch is full (the session's checks run once per read); one message
        at a time while a snapshot is due or a chunk flow is under way; None: the flow's point is reached."""
        flow, poll = self.snapshots.flow, POLL_SECONDS if clock.idle_target is None else IDLE_POLL_SECONDS
        if flow is None and not clock.snapshot_due:
            land = self.land
            return reader.read_many(poll, max(1, min(READ_MESSAGES, land.batch_messages - seq.pending)),
                                    max(1, land.batch_bytes - seq.nbytes))
        message = reader.read(poll)
        if flow is not None and self._inflight is None and flow.reached(message, seq, reader):
            return None
        return [message] if message is not None else []

    def _take(self, seq: Sequencer, messages: list, clock: _SessionClock, now: float) -> None:
        """Number the messages read (each through the test probe when there is one), and keep the clock."""
        if messages:
            if self._probe_messages is None:
                seq.feed_many(messages)
            else:
                for lsn, payload in messages:
                    self._probe_messages("message", lsn=lsn, payload=payload)
                    seq.feed(lsn, payload)
            clock.last_data, clock.idle_target = now, None
        if now - clock.orphan_check >= ORPHAN_CHECK_SECONDS:
            self._resolve_orphans(seq)
            clock.orphan_check = now
        if clock.pending_since is None and seq.pending:
            clock.pending_since = now

    def _land_when_due(self, seq: Sequencer, reader: ReplicationReader, read: int, clock: _SessionClock,
                       now: float) -> None:
        """Land the pending batch when it is full or old enough, at a point where a batch may end; ``read``: how
        many messages the last read gave."""
        land = self.land
        full = seq.pending >= land.batch_messages or seq.nbytes >= land.batch_bytes
        due = full or (clock.pending_since is not None and now - clock.pending_since >= land.batch_seconds)
        if self._first_due and not due and seq.pending and self.snapshots.flow is None and read < READ_MESSAGES:
            # The run's first batch does not wait out batch_seconds: it is due once what has arrived is
            # read, at a point between units (a fresh start shows its first rows in bronze at once).
            due = seq.between_units
        # A batch ends only between stream blocks: wait for the block to end (it is at most
        # about logical_decoding_work_mem), unless the batch has grown twice too big.
        if self._inflight is not None and (self._inflight[0].done() or full):
            # Done, or the next batch is full already: wait rather than buffer without bound.
            self._finish(reader)
        if seq.pending and due and self._inflight is None and (
                not seq.in_block or seq.pending >= 2 * land.batch_messages or seq.nbytes >= 2 * land.batch_bytes):
            # At the last transaction's end when one ended: a bronze commit that ends inside a transaction
            # makes the apply wait for its rest and then read its head from bronze again.
            self._land(seq, reader, wait=False, at_unit=True)
            self._first_due = False
            clock.pending_since = now if seq.pending else None

    def _idle(self, seq: Sequencer, reader: ReplicationReader, clock: _SessionClock, now: float) -> bool:
        """``--once`` after ``idle_exit_seconds`` without data: whether the stream is done (everything the slot
        had is landed, or the walsender waits for WAL that is not there), asking the walsender meanwhile."""
        if clock.idle_target is None:
            clock.idle_target = self._flush_position()
            reader.request_keepalive()
            clock.probe_at, clock.stable = now, (reader.wal_end, now)
            return False
        if reader.wal_end != clock.stable[0]:
            clock.stable = (reader.wal_end, now)
        caught_up = clock.idle_target >= 0 and reader.wal_end >= clock.idle_target
        # The walsender made no progress for as long again: it waits for WAL that is not there.
        still = reader.keepalive_at > clock.stable[1] and now - clock.stable[1] >= self.land.idle_exit_seconds
        if caught_up or still:
            self._land(seq, reader)
            if self._may_follow(seq, reader) and reader.wal_end - reader.flush_lsn >= FOLLOW_BYTES:
                self._follow(reader)
            return True
        if now - clock.probe_at >= 0.25:
            reader.request_keepalive()
            clock.probe_at = now
        return False

    def _may_follow(self, seq: Sequencer, reader: ReplicationReader) -> bool:
        """Nothing received is unlanded and nothing is open: all the walsender decoded up to its wal_end is in
        bronze."""
        return seq.quiescent and self._inflight is None and reader.wal_end > reader.flush_lsn

    def _follow(self, reader: ReplicationReader) -> None:
        """Confirm the walsender's wal_end (past bronze's last unit), after writing to bronze that it may be.

        Bronze records how far the slot may have been confirmed, so that a slot
        found farther on at the next start is known not to be the one bronze was
        landed from (:meth:`SourceServer.ensure_slot`): one Delta commit without rows.
        """
        target = reader.wal_end
        if target > (self.state.confirmed_lsn or 0):
            state = replace(self.state, batch=self.state.batch + 1, confirmed_lsn=target)
            self.writer.append(Batch((), state, 0))
            self.state = state
        reader.confirm(target)
        self.probe("followed", flush=target)

    def _flush_position(self) -> int:
        try:
            return self.server.wal_flush_lsn()
        except Exception:  # the side session is gone: rely on the walsender standing still
            self.server.close()
            return -1

    def _resolve_orphans(self, seq: Sequencer) -> None:
        xids = seq.unresolved_streams()
        if not xids:
            return
        try:
            status = self.server.xact_status(xids)
        except Exception:  # a question for later: the side session may be reconnecting
            self.server.close()
            return
        for xid, what in status.items():
            if what == "aborted" and seq.abandon(xid):
                self.say(f"streamed transaction xid {xid} aborted before the server sent it again: "
                         "landing a Stream Abort for what bronze holds of it")

    def _land(self, seq: Sequencer | None, reader: ReplicationReader, confirm: bool = True,
              wait: bool = True, at_unit: bool = False) -> None:
        """Append what may be cut as one batch, then confirm its resume LSN.

        ``wait=False`` runs the append in the background while the loop reads on;
        the confirmation follows when it is done (:meth:`_finish`). Batches are
        appended one at a time, in order.
        """
        self._finish(reader, confirm)
        if seq is None:
            return
        batch = seq.take(self.state.batch + 1, at_unit)
        if batch is None:
            return
        batch = replace(batch, state=replace(batch.state, confirmed_lsn=self.state.confirmed_lsn))
        assert self._pool is not None  # run() starts the pool before it reads anything to land
        self._inflight = (self._pool.submit(self.writer.append, batch), batch, time.monotonic())
        if wait:
            self._finish(reader, confirm)

    def _finish(self, reader: ReplicationReader, confirm: bool = True) -> None:
        """Wait for the append in flight (if any), then confirm and report it."""
        if self._inflight is None:
            return
        future, batch, started = self._inflight
        try:
            future.result()
        finally:
            self._inflight = None
        self.probe("appended", batch=batch)
        self.state = batch.state
        if confirm:
            try:
                reader.confirm(batch.state.resume_lsn)
            except StreamInterrupted:
                pass        # in bronze all the same; the next session confirms it first thing
            else:
                self.probe("confirmed", flush=reader.flush_lsn)
        lag = None
        try:
            lag = self.server.slot_lag()
        except Exception:  # progress only; never a reason to stop
            self.server.close()
        report = BatchReport(batch.state.batch, len(batch.rows), batch.nbytes, batch.rows[0][0],
                             batch.rows[-1][0], batch.rows[-1][1], reader.flush_lsn, lag,
                             time.monotonic() - started)
        self.reports.append(report)
        record_landed_batch(self.source.name, report, first_bytes(map(_PAYLOAD, batch.rows)))
        print(report.line(self.source.name), file=self.out, flush=True)
