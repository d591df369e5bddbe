"""The lander's snapshots: which tables to copy when, and how a copy is written to bronze (docs/SNAPSHOTS.md).

``source.snapshot``:

* ``"initial"`` (default): when the lander creates the slot, every published
  table is copied under the slot's own exported snapshot before streaming
  starts; snapshot requests (``cdc-apply snapshot``, the DDL event trigger)
  are served too.
* ``"when_needed"``: as ``"initial"``, and a published table without a snapshot
  in bronze (added to the publication later, or published before a slot made
  by hand) is copied as soon as the lander sees it (at start, then every
  ``source.snapshot_check_seconds``).
* ``"never"``: no snapshots; requests are reported and left alone.

A later snapshot stops reading the slot (bronze must be between units: a
lander-made unit never lands inside a transaction), creates a TEMPORARY slot
with an exported snapshot (its consistent point ``C``), copies, lands each
table as one snapshot stream committed at ``C``, then streaming resumes from
bronze's resume point: every transaction landed before has a commit LSN
below ``C``, and the apply skips the table in those landed after with a
commit LSN below ``C``.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import replace
from typing import Iterator, Sequence

import pyarrow as pa

from cdc_apply.errors import LandError
from cdc_apply.lander.dsn import scrubbed_line
from cdc_apply.lander.options import publication_names
from cdc_apply.lander.snapshots import catalog
from cdc_apply.lander.snapshots.chunks import ChunkContext, ChunkFlow, land_ranges
from cdc_apply.lander.snapshots.copy_sessions import (
    PROGRESS_SECONDS,
    ChunkResult,
    ConsistentPoint,
    ExportSlot,
    TableCopier,
    eta,
)
from cdc_apply.lander.snapshots.port import Appender, SnapshotPort
from cdc_apply.lander.snapshots.state import ALL_TABLES, Entry, entry_table, parse_range_entry
from cdc_apply.lander.state import Batch, OutputTracker, ResumeState
from cdc_apply.metrics.registry import record_snapshot_table
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.encoder import encode
from cdc_apply.pgoutput.snapshot import SNAPSHOT_XID, KeyRange, snapshot_abort, snapshot_marker


class Snapshots:
    """Takes and lands the snapshots of one lander (``port``: what they use of it: the source's settings and
    session, the bronze writer, its output)."""

    def __init__(self, port: SnapshotPort) -> None:
        self.port = port
        self.source = port.source
        self.mode = port.source.snapshot
        self.publications = publication_names(port.source)
        self._appender: Appender | None = None
        self._checked_at = float("-inf")
        self._missing = False    # the last check found a published table without a snapshot: due until taken
        self._quiet_until = 0.0
        self._told_never = False
        self.tables = 0          # tables landed by this run
        self.rows = 0
        self.flow: ChunkFlow | None = None   # a chunk flow under way
        self.context = ChunkContext(source=port.source, dsn=port.dsn, landing=lambda state: _Landing(self, state),
                                    say=self.say, probe=port.probe, landed=self._count_table)

    @property
    def appender(self) -> Appender:
        if self._appender is None:
            self._appender = self.port.appender()
        return self._appender

    def say(self, text: str) -> None:
        self.port.say(text)

    def _count_table(self, rows: int) -> None:
        """A table fully landed by this run, with its rows (the summary's totals)."""
        self.tables += 1
        self.rows += rows
        record_snapshot_table(self.source.name, rows)

    def close(self) -> None:
        """Give up a chunk flow under way (the lander stops): its chunks are copied again at the next start."""
        if self.flow is not None:
            self.flow.close()
            self.flow = None

    # -- bronze --------------------------------------------------------------------------
    def _commit(self, state: ResumeState, payloads: Sequence[bytes] = ()) -> ResumeState:
        """Land a few lander-made messages (or none: the state alone) as one bronze commit."""
        tracker = OutputTracker.starting_at(state, self.source.name)
        rows = []
        for payload in payloads:
            tracker.add(tracker.last_seq + 1, 0, payload)
            rows.append((tracker.last_seq, 0, payload))
        new = tracker.state(state.batch + 1)
        self.port.writer.append(Batch(tuple(rows), new, sum(len(p) for p in payloads)))
        return new

    def close_open(self, state: ResumeState) -> ResumeState:
        """A snapshot whose blocks are in bronze without its Stream Commit (the lander stopped while copying)
        is closed with a Stream Abort before anything else lands: the apply drops it."""
        if state.snapshots.open is None:
            return state
        relation_id = state.snapshots.open[0]
        state = self._commit(state, [encode(snapshot_abort())])
        self.say(f"closed the unfinished snapshot of relation {relation_id} with a Stream Abort; "
                 "its table is copied again")
        self.port.probe("snapshot_closed", state=state)
        return state

    # -- the initial snapshot ---------------------------------------------------------------
    def initial(self, landed: ResumeState) -> ResumeState:
        """Create the missing slot with an exported snapshot and copy every published table under it.

        Only for a source bronze holds nothing of, with ``source.create_slot``. Bronze first records
        that every table is to be copied (``"*"`` pending), so that a lander stopped after creating the
        slot copies them at its next start (from a temporary slot)."""
        server = self.port.server
        if self.mode == "never" or landed.landed or not self.source.create_slot or server.slot() is not None:
            return landed
        state = self._commit(replace(landed, snapshots=replace(
            landed.snapshots, pending=(ALL_TABLES,) + tuple(e for e in landed.snapshots.pending if e != ALL_TABLES))))
        with ExportSlot(self.port.dsn, self.source.slot, temporary=False, two_phase=self.source.two_phase,
                        connect_timeout=self.source.connect_timeout,
                        application_name=f"cdc_apply-land-{self.source.name}") as slot:
            point = slot.create()
            server.created.append(f"replication slot {self.source.slot!r}"
                                  + (" (two-phase)" if self.source.two_phase else "") + " with an exported snapshot")
            self.say(f"created slot {self.source.slot!r} at {point}: copying the published tables")
            state = replace(state, confirmed_lsn=point.lsn)
            state = self._round(state, point)
        return state

    # -- later snapshots ------------------------------------------------------------------------
    def due(self, state: ResumeState, now: float | None = None) -> bool:
        """Whether a snapshot is to be taken: a request is pending, or (``when_needed``) a published table has
        none, or the chunks of a chunk flow wait to be landed."""
        if self.flow is not None:   # chunks copied: taken once the stream has reached their point
            return self.flow.triggered
        now = time.monotonic() if now is None else now
        pending = state.snapshots.pending
        if self.mode == "never":
            if pending and not self._told_never:
                self.say(f"snapshot requests {list(pending)} are not served: source.snapshot = \"never\"")
                self._told_never = True
            return False
        if now < self._quiet_until:
            return False
        if pending or self._missing:
            return True
        if self.mode != "when_needed" or now - self._checked_at < self.source.snapshot_check_seconds:
            return False
        self._checked_at = now
        try:
            with self.port.server.cursor() as cur:
                published = {r.relation_id for r in catalog.published_relations(cur, self.publications)}
        except LandError:
            raise
        except Exception as exc:  # the side session may be reconnecting: ask again at the next check
            self.port.server.close()
            self.say(f"could not list the published tables ({scrubbed_line(exc, self.port.dsn)}); asking again in "
                     f"{self.source.snapshot_check_seconds:g} s")
            return False
        # Remembered until taken: the session that finds it ends, and the lander's loop asks again at once,
        # within snapshot_check_seconds of this check (a busy stream never let it through otherwise).
        self._missing = published != set(state.snapshots.done)
        return self._missing

    def take(self, state: ResumeState) -> ResumeState:
        """Serve what :meth:`due` found: land the chunks the stream reached, drop requests that cannot be
        served, copy whole tables from a temporary slot now and hand tables with an integer key to a
        :class:`~cdc_apply.lander.snapshots.chunks.ChunkFlow` (key ranges, each at a point of its own)."""
        if self.flow is not None:
            state = self.flow.land(state)
            if self.flow.finished:
                self.flow = None
            return state
        self._missing = False
        with self.port.server.cursor() as cur:
            relations = catalog.published_relations(cur, self.publications)
            plan, drops = self._targets(state, relations, cur)
        published = {r.relation_id for r in relations}
        done = tuple(r for r in state.snapshots.done if r in published or self.mode != "when_needed")
        if drops or done != state.snapshots.done:
            state = self._commit(replace(state, snapshots=replace(state.snapshots.drop_pending(drops), done=done)))
        if not plan:
            return state
        name = f"cdc_apply_snap_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        slot = ExportSlot(self.port.dsn, name, temporary=True, connect_timeout=self.source.connect_timeout,
                          application_name=f"cdc_apply-land-{self.source.name}")
        point = slot.create()
        self.say(f"snapshot of {', '.join(r.qualified_name for r, _ in plan)} at {point}")
        try:
            return self._round(state, point, slot=slot)
        finally:
            if self.flow is None or not self.flow.owns(slot):
                slot.close()

    def _targets(self, state: ResumeState, relations: list[catalog.PublishedRelation], cur
                 ) -> tuple[list[tuple[catalog.PublishedRelation, list]], list]:
        """``[(relation, request entries it serves)]`` to copy, in name order, and the entries to drop."""
        snaps = state.snapshots
        targets: dict[int, tuple[catalog.PublishedRelation, list]] = {}
        missing = [r for r in relations if r.relation_id not in snaps.done]
        if ALL_TABLES in snaps.pending or self.mode == "when_needed":
            for relation in missing:
                targets[relation.relation_id] = (relation, [])
        drops: list[Entry] = []
        if ALL_TABLES in snaps.pending and not missing:
            drops.append(ALL_TABLES)
        for entry in snaps.pending:
            if entry == ALL_TABLES:
                continue
            if isinstance(entry, str) and entry.startswith("!"):
                self.say(f"a snapshot request that cannot be read is dropped: {entry[1:]}")
                drops.append(entry)
                continue
            requested = catalog.resolve_entry(entry_table(entry), relations, cur)
            if requested is None:
                self.say(f"snapshot request for {entry!r} dropped: no such table in publication "
                         f"{self.source.publication!r}")
                drops.append(entry)
                continue
            targets.setdefault(requested.relation_id, (requested, []))[1].append(entry)
        ordered = sorted(targets.values(), key=lambda t: (t[0].namespace, t[0].name))
        return ordered, drops

    # -- one round under one exported snapshot ----------------------------------------------------
    def _round(self, state: ResumeState, point: ConsistentPoint, slot: ExportSlot | None = None) -> ResumeState:
        """Copy and land the targets under ``point``. The initial snapshot (no ``slot``: nothing streamed yet)
        lands every table here, tables with an integer key in key-range chunks; a later one (``slot``: a
        temporary slot) lands whole tables here and starts a chunk flow for the others, whose chunks must
        land where the stream reaches their point."""
        copier = TableCopier(self.port.dsn, point, self.source.snapshot_workers, self.source.connect_timeout,
                             f"cdc_apply-snapshot-{self.source.name}")
        handed = False
        try:
            cur = copier.coordinator.cursor()
            relations = catalog.published_relations(cur, self.publications)
            plan, _ = self._targets(state, relations, cur)
            shapes, skipped = [], []
            for relation, serves in plan:
                shape = self._shape(copier, relation)
                if shape is None:
                    skipped.append(relation)
                else:
                    shapes.append((shape, serves))
            if skipped:
                self._quiet_until = time.monotonic() + self.source.snapshot_check_seconds
                for shape, serves in shapes:       # "*" is served only when every table it covers is copied
                    serves[:] = [e for e in serves if e != ALL_TABLES]
            elif shapes and ALL_TABLES in state.snapshots.pending:
                shapes[-1][1].append(ALL_TABLES)
            repairs = {} if slot is None else self._repairs(shapes, state)
            ranged = [(s, e) for s, e in shapes if self._ranged(s) or s.published.relation_id in repairs]
            whole = [(s, e) for s, e in shapes if not (self._ranged(s) or s.published.relation_id in repairs)]
            if slot is None:
                whole, ranged = shapes, []
            if ranged and whole and ALL_TABLES in whole[-1][1]:   # "*" goes with the last table landed
                whole[-1][1].remove(ALL_TABLES)
                ranged[-1][1].append(ALL_TABLES)
            chunks = [self._plan(copier, i, shape, state, initial=slot is None) for i, (shape, _) in enumerate(whole)]
            results = copier.copy([s for s, _ in whole], [c for table in chunks for c in table])
            landing = _Landing(self, state)
            for (shape, serves), table_chunks in zip(whole, chunks):
                if table_chunks and table_chunks[0].key is not None:
                    land_ranges(self.context, landing, shape, serves, point, table_chunks, results)
                else:
                    self._land_table(landing, shape, serves, point, table_chunks, results)
            landing.commit()
            state = landing.state
            if ranged:
                assert slot is not None  # without a slot (the initial snapshot) every table was landed above
                self.flow = ChunkFlow(self.context, ranged, state, repairs)
                self.flow.start(slot, copier, point)
                handed = True
        finally:
            if not handed:
                copier.close()
        self.say(f"snapshots through seq {state.last_seq} are in bronze")
        return state

    def _repairs(self, shapes: list, state: ResumeState) -> dict[int, list[KeyRange]]:
        """Relation id -> the key ranges to copy again, for each table whose every request entry is a range
        entry over its integer range column (``cdc-apply verify --repair``) and that has its snapshot already.
        Any other entry for the table (a whole copy, a range over another column) copies it whole instead."""
        out = {}
        for shape, serves in shapes:
            parsed = [parse_range_entry(e) for e in serves]
            ranges = [p[1] for p in parsed if p is not None]
            rid = shape.published.relation_id
            if (parsed and len(ranges) == len(parsed) and all(k.column == shape.range_column for k in ranges)
                    and rid in state.snapshots.done):
                out[rid] = sorted(set(ranges), key=lambda k: (k.low is not None, k.low or 0))
        return out

    def _ranged(self, shape: catalog.TableShape) -> bool:
        return shape.range_column is not None and self.source.snapshot_chunk_rows > 0

    def _plan(self, copier: TableCopier, index: int, shape: catalog.TableShape, state: ResumeState,
              initial: bool) -> list:
        """The copy's chunks: key ranges (from where an interrupted copy stopped) for the initial snapshot of
        a table with an integer key, ranges of blocks otherwise."""
        if initial and self._ranged(shape):
            return copier.plan_ranges(index, shape, state.snapshots.resume_key(shape.published.relation_id),
                                      self.source.snapshot_chunk_rows)
        return copier.plan(index, shape)

    def _shape(self, copier: TableCopier, relation: catalog.PublishedRelation) -> catalog.TableShape | None:
        """The table as of the snapshot, locked; ``None`` (copied in a later round) when it was not published
        at the snapshot's point or its definition changed between that point and the lock."""
        cur = copier.coordinator.cursor()
        if not catalog.published_at_snapshot(cur, relation, self.publications):
            self.say(f"{relation.qualified_name} joined the publication after {copier.point}: copied later")
            return None
        copier.lock(relation.sql_name)
        then = catalog.describe(cur, relation, self.source.binary)
        with self.port.server.cursor() as now_cur:
            now = catalog.describe(now_cur, relation, self.source.binary)
        if (then.relation, then.types, then.select, then.sources) != (now.relation, now.types, now.select, now.sources):
            self.say(f"{relation.qualified_name} was altered after {copier.point}: copied later")
            return None
        if then.skipped:
            self.say(f"{relation.qualified_name}: partitions {', '.join(then.skipped)} have no storage of their "
                     "own (foreign tables) and are not copied; PostgreSQL does not publish their changes either")
        return then

    def _land_table(self, landing: "_Landing", shape: catalog.TableShape, serves: list, point: ConsistentPoint,
                    chunks: list, results: Iterator[ChunkResult]) -> None:
        """One table's snapshot stream: the head and the first chunk's rows in the first block, one block per
        further chunk with rows, the Stream Commit at the snapshot's LSN."""
        name, relation = shape.published.qualified_name, shape.relation
        rows, blocks_done = 0, 0
        total_blocks = sum(c.blocks for c in chunks) or 1
        started = shown = time.monotonic()
        head = [m.StreamStart(SNAPSHOT_XID, True), snapshot_marker(relation, point.lsn, len(chunks), serves=serves),
                *shape.types, relation, m.Truncate(SNAPSHOT_XID, 0, (relation.relation_id,))]
        opened = False
        for _ in chunks:
            result = next(results)
            blocks_done += result.chunk.blocks
            if len(result.payloads) or not opened:
                landing.frame(head if not opened else [m.StreamStart(SNAPSHOT_XID, False)])
                opened = True
                landing.rows(result.payloads)
                rows += len(result.payloads)
                landing.frame([m.StreamStop()])
                if landing.due:
                    landing.commit(name)
            now = time.monotonic()
            if now - shown >= PROGRESS_SECONDS:
                shown = now
                done_share = blocks_done / total_blocks
                left = (now - started) * (1 - done_share) / max(done_share, 1e-9)
                self.say(f"snapshot {name}: {rows:,} rows, ~{done_share:.0%} of {total_blocks:,} blocks, "
                         f"{rows / max(now - started, 1e-9):,.0f} rows/s, ETA {eta(left)}")
        if not opened:
            landing.frame(head + [m.StreamStop()])
        landing.frame([m.StreamCommit(SNAPSHOT_XID, 0, point.lsn, point.lsn, point.taken_at)])
        if landing.due:
            landing.commit(name)
        seconds = time.monotonic() - started
        self._count_table(rows)
        self.say(f"snapshot {name}: {rows:,} rows in {seconds:.1f} s ({rows / max(seconds, 1e-9):,.0f} rows/s), "
                 f"consistent with lsn {m.format_lsn(point.lsn)}")


