"""Read a logical replication slot over the streaming replication protocol.

psycopg2 opens the replication connection and sends START_REPLICATION; the
CopyBoth stream is then read and answered here, through the very libpq that
psycopg2 is linked with (``PQgetCopyData`` / ``PQputCopyData`` via ctypes).

Why not psycopg2's ``read_message``/``send_feedback``: on every keepalive,
psycopg2 moves the flush LSN it reports up to the keepalive's wal_end whenever
the flush LSN last given to it is at or past the start LSN of the last message
received. LSNs over the walsender are not monotonic (Relation, Type and Begin
with an Origin arrive with LSN 0/0; Begin, changes and Stream Stop carry LSNs
older than commits already confirmed), so psycopg2 would confirm transactions
that are received but not yet in bronze, and a crash would lose them. Here the
flush LSN is exactly what the caller confirmed, nothing else.
"""

from __future__ import annotations

import ctypes
import select
import time
from typing import TYPE_CHECKING

from cdc_apply.errors import LandError
from cdc_apply.pgoutput.messages import PG_EPOCH_UNIX_MICROS
from cdc_apply.pgoutput.wire import KEEPALIVE, STANDBY_STATUS, XLOG_DATA

if TYPE_CHECKING:
    from psycopg2.extras import LogicalReplicationConnection

_XLOG_HEADER = XLOG_DATA.size
_XLOG_KIND = ord("w")
# A bytes object copied from C memory in one call (what ctypes.string_at does behind a Python wrapper), its
# own prototype so that no setting of the shared ctypes.pythonapi function is touched.
_bytes_at = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t)(
    ("PyBytes_FromStringAndSize", ctypes.pythonapi))

class StreamInterrupted(Exception):
    """The replication connection ended or failed while streaming (may heal: reconnect)."""


def _libpq(module_file: str) -> ctypes.CDLL:
    # dlsym through psycopg2's extension module finds the libpq it is linked with (the same
    # PGconn layout), also when that is a private copy inside the binary wheel.
    lib = ctypes.CDLL(module_file)
    lib.PQgetCopyData.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.PQgetCopyData.restype = ctypes.c_int
    lib.PQputCopyData.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    lib.PQputCopyData.restype = ctypes.c_int
    lib.PQflush.argtypes = [ctypes.c_void_p]
    lib.PQflush.restype = ctypes.c_int
    lib.PQconsumeInput.argtypes = [ctypes.c_void_p]
    lib.PQconsumeInput.restype = ctypes.c_int
    lib.PQfreemem.argtypes = [ctypes.c_void_p]
    lib.PQfreemem.restype = None
    lib.PQerrorMessage.argtypes = [ctypes.c_void_p]
    lib.PQerrorMessage.restype = ctypes.c_char_p
    lib.PQgetResult.argtypes = [ctypes.c_void_p]
    lib.PQgetResult.restype = ctypes.c_void_p
    lib.PQresultErrorMessage.argtypes = [ctypes.c_void_p]
    lib.PQresultErrorMessage.restype = ctypes.c_char_p
    lib.PQclear.argtypes = [ctypes.c_void_p]
    lib.PQclear.restype = None
    return lib


def _libpq_holding_gil(module_file: str) -> ctypes.PyDLL:
    # The two calls made for every message never wait (PQgetCopyData with async = 1 only takes what
    # PQconsumeInput buffered; PQfreemem is free()): called through a PyDLL they keep the GIL, where a CDLL
    # call releases and takes it back each time, a wait behind the bronze append's thread whenever it runs.
    lib = ctypes.PyDLL(module_file)
    lib.PQgetCopyData.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.PQgetCopyData.restype = ctypes.c_int
    lib.PQfreemem.argtypes = [ctypes.c_void_p]
    lib.PQfreemem.restype = None
    return lib


