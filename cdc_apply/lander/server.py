"""An ordinary (non-replication) session on the source: checks before streaming, and the
small questions asked while streaming (slot lag, WAL flush position, transaction status).

Every check that fails raises :class:`LandError` saying what is wrong and the
SQL to run (or the config key to set) to fix it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdc_apply.config import SourceConfig
from cdc_apply.delta.names import pg_ident, pg_literal
from cdc_apply.errors import LandError
from cdc_apply.lander.dsn import SourceLandError, Target, connection_error, is_transient, scrubbed_line
from cdc_apply.lander.options import TCP_KEEPALIVES, publication_names
from cdc_apply.lander.state import ResumeState
from cdc_apply.pgoutput.messages import format_lsn

if TYPE_CHECKING:
    from psycopg2.extensions import connection


# The advisory lock key of a slot's lander: hashtextextended(LOCK_PREFIX || slot, 0).
LOCK_PREFIX = "cdc_apply-land:"
LOCK_WAIT_SECONDS = 3.0


# What to do when bronze and the slot do not belong together (changes may be missing from bronze).
LOSS_REMEDY = ("this source's bronze cannot be continued: land into a new bronze table or under a new "
               "source.name (with source.create_slot a missing slot is created there) and load the published "
               "tables' current contents into silver again (a re-snapshot)")



@dataclass(frozen=True)
class SlotInfo:
    """The row of pg_replication_slots for the configured slot."""

    name: str
    database: str
    two_phase: bool
    confirmed_flush_lsn: int
    restart_lsn: int


class SourceServer:
    """One autocommit connection to the source database."""

    def __init__(self, dsn: str, source: SourceConfig, connect_timeout: float = 10.0) -> None:
        self.dsn = dsn
        self.source = source
        self.connect_timeout = connect_timeout
        self.target = Target.of(dsn)
        self.created: list[str] = []     # what preflight created, for the log
        self.source_file: str | None = None  # the configuration file, named in what to run
        self._conn: connection | None = None
        self._locked = False             # this session holds the slot's lander lock (taken again on reconnect)

    def connect(self) -> None:
        import psycopg2

        if self._conn is not None and not self._conn.closed:
            return
        try:
            self._conn = conn = psycopg2.connect(self.dsn, connect_timeout=max(1, int(self.connect_timeout)),
                                                 application_name=f"cdc_apply-land-{self.source.name}"[:63],
                                                 options="-c statement_timeout=30000", **TCP_KEEPALIVES)
        except psycopg2.Error as exc:
            raise connection_error(exc, self.dsn, transient=is_transient(exc)) from None
        conn.autocommit = True
        if self._locked:
            self._take_lock()

    def lock(self) -> None:
        """Hold the lander lock of the configured slot for this session's life, or raise :class:`LandError`.

        Two landers of one slot started together would both find bronze empty and both write the first
        batches before the slot refuses one of them, each failing the other; the lock is a session-level
        advisory lock on the source, so the second lander stops before writing anything, and a killed
        lander's lock goes with its connection."""
        self.connect()
        self._checking(self._take_lock)
        self._locked = True

    def _take_lock(self) -> None:
        # A lander killed a moment ago may still hold it until its backend has seen the socket close.
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            with self._connection().cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (LOCK_PREFIX + self.source.slot,))
                held = cur.fetchone()[0]
            if held or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if not held:
            self.close()
            raise LandError(f"another lander is landing slot {self.source.slot!r} (it holds the lander lock on "
                            f"database {self.target.dbname!r}): run one lander per source, then start this one "
                            "again once it has stopped", slot=self.source.slot, dsn=self.target.shown)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _connection(self) -> connection:
        """The session's connection, connecting first."""
        self.connect()
        assert self._conn is not None  # connect() leaves an open connection or raises
        return self._conn

    def cursor(self):
        """A cursor of the session (connecting first): for catalog questions asked a statement at a time."""
        return self._connection().cursor()

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._connection().cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    # -- checks ------------------------------------------------------------------
    def preflight(self) -> SlotInfo | None:
        """Check wal_level, the role, the publications and the slot; create publications when configured to.

        Returns the slot, or ``None`` when it is missing and ``source.create_slot``
        is set: whether it may be created depends on bronze (:meth:`ensure_slot`).
        """
        return self._checking(self._preflight)

    def ensure_slot(self, landed: ResumeState) -> SlotInfo:
        """The slot to land from, given what bronze holds of the source (``landed``).

        A missing slot is created (``source.create_slot``) only for a source
        bronze holds nothing of. For one it holds changes of, a missing slot, or
        one that stands past where bronze's landing stands, means changes made
        without the slot may be lost: :class:`LandError`, never a new start.
        """
        return self._checking(lambda: self._ensure_slot(landed))

    def _checking(self, check):
        import psycopg2

        try:
            return check()
        except psycopg2.Error as exc:
            self.close()
            raise SourceLandError(f"checking the source failed: {scrubbed_line(exc, self.dsn)}",
                                  transient=is_transient(exc) or isinstance(exc, psycopg2.OperationalError),
                                  dsn=self.target.shown) from None

    def _preflight(self) -> SlotInfo | None:
        where = f"{self.target.host}:{self.target.port}"
        wal_level = self.query("SHOW wal_level")[0][0]
        if wal_level != "logical":
            raise LandError(
                f"wal_level is {wal_level!r} at {where}; logical replication needs 'logical': run "
                "ALTER SYSTEM SET wal_level = logical; and restart PostgreSQL", dsn=self.target.shown)
        user, allowed = self.query("SELECT current_user, rolreplication OR rolsuper FROM pg_roles "
                                   "WHERE rolname = current_user")[0]
        if not allowed:
            raise LandError(f"user {user!r} may not open a replication connection: run ALTER ROLE "
                            f"{pg_ident(user)} REPLICATION; as a superuser", dsn=self.target.shown)
        self.check_publications()
        if self.source.ddl_events:
            from cdc_apply.lander import ddl_events

            if ddl_events.install(self, self.source_file or "FILE"):
                self.created.append("the DDL event triggers (source.ddl_events)")
        return self.slot()

    def check_publications(self) -> None:
        """Every publication ``source.publication`` names must exist; create the one it names if configured to."""
        source, names = self.source, publication_names(self.source)
        found = {r[0] for r in self.query("SELECT pubname FROM pg_publication WHERE pubname = ANY(%s)",
                                          (list(names),))}
        missing = [n for n in names if n not in found]
        if not missing:
            return
        if source.create_publication:     # with one name only: replication_options refuses more
            self.create_publication(missing[0])
            return
        what = self._publication_what()
        if len(names) == 1:
            raise LandError(
                f"publication {missing[0]!r} does not exist in database {self.target.dbname!r}: "
                f"run CREATE PUBLICATION {pg_ident(missing[0])} {what}; "
                "or set source.create_publication = true", dsn=self.target.shown)
        which = ("publication {} does" if len(missing) == 1 else "publications {} do").format(
            ", ".join(repr(n) for n in missing))
        create = " ".join(f"CREATE PUBLICATION {pg_ident(n)} FOR TABLE <its tables>;" for n in missing)
        raise LandError(f"{which} not exist in database {self.target.dbname!r} (source.publication = "
                        f"{source.publication!r}): run {create} or leave them out of source.publication",
                        dsn=self.target.shown, key="source.publication")

    def _publication_what(self) -> str:
        tables = self.source.publication_tables
        if not tables:
            return "FOR ALL TABLES"
        return "FOR TABLE " + ", ".join(".".join(pg_ident(p) for p in t.split(".")) for t in tables)

    def create_publication(self, name: str) -> None:
        """CREATE PUBLICATION ``name`` for ``source.publication_tables`` (none: FOR ALL TABLES)."""
        self.created.append(f"publication {name!r}")
        self.query(f"CREATE PUBLICATION {pg_ident(name)} {self._publication_what()}")

    def slot(self) -> SlotInfo | None:
        """The configured slot, checked; ``None`` when it is missing and ``source.create_slot`` is set."""
        source = self.source
        rows = self.query(
            "SELECT plugin, slot_type, database, two_phase, wal_status, "
            "coalesce(confirmed_flush_lsn - '0/0'::pg_lsn, 0)::bigint, "
            "coalesce(restart_lsn - '0/0'::pg_lsn, 0)::bigint, current_database() "
            "FROM pg_replication_slots WHERE slot_name = %s", (source.slot,))
        if not rows:
            if not source.create_slot:
                raise LandError(
                    f"replication slot {source.slot!r} does not exist: set source.create_slot = true (for a "
                    f"source bronze holds nothing of yet), or run SELECT pg_create_logical_replication_slot("
                    f"{pg_literal(source.slot)}, 'pgoutput', false, {'true' if source.two_phase else 'false'}); "
                    f"in database {self.target.dbname!r}", dsn=self.target.shown)
            return None
        plugin, slot_type, database, two_phase, wal_status, confirmed, restart, current = rows[0]
        if slot_type != "logical" or plugin != "pgoutput":
            raise LandError(f"replication slot {source.slot!r} is a {slot_type} slot with plugin {plugin!r}; "
                            "the lander needs a logical slot with plugin 'pgoutput' (configure another "
                            "source.slot)", dsn=self.target.shown)
        if database != current:
            raise LandError(f"replication slot {source.slot!r} belongs to database {database!r}, the connection "
                            f"goes to {current!r}: fix dbname in source.dsn", dsn=self.target.shown)
        if wal_status == "lost":
            raise LandError(f"replication slot {source.slot!r} is invalidated (wal_status = 'lost'): the WAL it "
                            "needed is gone, changes were missed; drop it, create it again and reload the "
                            "tables", dsn=self.target.shown)
        return SlotInfo(source.slot, database, bool(two_phase), int(confirmed), int(restart))

    def _ensure_slot(self, landed: ResumeState) -> SlotInfo:
        source = self.source
        slot = self.slot()
        where = {"source": source.name, "slot": source.slot, "seq": landed.last_seq,
                 "lsn": format_lsn(landed.resume_lsn), "dsn": self.target.shown}
        if slot is None and landed.landed:
            raise LandError(
                f"replication slot {source.slot!r} does not exist, but bronze holds changes of source "
                f"{source.name!r} up to seq {landed.last_seq} (resume lsn {format_lsn(landed.resume_lsn)}): the "
                "slot existed and was dropped, and changes made while there was none may be lost, so no new "
                f"slot is started (source.create_slot creates one only for a source bronze holds nothing of); "
                f"{LOSS_REMEDY}", **where)
        if slot is None:
            # SQL, not the replication command: it can make the slot two-phase from the start.
            self.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                       (source.slot, source.two_phase))
            self.created.append(f"replication slot {source.slot!r}" + (" (two-phase)" if source.two_phase else ""))
            created = self.slot()
            if created is None:
                raise LandError(f"replication slot {source.slot!r} was created but is not there", **where)
            return created
        if landed.landed and landed.confirmed_lsn is not None:
            reach = max(landed.resume_lsn, landed.confirmed_lsn)
            if slot.confirmed_flush_lsn > reach:
                raise LandError(
                    f"replication slot {source.slot!r} starts at {format_lsn(slot.confirmed_flush_lsn)} "
                    f"(confirmed flush; restart lsn {format_lsn(slot.restart_lsn)}), past "
                    f"{format_lsn(reach)}, the farthest this lander confirmed to it (bronze holds source "
                    f"{source.name!r} up to seq {landed.last_seq}, resume lsn {format_lsn(landed.resume_lsn)}): "
                    "it was dropped and created again, or advanced by something else, and changes made "
                    f"before its start may be lost; {LOSS_REMEDY}", **where)
        return slot

    # -- while streaming -----------------------------------------------------------
    def slot_lag(self) -> int | None:
        """Bytes of WAL between the server's current position and the slot's confirmed flush LSN."""
        rows = self.query("SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint "
                          "FROM pg_replication_slots WHERE slot_name = %s", (self.source.slot,))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def wal_flush_lsn(self) -> int:
        """The position up to which WAL is flushed (what a walsender can decode)."""
        return int(self.query("SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint")[0][0])

    def xact_status(self, xids: tuple[int, ...]) -> dict[int, str | None]:
        """``pg_xact_status`` of 32-bit xids, widened with the current epoch ('aborted', 'committed', ...)."""
        if not xids:
            return {}
        next_full = int(self.query("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")[0][0])
        epoch, low = next_full >> 32, next_full & 0xFFFFFFFF
        full = {x: ((epoch if x < low else epoch - 1) << 32) | x for x in xids}
        out: dict[int, str | None] = {}
        for xid, wide in full.items():
            if wide < 0:
                out[xid] = None
                continue
            try:
                out[xid] = self.query("SELECT pg_xact_status(%s::text::xid8)", (str(wide),))[0][0]
            except Exception:  # too old for the commit log: nothing can be said
                out[xid] = None
        return out
