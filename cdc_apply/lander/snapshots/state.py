"""What bronze holds of snapshots, followed message by message (docs/SNAPSHOTS.md).

Part of the lander's resume state (:mod:`cdc_apply.lander.state`): which
tables have a snapshot committed in bronze, which snapshot requests are not
served yet, and whether a snapshot's blocks are in bronze without its Stream
Commit. Everything here but the initial-snapshot entry ``"*"`` can also be
rebuilt from the bronze rows: requests are logical decoding messages the slot
sends (``cdc_apply.snapshot_request``), and each snapshot names the requests
it serves in its ``cdc_apply.snapshot`` message.

A request entry is a table name ``"namespace.name"``, a relation id (``int``)
or ``"*"``: every published table without a snapshot in bronze (the initial
snapshot). An entry starting with ``"!"`` is a request that could not be read;
the lander reports and drops it. A *range entry*, ``"namespace.name#column[low,high)"``,
asks for one key range of a table with an integer key copied again (``cdc-apply verify
--repair``): :func:`range_entry`, :func:`parse_range_entry`.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field, replace

from cdc_apply.pgoutput.snapshot import SNAPSHOT_PREFIX, SNAPSHOT_XID, KeyRange, parse_snapshot_directive

REQUEST_PREFIX = "cdc_apply.snapshot_request"
ALL_TABLES = "*"

Entry = str | int

_MESSAGE_HEAD = struct.Struct(">BQ")      # flags, lsn
_LENGTH = struct.Struct(">i")


def parse_message(payload: bytes, in_block: bool) -> tuple[bool, str, bytes] | None:
    """A logical decoding Message's ``(transactional, prefix, content)``; ``None`` if it is cut short."""
    start = 5 if in_block else 1
    if len(payload) < start + _MESSAGE_HEAD.size:
        return None
    flags, _ = _MESSAGE_HEAD.unpack_from(payload, start)
    end = payload.find(b"\0", start + _MESSAGE_HEAD.size)
    if end < 0 or len(payload) < end + 1 + _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack_from(payload, end + 1)
    content = payload[end + 1 + _LENGTH.size:]
    if length != len(content):
        return None
    return bool(flags & 1), payload[start + _MESSAGE_HEAD.size:end].decode("utf-8", "replace"), content


_RANGE_ENTRY = re.compile(r"^(?P<table>.+)#(?P<column>[^#\[]+)\[(?P<low>-?\d*),(?P<high>-?\d*)\)$", re.S)


def range_entry(table: str, column: str, low: int | None, high: int | None) -> str:
    """The request entry asking for the rows of ``table`` whose ``column`` lies in ``[low, high)``."""
    return f"{table}#{column}[{'' if low is None else int(low)},{'' if high is None else int(high)})"


def parse_range_entry(entry: Entry) -> tuple[str, KeyRange] | None:
    """``(table, key range)`` of a range entry; ``None`` for any other entry."""
    found = _RANGE_ENTRY.match(entry) if isinstance(entry, str) else None
    if found is None:
        return None
    low, high = found["low"], found["high"]
    return found["table"], KeyRange(found["column"], int(low) if low else None, int(high) if high else None)


def entry_table(entry: Entry) -> Entry:
    """The table (name or relation id) an entry names, its key range left off."""
    parsed = parse_range_entry(entry)
    return entry if parsed is None else parsed[0]


def request_entries(content: bytes, source: str | None) -> tuple[Entry, ...]:
    """The entries of a ``cdc_apply.snapshot_request`` for ``source`` (none when it names another source).

    Content: ``{"source": ..., "tables": ["ns.name", ...] | "*", "relation_ids": [oid, ...], "ranges":
    [{"table": "ns.name", "column": ..., "low": int | null, "high": int | null}, ...]}``; ``source`` is
    optional (the event trigger's requests concern every lander of the database).
    """
    try:
        body = json.loads(content)
        if not isinstance(body, dict):
            raise ValueError("not an object")
        if body.get("source") is not None and source is not None and body["source"] != source:
            return ()
        tables = body.get("tables", [])
        tables = [ALL_TABLES] if tables == ALL_TABLES else list(tables)
        if not all(isinstance(t, str) and t for t in tables):
            raise ValueError("tables must be names")
        ids = [int(r) for r in body.get("relation_ids", [])]
        ranges = []
        for r in body.get("ranges", []):
            if not isinstance(r.get("table"), str) or not isinstance(r.get("column"), str) or not r["table"]:
                raise ValueError("a range names a table and a column")
            low, high = r.get("low"), r.get("high")
            ranges.append(range_entry(r["table"], r["column"], None if low is None else int(low),
                                      None if high is None else int(high)))
        entries = tuple(tables) + tuple(ids) + tuple(ranges)
        if not entries:
            raise ValueError("names no table")
        return entries
    except (ValueError, TypeError) as exc:
        return ("!" + f"{exc}: {content[:120].decode('utf-8', 'replace')}",)


def _merge(into: tuple[Entry, ...], more: tuple[Entry, ...]) -> tuple[Entry, ...]:
    return into + tuple(e for i, e in enumerate(more) if e not in into and e not in more[:i])


