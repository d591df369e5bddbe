"""The pieces a capture is built from: capture configs, session settings, slots and workloads.

A *capture config* is one logical replication slot plus the pgoutput options it is read
with. All slots of a scenario are created before its workload runs, so every config sees
exactly the same WAL; the workload records *checkpoints* (table states) as it goes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# Text output of dates, times, floats, money and bytea depends on these; every session (workload,
# observer, decoding) sets them explicitly: the lander's own, so captures and landing agree.
from cdc_apply.lander.options import SESSION_SETTINGS

PUBLICATION = "golden"


@dataclass(frozen=True)
class CaptureConfig:
    """One slot and the options it is decoded with (``streaming``: off, on or parallel)."""

    name: str
    proto_version: int
    binary: bool = False
    streaming: str = "off"
    two_phase: bool = False
    timezone: str = "UTC"

    def slot_name(self, scenario: str) -> str:
        """Slots are cluster-wide, so the name carries the scenario too."""
        return f"golden_{scenario}_{self.name}"

    def plugin_options(self, publication: str = PUBLICATION) -> list[tuple[str, str]]:
        """The pgoutput options, in the order they are passed to the decoding function."""
        options = [("proto_version", str(self.proto_version)),
                   ("publication_names", publication),
                   ("messages", "true")]
        if self.binary:
            options.append(("binary", "true"))
        if self.streaming != "off":
            options.append(("streaming", self.streaming))
        if self.two_phase:
            # The slot is created two-phase too; the option alone would also flip a
            # plain slot to two-phase when read through the SQL interface.
            options.append(("two_phase", "on"))
        return options

    def session_settings(self) -> dict[str, str]:
        """Settings of the session that calls the decoding function (they shape text output)."""
        return {**SESSION_SETTINGS, "TimeZone": self.timezone}

    def describe(self) -> dict[str, Any]:
        return {"proto_version": self.proto_version, "binary": self.binary,
                "streaming": self.streaming, "slot_two_phase": self.two_phase,
                "options": [list(pair) for pair in self.plugin_options()],
                "session_settings": self.session_settings()}


CONFIGS: dict[str, CaptureConfig] = {c.name: c for c in (
    CaptureConfig("v1", 1),
    CaptureConfig("v1_binary", 1, binary=True),
    CaptureConfig("v1_kolkata", 1, timezone="Asia/Kolkata"),
    CaptureConfig("v2_stream", 2, streaming="on"),
    CaptureConfig("v2_stream_binary", 2, binary=True, streaming="on"),
    CaptureConfig("v3_twophase", 3, two_phase=True),
    CaptureConfig("v3_twophase_stream", 3, streaming="on", two_phase=True),
    CaptureConfig("v4_stream", 4, streaming="on"),
    CaptureConfig("v4_parallel", 4, streaming="parallel"),
    CaptureConfig("v4_parallel_binary_twophase", 4, binary=True, streaming="parallel", two_phase=True),
)}

# The matrix for every scenario except `types` (which needs no streaming or 2PC variety).
# v4_stream (protocol 4, streaming on, not parallel) differs from v2_stream only in its
# protocol number, so only `transactions` carries it, to show its 9-byte Stream Abort.
STANDARD_CONFIGS = ("v1", "v1_binary", "v2_stream", "v2_stream_binary", "v3_twophase",
                    "v3_twophase_stream", "v4_parallel", "v4_parallel_binary_twophase")
TRANSACTIONS_CONFIGS = STANDARD_CONFIGS + ("v4_stream",)
TYPES_CONFIGS = ("v1", "v1_binary", "v1_kolkata", "v4_parallel_binary_twophase")


def connect(server: Any, dbname: str, settings: dict[str, str] | None = None):
    """An autocommit psycopg2 connection with ``settings`` (default: SESSION_SETTINGS) applied."""
    conn = server.connect(dbname)
    with conn.cursor() as cur:
        for key, value in (settings or SESSION_SETTINGS).items():
            cur.execute("SELECT set_config(%s, %s, false)", (key, value))
    return conn


class Session:
    """One workload connection in autocommit mode; transactions are explicit BEGIN/COMMIT."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def run(self, sql: str, params: Any = None) -> list[tuple]:
        """Execute one statement and return its rows (``[]`` when it returns none)."""
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def close(self) -> None:
        self.conn.close()