class ReplicationReader:
    """One START_REPLICATION session: yields ``(lsn, payload)`` and sends standby status updates.

    ``lsn`` is the XLogData start the walsender sent with the message. The
    reader answers keepalives that ask for a reply and sends a status update
    every ``status_seconds`` on its own; the write, flush and apply positions
    it reports are all the flush LSN given to :meth:`confirm` (never more).
    """

    def __init__(self, dsn: str, slot: str, options: dict[str, str], settings: dict[str, str],
                 status_seconds: float = 10.0, connect_timeout: float = 10.0,
                 application_name: str = "cdc_apply-land") -> None:
        self.dsn = dsn
        self.slot = slot
        self.options = dict(options)
        self.settings = dict(settings)
        self.status_seconds = status_seconds
        self.connect_timeout = connect_timeout
        self.application_name = application_name
        self.flush_lsn = 0
        self.wal_end = 0                 # the walsender's sent position, from its last keepalive
        self.keepalive_at = 0.0          # time.monotonic() of that keepalive
        self.received = 0
        # The walsender asked for a reply since the last confirmation: a server shutting down waits until
        # the flush LSN reaches its wal_end (the caller decides whether it may).
        self.reply_requested = False
        self._conn: LogicalReplicationConnection | None = None
        self._ptr: ctypes.c_void_p | None = None    # the PGconn of the started session
        self._lib: ctypes.CDLL | None = None        # the libpq psycopg2 is linked with (loaded by connect)
        self._quick: ctypes.PyDLL | None = None     # the same libpq, for the calls that never wait
        self._last_status = 0.0
        # One out-parameter for PQgetCopyData, made once: a ctypes object per message costs more than the call.
        self._buf = ctypes.c_void_p()
        self._buf_ref = ctypes.byref(self._buf)
        self._failed: StreamInterrupted | None = None

    # -- connection ----------------------------------------------------------------
    def connect(self) -> None:
        """Open the replication connection (psycopg2 errors propagate: the caller names them)."""
        import psycopg2
        import psycopg2._psycopg as ext
        from psycopg2.extras import LogicalReplicationConnection

        from cdc_apply.lander.options import TCP_KEEPALIVES, options_string

        self._lib = _libpq(ext.__file__)
        self._quick = _libpq_holding_gil(ext.__file__)
        self._conn = psycopg2.connect(self.dsn, connection_factory=LogicalReplicationConnection,
                                      connect_timeout=max(1, int(self.connect_timeout)),
                                      application_name=self.application_name[:63],
                                      options=options_string(self.settings), **TCP_KEEPALIVES)

    def start(self, start_lsn: int = 0) -> None:
        """Send START_REPLICATION at ``start_lsn`` (0: the slot's confirmed flush LSN), connecting first if needed.

        psycopg2 errors propagate unchanged; the caller knows what they mean.
        """
        if self._conn is None:
            self.connect()
        conn = self._conn
        assert conn is not None  # connect() opened it or raised
        cursor = conn.cursor()
        cursor.start_replication(slot_name=self.slot, decode=False, start_lsn=start_lsn, options=self.options)
        self._ptr = ctypes.c_void_p(conn.pgconn_ptr)
        self.flush_lsn = max(self.flush_lsn, start_lsn)
        self._last_status = time.monotonic()

    def close(self) -> None:
        """Drop the connection (the walsender ends; the slot keeps its confirmed flush LSN)."""
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken: closing is best effort
                pass
        self._conn = None
        self._ptr = None

    def __enter__(self) -> "ReplicationReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------
    def read(self, timeout: float) -> tuple[int, bytes] | None:
        """The next message, or ``None`` when none arrived within ``timeout`` seconds."""
        messages = self.read_many(timeout, 1)
        return messages[0] if messages else None

    def read_many(self, timeout: float, max_messages: int, max_bytes: int | None = None) -> list[tuple[int, bytes]]:
        """The messages that have arrived, up to ``max_messages`` or until their payloads reach ``max_bytes``
        (the one reaching it included); waits up to ``timeout`` seconds for the first one (``[]``: none came).

        One call drains what libpq holds, so the caller's checks run once per read, not once per message.
        An error met after some messages were read is raised by the next call.
        """
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        session = self._session()
        if session is None:
            raise StreamInterrupted("not connected")
        lib, ptr = session
        conn = self._conn
        assert conn is not None  # start() took the PGconn from it; close() drops both
        out: list[tuple[int, bytes]] = []
        append, count = out.append, 0
        nbytes, limit = 0, max_bytes if max_bytes is not None else 1 << 62
        assert self._quick is not None  # connect() loads both handles
        get, free, bytes_at = self._quick.PQgetCopyData, self._quick.PQfreemem, _bytes_at
        buf, ref, header, unpack = self._buf, self._buf_ref, _XLOG_HEADER, XLOG_DATA.unpack_from
        deadline = None
        while True:
            n = get(ptr, ref, 1)
            if n > 0:
                try:
                    data = bytes_at(buf, n)
                finally:
                    free(buf)
                if n >= header and data[0] == _XLOG_KIND:
                    append((unpack(data)[1], data[header:]))
                    count += 1
                    nbytes += n - header
                    if count >= max_messages or nbytes >= limit:
                        break
                else:
                    self._handle(data)
                continue
            if n < 0:
                failed = StreamInterrupted((self._final_error(lib, ptr) or "the server ended the replication stream")
                                           if n == -1 else self._error())
                if not out:
                    raise failed
                self._failed = failed
                break
            if out:
                break
            self._status_if_due()
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout
            left = deadline - now
            if left <= 0:
                break
            try:
                ready, _, _ = select.select([conn], [], [], min(left, self.status_seconds))
            except (OSError, ValueError) as exc:
                raise StreamInterrupted(f"the replication socket failed: {exc}") from None
            if ready and lib.PQconsumeInput(ptr) == 0:
                raise StreamInterrupted(self._error())
        self.received += len(out)
        return out

    def _session(self) -> tuple[ctypes.CDLL, ctypes.c_void_p] | None:
        """libpq and the PGconn of the started session; ``None`` before :meth:`start` and after :meth:`close`."""
        if self._ptr is None:
            return None
        assert self._lib is not None  # start() sets the PGconn only after connect() loaded libpq
        return self._lib, self._ptr

    def _handle(self, data: bytes) -> None:
        """A message other than XLogData: a keepalive (anything else is refused)."""
        kind = data[:1]
        if kind == b"k" and len(data) >= KEEPALIVE.size:
            _, wal_end, _, reply = KEEPALIVE.unpack_from(data)
            self.wal_end = max(self.wal_end, wal_end)
            self.keepalive_at = time.monotonic()
            if reply:
                self.reply_requested = True
                self.send_status()
            return
        raise LandError(f"the server sent an unknown replication message {kind!r} ({len(data)} bytes)")

    def _error(self) -> str:
        session = self._session()
        text = session[0].PQerrorMessage(session[1]) if session is not None else None
        return (text or b"").decode("utf-8", "replace").strip() or "the replication connection failed"

    def _final_error(self, lib: ctypes.CDLL, ptr: ctypes.c_void_p) -> str:
        messages = []
        while True:
            result = lib.PQgetResult(ptr)
            if not result:
                break
            text = lib.PQresultErrorMessage(result)
            if text:
                messages.append(text.decode("utf-8", "replace").strip())
            lib.PQclear(result)
        return "; ".join(m for m in messages if m)

    # -- feedback --------------------------------------------------------------------
    def confirm(self, flush_lsn: int, reply: bool = False) -> None:
        """Tell the server everything before ``flush_lsn`` is durably landed (never goes back)."""
        self.flush_lsn = max(self.flush_lsn, flush_lsn)
        self.reply_requested = False
        self.send_status(reply=reply)

    def request_keepalive(self) -> None:
        """Ask the walsender for a keepalive now (it carries its current wal_end)."""
        self.send_status(reply=True)

    def send_status(self, reply: bool = False) -> None:
        """A Standby Status Update: write = flush = apply = the confirmed flush LSN."""
        session = self._session()
        if session is None:
            return
        lib, ptr = session
        now = time.time_ns() // 1000 - PG_EPOCH_UNIX_MICROS
        lsn = self.flush_lsn
        message = STANDBY_STATUS.pack(b"r", lsn, lsn, lsn, now, 1 if reply else 0)
        if lib.PQputCopyData(ptr, message, len(message)) != 1 or lib.PQflush(ptr) != 0:
            raise StreamInterrupted(self._error())
        self._last_status = time.monotonic()

    def _status_if_due(self) -> None:
        if time.monotonic() - self._last_status >= self.status_seconds:
            self.send_status()