class _Landing:
    """The snapshot rows of one round not yet committed to bronze, and the resume state after them."""

    def __init__(self, owner: Snapshots, state: ResumeState) -> None:
        self.owner = owner
        self.state = state
        self.tracker = OutputTracker.starting_at(state, owner.source.name)
        self.appender = owner.appender
        batch = owner.source.snapshot_batch_bytes
        # Rows waiting for a commit through Spark are held in memory: then land.batch_bytes bounds them too.
        self.limit = batch if self.appender.direct else min(batch, owner.port.batch_bytes)

    @property
    def due(self) -> bool:
        return self.appender.staged_bytes >= self.limit

    def frame(self, messages) -> None:
        payloads = [encode(message) for message in messages]
        first = self.tracker.last_seq + 1
        for payload in payloads:
            self.tracker.add(self.tracker.last_seq + 1, 0, payload)
        self.appender.add(pa.array(payloads, pa.binary()), first)

    def rows(self, payloads: pa.Array) -> None:
        first = self.tracker.last_seq + 1
        self.tracker.add_snapshot_rows(len(payloads))
        self.appender.add(payloads, first)

    def commit(self, table: str = "") -> None:
        """Everything framed so far as one bronze commit (never inside a block: callers commit after a Stop)."""
        if self.tracker.last_seq == self.state.last_seq:
            return
        state = self.tracker.state(self.state.batch + 1)
        self.appender.commit(state)
        self.state = state
        self.owner.port.probe("snapshot_appended", state=state, table=table)