class Workload:
    """What a scenario function gets: sessions on the scenario database and checkpoints.

    ``on_checkpoint(name)`` is called by :meth:`checkpoint`; the capture driver uses it to
    snapshot every table right after a step committed. ``on_sync()`` is called by :meth:`sync`.
    """

    def __init__(self, server: Any, dbname: str, on_checkpoint: Callable[[str], None],
                 on_sync: Callable[[], None], log: Callable[[str], None] = print) -> None:
        self.server = server
        self.dbname = dbname
        self._on_checkpoint = on_checkpoint
        self._on_sync = on_sync
        self.log = log
        self.notes: list[str] = []
        self._sessions: list[Session] = []
        self.main = self.session()

    def session(self) -> Session:
        """A new connection (closed when the workload ends)."""
        session = Session(connect(self.server, self.dbname))
        self._sessions.append(session)
        return session

    def sql(self, sql: str, params: Any = None) -> list[tuple]:
        """Run one statement on the main (autocommit) session."""
        return self.main.run(sql, params)

    def script(self, sql: str) -> None:
        """Run ``;``-separated statements in one simple-query round trip.

        Without BEGIN/COMMIT of its own, the whole script is one implicit transaction.
        """
        self.main.run(sql)

    def checkpoint(self, name: str) -> None:
        """Record the state of every table; call it right after a step committed."""
        self.log(f"    checkpoint {name}")
        self._on_checkpoint(name)

    def sync(self) -> None:
        """Wait until every capture has decoded all WAL written so far, open transactions included.

        Call it before rolling back a large transaction: the decoder streams (or spills) only
        transactions it does not yet know to be aborted.
        """
        self._on_sync()

    def expect_error(self, sql: str, note: str) -> str:
        """Run ``sql``, which PostgreSQL must reject, in a transaction; record the error as a note."""
        import psycopg2

        self.main.run("BEGIN")
        try:
            self.main.run(sql)
        except psycopg2.Error as exc:
            message = str(exc).strip().splitlines()[0]
            self.main.run("ROLLBACK")
            self.notes.append(f"{note}: {message}")
            return message
        self.main.run("ROLLBACK")
        raise AssertionError(f"expected PostgreSQL to reject: {sql}")

    def close(self) -> None:
        for session in self._sessions:
            session.close()


def create_slot(server: Any, dbname: str, slot: str, two_phase: bool) -> None:
    """Create a pgoutput slot (``two_phase`` as the config asks)."""
    server.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                   (slot, two_phase), dbname=dbname)


def drop_slot(server: Any, dbname: str, slot: str) -> None:
    server.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                   "WHERE slot_name = %s", (slot,), dbname=dbname)


def read_slot(server: Any, dbname: str, slot: str, config: CaptureConfig) -> list[tuple[str, int, str]]:
    """Consume the slot: ``(lsn "X/Y", xid, payload hex)`` in the order PostgreSQL returned them.

    The decoding session's own settings decide the text form of values (TimeZone above all).
    """
    flat = [item for pair in config.plugin_options() for item in pair]
    conn = connect(server, dbname, config.session_settings())
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT lsn::text, xid::text::bigint, encode(data, 'hex') "
                        "FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, VARIADIC %s::text[])",
                        (slot, flat))
            return [(lsn, int(xid), data) for lsn, xid, data in cur.fetchall()]
    finally:
        conn.close()


@dataclass(frozen=True)
class Scenario:
    """A workload run once against a fresh database and captured by ``configs``.

    ``values``: also write ``values.json`` (every table needs a one-column primary key).
    """

    name: str
    description: str
    run: Callable[[Workload], None]
    configs: tuple[str, ...] = STANDARD_CONFIGS
    values: bool = False
