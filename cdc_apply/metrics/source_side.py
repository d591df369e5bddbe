"""The replication slot as the source sees it: how much WAL it holds back and whether it is at risk.

One short query on a connection of its own, with a short connect and statement timeout: ``cdc-apply
status`` and a scrape of ``/metrics`` must never hang on an unreachable source. Every failure becomes a
reason beside null figures, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# Seconds libpq waits for the source, and the query's own bound: status and a scrape stay quick.
CONNECT_TIMEOUT_SECONDS = 3
STATEMENT_TIMEOUT_MS = 3000

# pg_replication_slots.wal_status: whether the WAL the slot needs is kept (reserved, extended), may go at the
# next checkpoint (unreserved), or is gone and the slot unusable (lost).
WalStatus = Literal["reserved", "extended", "unreserved", "lost"]
WAL_STATUSES: tuple[WalStatus, ...] = get_args(WalStatus)

# The position the source has written to: a standby (a slot on one, PostgreSQL 16+) is in recovery, where
# pg_current_wal_lsn() fails, and its replayed position plays that part.
_SLOT_SQL = """
SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END
        - '0/0'::pg_lsn)::bigint AS wal_lsn,
       s.active, s.wal_status,
       ((CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)
        - s.restart_lsn)::bigint AS retained,
       s.safe_wal_size,
       (s.confirmed_flush_lsn - '0/0'::pg_lsn)::bigint AS confirmed
FROM (SELECT 1) one LEFT JOIN pg_replication_slots s ON s.slot_name = %s
"""


@dataclass(frozen=True)
class SlotFigures:
    """What the source says of one slot. ``reason`` is None when it answered; otherwise it says why every
    figure is None (unreachable, no such slot, no connection string)."""

    slot: str
    wal_lsn: int | None = None               # the source's current WAL position, in bytes from 0/0
    active: bool | None = None               # a walsender (the lander) streams from it now
    wal_status: WalStatus | None = None
    retained_wal_bytes: int | None = None    # pg_current_wal_lsn() - restart_lsn: WAL kept for the slot
    safe_wal_size: int | None = None         # bytes written before max_slot_wal_keep_size invalidates it
    confirmed_flush_lsn: int | None = None   # in bytes from 0/0
    reason: str | None = None

    def fields(self) -> dict[str, object]:
        """The figures as ``cdc-apply status`` adds them to each entry (new keys only)."""
        return {"slot_active": self.active, "slot_wal_status": self.wal_status,
                "slot_retained_wal_bytes": self.retained_wal_bytes, "slot_safe_wal_size": self.safe_wal_size,
                "source_unavailable": self.reason}


# The keys :meth:`SlotFigures.fields` adds to a status entry, in order.
STATUS_KEYS = tuple(SlotFigures("").fields())


def read_slot(dsn: str | None, slot: str, connect_timeout: float = CONNECT_TIMEOUT_SECONDS) -> SlotFigures:
    """The slot's figures, or null figures and the reason (``dsn`` None: no connection string configured)."""
    if dsn is None:
        return SlotFigures(slot, reason="no connection string for the source (source.dsn or its environment "
                                        "variable)")
    import psycopg2

    try:
        conn = psycopg2.connect(dsn, connect_timeout=max(1, int(connect_timeout)),
                                options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
                                application_name="cdc_apply-metrics")
    except psycopg2.Error as exc:
        return SlotFigures(slot, reason=f"source unreachable: {_first_line(exc)}")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(_SLOT_SQL, (slot,))
            wal_lsn, active, wal_status, retained, safe, confirmed = cur.fetchone()
    except psycopg2.Error as exc:
        return SlotFigures(slot, reason=f"the slot query failed: {_first_line(exc)}")
    finally:
        conn.close()
    if active is None:
        return SlotFigures(slot, wal_lsn=wal_lsn, reason=f"the source has no replication slot named {slot!r}")
    return SlotFigures(slot, wal_lsn, bool(active), wal_status, None if retained is None else int(retained),
                       None if safe is None else int(safe), None if confirmed is None else int(confirmed))


def _first_line(exc: BaseException) -> str:
    # libpq's messages name host and port, never the password; the first line says what failed.
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# The slot figures of an entry whose source is not the configuration's [source]: no DSN to ask.
ELSEWHERE = SlotFigures("", reason="not this configuration's [source]: its slot is not asked")


def slot_entries(entries: list, source: str, figures: SlotFigures) -> list[dict]:
    """Status entries with the slot's figures after their own keys: ``figures`` for ``source``'s entry,
    :data:`ELSEWHERE` for another source's."""
    return [{**entry, **(figures if entry["source"] == source else ELSEWHERE).fields()} for entry in entries]