@dataclass(frozen=True)
class SnapshotState:
    """Snapshots in bronze; see the module docstring."""

    done: tuple[int, ...] = ()                              # relation ids, sorted
    pending: tuple[Entry, ...] = ()                         # requests not served yet, in arrival order
    held: tuple[tuple[str, tuple[Entry, ...]], ...] = ()    # requests of transactions not committed yet
    open: tuple[int, tuple[Entry, ...]] | None = None       # (relation id, entries it serves)
    # Tables copied in key ranges, not finished: (relation id, the key the next range starts at), sorted.
    ranged: tuple[tuple[int, int], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.done or self.pending or self.held or self.open or self.ranged)

    def resume_key(self, relation_id: int) -> int | None:
        """Where a table's key-range copy goes on (``None``: from its lowest key)."""
        return dict(self.ranged).get(relation_id)

    def to_body(self) -> dict:
        body = {"done": list(self.done), "pending": list(self.pending),
                "held": [[k, list(v)] for k, v in self.held],
                "open": None if self.open is None else [self.open[0], list(self.open[1])]}
        if self.ranged:
            body["ranged"] = [list(r) for r in self.ranged]
        return body

    @classmethod
    def from_body(cls, body: dict | None) -> "SnapshotState":
        if not body:
            return cls()
        entry = lambda e: e if isinstance(e, str) else int(e)  # noqa: E731
        opened = body.get("open")
        return cls(done=tuple(int(r) for r in body.get("done", ())),
                   pending=tuple(entry(e) for e in body.get("pending", ())),
                   held=tuple((str(k), tuple(entry(e) for e in v)) for k, v in body.get("held", ())),
                   open=None if opened is None else (int(opened[0]), tuple(entry(e) for e in opened[1])),
                   ranged=tuple(sorted((int(r), int(k)) for r, k in body.get("ranged", ()))))

    def add_done(self, relation_id: int) -> "SnapshotState":
        return replace(self, done=tuple(sorted(set(self.done) | {relation_id})))

    def drop_pending(self, entries) -> "SnapshotState":
        gone = set(entries)
        return replace(self, pending=tuple(e for e in self.pending if e not in gone))


@dataclass
class SnapshotTracker:
    """Keeps a :class:`SnapshotState` up to date as messages are landed (used by the OutputTracker)."""

    source: str | None
    done: set[int] = field(default_factory=set)
    pending: tuple[Entry, ...] = ()
    held: dict[str, tuple[Entry, ...]] = field(default_factory=dict)
    open: tuple[int, tuple[Entry, ...]] | None = None
    ranged: dict[int, int] = field(default_factory=dict)
    open_range: KeyRange | None = None      # the open snapshot's key range (None: the whole table)
    open_repair: bool = False               # the open snapshot is a range copied again on request

    @classmethod
    def of(cls, state: SnapshotState, source: str | None) -> "SnapshotTracker":
        return cls(source, set(state.done), state.pending, dict(state.held), state.open, dict(state.ranged))

    def state(self) -> SnapshotState:
        return SnapshotState(tuple(sorted(self.done)), self.pending, tuple(sorted(self.held.items())), self.open,
                             tuple(sorted(self.ranged.items())))

    # -- the lander's own snapshot stream (xid 2) ---------------------------------------
    def in_snapshot(self, payload: bytes) -> None:
        """A message inside a block of the snapshot stream: only its marker matters."""
        if payload[:1] != b"M":
            return
        parsed = parse_message(payload, in_block=True)
        if parsed is None or parsed[1] != SNAPSHOT_PREFIX:
            return
        try:
            snapshot = parse_snapshot_directive(parsed[2])
            self.open = (snapshot.relation_id, snapshot.serves or ())
            self.open_range, self.open_repair = snapshot.key_range, snapshot.repair
        except (ValueError, TypeError, KeyError):
            self.open, self.open_range, self.open_repair = None, None, False

    def snapshot_committed(self) -> None:
        """A table is done when its whole copy, or its last key range, is committed; until then its next
        range's start is kept (a lander stopped in between goes on from there). A range copied again on
        request changes neither; the last of a request's ranges serves it."""
        if self.open is not None:
            relation_id, serves = self.open
            if self.open_repair:
                self.pending = tuple(e for e in self.pending if e not in serves)
            elif self.open_range is not None and self.open_range.high is not None:
                self.ranged[relation_id] = self.open_range.high
            else:
                self.ranged.pop(relation_id, None)
                self.done.add(relation_id)
                self.pending = tuple(e for e in self.pending if e not in serves)
        self.open, self.open_range, self.open_repair = None, None, False

    def snapshot_aborted(self) -> None:
        self.open, self.open_range, self.open_repair = None, None, False

    # -- requests ----------------------------------------------------------------------------
    def message(self, payload: bytes, unit: str | None) -> None:
        """A Message landed inside ``unit`` (``"t"`` the open transaction, ``"s<xid>"`` a stream block) or
        outside any (``None``)."""
        parsed = parse_message(payload, in_block=unit is not None and unit.startswith("s"))
        if parsed is None or parsed[1] != REQUEST_PREFIX:
            return
        transactional, _, content = parsed
        entries = request_entries(content, self.source)
        if not entries:
            return
        if unit is None or not transactional:
            self.pending = _merge(self.pending, entries)
        else:
            self.held[unit] = _merge(self.held.get(unit, ()), entries)

    def committed(self, unit: str) -> None:
        self.pending = _merge(self.pending, self.held.pop(unit, ()))

    def prepared(self, unit: str, gid: str) -> None:
        entries = self.held.pop(unit, ())
        if entries:
            self.held["p" + gid] = entries

    def dropped(self, unit: str) -> None:
        self.held.pop(unit, None)


def is_snapshot_stream(xid: int) -> bool:
    return xid == SNAPSHOT_XID
