"""The batch's control scan: the control messages for the planner, and what its snapshot loads leave out.

One pass over the batch's rows (it reads every payload's type byte anyway) collects to the driver the
control messages and cdc_apply's directives (docs/ARCHITECTURE.md, "Control scan") and, before the
planner says which snapshots the batch loads, the rows a snapshot load leaves to the general decode
(:func:`cdc_apply.lake.sources.payload_columns.is_snapshot_held`): the marker, the Truncate and any
other change of the snapshot's xid but an Insert — with their payloads, few and small — and the seqs
of rows that are no change at all (null, empty, unknown: errors the decode reports, read from bronze
again). With them a load is seq ranges (:func:`cdc_apply.planning.snapshot_loads.taken_ranges`) that the
general decode skips unread, its held rows joined to the decode from the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cdc_apply.lake.sources.payload_columns import (
    is_change,
    is_control,
    is_directive,
    is_snapshot_held,
    not_an_insert,
    payload_kinds,
)
from cdc_apply.planning.snapshot_loads import SnapshotLoad, in_ranges, join_ranges, taken_ranges

# At most this many rows of a source are held; past it its loads tell rows by payload (the lists become
# IN lists and OR trees of the filters).
HELD_MAX = 10_000
MESSAGE = b"M"
HELD_SCHEMA = "source STRING, seq LONG, lsn LONG, payload BINARY"   # ControlScan.held_rows as a DataFrame


@dataclass(frozen=True)
class ControlScan:
    """Per source: its control messages (seq, LSN, payload), the rows held for the general decode
    (directives included), the seqs of held rows that are no change, and ``joins``: the seqs of control
    messages and held rows, which the general decode does not read from bronze (gaps of them join ranges)."""

    controls: dict[str, list]
    held: dict[str, list]
    unread: dict[str, list[int]]
    joins: dict[str, set[int]]

    def place_loads(self, loads, applied_seq) -> tuple[SnapshotLoad, ...]:
        """``loads`` with their ``taken`` ranges from ``applied_seq(source) + 1`` on (the rows this scan
        read), or as they are (by payload) for a source holding more than HELD_MAX rows."""
        out = []
        for load in loads:
            held = self.held.get(load.source, [])
            unread = self.unread.get(load.source, [])
            if len(held) + len(unread) <= HELD_MAX:
                start = applied_seq(load.source) + 1
                taken = taken_ranges(load.ranges, start, unread, self.joins.get(load.source, set()))
                load = replace(load, held_from=start, taken=taken,
                               held=tuple(row[0] for row in held if in_ranges(row[0], taken)))
            out.append(load)
        return tuple(out)

    def skip_ranges(self, loads) -> dict[str, tuple]:
        """Per source whose loads are placed by seq, their ``taken`` ranges joined across the gaps
        between them that hold only control messages and held rows (the next chunk's Stream Start and
        marker): the seqs the general decode leaves out, in as few ranges as bronze's files can lie in."""
        out: dict[str, list] = {}
        for load in loads:
            if load.held_from is not None:
                out.setdefault(load.source, []).extend(load.taken)
        return {source: join_ranges(ranges, self.joins.get(source, set())) for source, ranges in out.items()}

    def held_rows(self, skip: dict[str, tuple]) -> list[tuple[str, int, int, bytes]]:
        """The held rows inside ``skip`` (:meth:`skip_ranges`), which the general decode reads from
        here: (source, seq, lsn, payload)."""
        return [(source, *row) for source, ranges in skip.items() for row in self.held.get(source, [])
                if in_ranges(row[0], ranges)]


def scan_controls(fresh, sources) -> ControlScan:
    """One job over the batch's rows ``fresh`` (Arrow to the driver: a batch of 100,000 transactions has
    200,000 Begin and Commit rows, and a Spark Row per message took seconds to build)."""
    table = scanned_rows(fresh).toArrow()
    return collect_scan(zip(*(table.column(k).to_pylist() for k in range(5))), sources)


def scanned_rows(fresh):
    """The rows of ``fresh`` the control scan keeps: (source, seq, lsn, payload or None, for the driver)."""
    from pyspark.sql import functions as F

    driver = is_control() | is_directive()
    # not_an_insert() keeps no row the scan would not, and lets a read of bronze skip row groups of Inserts
    # unread: a snapshot's copied rows are most of its batch, and their first byte is all the scan asks.
    return fresh.where(not_an_insert() & (driver | is_snapshot_held())).select(
        "source", "seq", "lsn", F.when(driver | is_change(), F.col("payload")).alias("payload"),
        driver.alias("driver"))


def scan_rows(rows, sources) -> ControlScan:
    """:func:`scan_controls` of rows on the driver: (source, seq, lsn, payload) tuples."""
    scanned = []
    for source, seq, lsn, payload in rows:
        driver, change, held = payload_kinds(payload)
        if driver or held:
            scanned.append((source, seq, lsn, payload if driver or change else None, driver))
    return collect_scan(scanned, sources)


def collect_scan(rows, sources) -> ControlScan:
    """The scan of ``rows`` the scan kept: (source, seq, lsn, payload or None, for the driver)."""
    scan = ControlScan({s: [] for s in sources}, {s: [] for s in sources}, {s: [] for s in sources},
                       {s: set() for s in sources})
    for source, seq, lsn, payload, to_driver in rows:
        if to_driver:
            scan.controls[source].append((seq, lsn, payload))
        if payload is None:
            scan.unread[source].append(seq)
        else:
            if not to_driver or payload[:1] == MESSAGE:   # a directive is decoded as a message too
                scan.held[source].append((seq, lsn, payload))
            scan.joins[source].add(seq)
    return scan
