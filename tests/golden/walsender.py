"""Live capture: one walsender (START_REPLICATION) per config, consumed while the workload runs.

Why not ``pg_logical_slot_get_binary_changes`` after the workload: before streaming or
spilling a transaction the decoder looks it up in the CLOG and silently discards the
changes of one that has already aborted (``ReorderBufferCheckAndTruncateAbortedTXN``).
Decoding after the fact therefore never streams a rolled-back large transaction, and a
Stream Abort of a top-level xid never appears. Decoding live, with the workload waiting
(:func:`wait_for_senders`) until every walsender has decoded past its changes before it
rolls back, shows what a caught-up subscriber sees.

The walsender protocol carries no xid per message; :func:`frame_xids` derives one from the
protocol framing (see its docstring).
"""

from __future__ import annotations

import select
import threading
import time
from typing import Any

from .harness import CaptureConfig

WAIT_SECONDS = 60.0


def _options_string(settings: dict[str, str]) -> str:
    # libpq `options`: spaces inside a value are escaped with a backslash.
    return " ".join(f"-c {key}={value.replace(' ', chr(92) + ' ')}" for key, value in settings.items())


class SlotReader(threading.Thread):
    """Consumes one slot through a logical replication connection into ``messages``.

    ``messages`` holds ``(data_start LSN as int, payload bytes)`` in arrival order.
    """

    def __init__(self, server: Any, dbname: str, slot: str, config: CaptureConfig) -> None:
        super().__init__(name=f"reader-{slot}", daemon=True)
        import psycopg2
        from psycopg2.extras import LogicalReplicationConnection

        self.slot = slot
        self.config = config
        self.messages: list[tuple[int, bytes]] = []
        self.error: BaseException | None = None
        self._target: int | None = None
        self._done = threading.Event()
        self.conn = psycopg2.connect(server.dsn(dbname, application_name=slot),
                                     connection_factory=LogicalReplicationConnection,
                                     options=_options_string(config.session_settings()))
        self.cursor = self.conn.cursor()
        self.cursor.start_replication(slot_name=slot, decode=False, start_lsn=0,
                                      options=dict(config.plugin_options()))

    def run(self) -> None:
        try:
            self._consume()
        except BaseException as exc:  # reported by finish(); a thread cannot raise to its caller
            self.error = exc
        finally:
            self._done.set()

    def _consume(self) -> None:
        asked = 0.0
        while True:
            msg = self.cursor.read_message()
            if msg is not None:
                self.messages.append((msg.data_start, bytes(msg.payload)))
                continue
            if self._target is not None:
                # A keepalive reply carries the walsender's position and follows every
                # message sent before it: past the target means nothing is left in flight.
                if self.cursor.wal_end >= self._target:
                    return
                if time.monotonic() - asked > 0.2:
                    self.cursor.send_feedback(reply=True)
                    asked = time.monotonic()
            select.select([self.conn], [], [], 0.1)

    def finish(self, target: int) -> list[tuple[int, bytes]]:
        """Stop once everything the walsender sent up to WAL position ``target`` has arrived."""
        self._target = target
        if not self._done.wait(WAIT_SECONDS):
            raise TimeoutError(f"{self.slot}: walsender did not reach {target:X} in {WAIT_SECONDS}s")
        self.conn.close()
        if self.error is not None:
            raise RuntimeError(f"{self.slot}: reading the slot failed: {self.error}") from self.error
        return self.messages


def wait_for_senders(conn: Any, slots: list[str]) -> int:
    """Flush WAL and wait until the walsenders of ``slots`` have decoded all of it.

    CHECKPOINT flushes the WAL of transactions still in progress (a walsender decodes only
    flushed WAL). Returns the WAL position every sender has passed.
    """
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
        target = int(cur.fetchone()[0])
        cur.execute("CHECKPOINT")
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            cur.execute("SELECT application_name, sent_lsn - '0/0'::pg_lsn FROM pg_stat_replication "
                        "WHERE application_name = ANY(%s)", (slots,))
            sent = {name: int(pos or 0) for name, pos in cur.fetchall()}
            if len(sent) == len(slots) and min(sent.values()) >= target:
                return target
            if time.monotonic() > deadline:
                raise TimeoutError(f"walsenders did not reach {target:X}: {sent}")
            time.sleep(0.02)


# Where the (top-level) xid sits in the messages that carry one: after the type byte and
# the LSNs/timestamps before it (and the flags byte, for the messages that have one).
_XID_OFFSET = {b"B": 17, b"S": 1, b"c": 1, b"A": 1, b"b": 25, b"P": 26, b"K": 26, b"p": 26, b"r": 34}


def frame_xids(messages: list[tuple[int, bytes]]) -> list[int]:
    """The xid each message belongs to by protocol framing (the walsender sends none).

    Begin..Commit: Begin's xid. Stream Start..Stop: Stream Start's xid. Begin Prepare..Prepare:
    its xid. Stream Commit, Stream Abort, Stream Prepare, Commit Prepared, Rollback Prepared:
    the top-level xid they carry. Anything outside a frame (non-transactional messages): 0.
    """
    xids: list[int] = []
    current = 0
    for _, payload in messages:
        kind = payload[:1]
        offset = _XID_OFFSET.get(kind)
        if offset is not None:
            current = int.from_bytes(payload[offset:offset + 4], "big")
        xids.append(current)
        if kind in (b"C", b"E", b"c", b"A", b"P", b"K", b"r", b"p"):
            current = 0
    return xids
