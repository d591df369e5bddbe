"""Key-range chunks copied while the stream flows: each round of chunks consistent with a point of its own.

A later snapshot of a table with an integer key (a request, a table added to the publication, the
rest of an initial snapshot a stopped lander left) is copied a *round* at a time: up to
``snapshot_workers`` key ranges under one exported snapshot of a temporary slot, consistent with its
point ``C``, copied in the background while the lander goes on streaming. The chunks land where the
stream reaches ``C`` — after every transaction committed below it, before the first one committed at
or after it (the first Begin, Stream Commit or Commit Prepared at ``C`` or later, a non-transactional
message there, or an idle walsender past it). The session ends just before that message (the
walsender sends it again), the chunks land, and the next round takes a new point. So the apply needs
no rule of its own for them: a chunk replaces its range of silver at exactly its place in commit
order. The stream is held only from ``C`` until the round's copy is done — about one chunk's copy
time, not the table's — and everything before ``C`` streams while the copy runs.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import pyarrow.compute as pc

from cdc_apply.config import SourceConfig
from cdc_apply.lander import framing as f
from cdc_apply.lander.snapshots import catalog
from cdc_apply.lander.snapshots.copy_sessions import (
    PROGRESS_SECONDS,
    Chunk,
    ChunkResult,
    ConsistentPoint,
    ExportSlot,
    TableCopier,
    eta,
)
from cdc_apply.lander.state import ResumeState
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.pgoutput.snapshot import SNAPSHOT_XID, KeyRange, snapshot_marker

KEEPALIVE_SECONDS = 0.25   # how often an idle session asks the walsender how far it has sent


@dataclass(frozen=True)
class ChunkContext:
    """What chunk rounds need of the lander they run in: its source's settings, where to connect, and its
    ways to land rows, to report and to count. A flow reaches nothing else of the lander."""

    source: SourceConfig
    dsn: str
    landing: Callable[[ResumeState], Any]   # snapshot rows framed from a resume state on, committed by the caller
    say: Callable[[str], None]
    probe: Callable[..., None]               # the lander's test hook: (event, **info)
    landed: Callable[[int], None]            # a table fully landed, with its rows: the run's totals


class ChunkFlow:
    """The chunk rounds of one or more tables (``tables``: ``[(shape, request entries served)]``)."""

    def __init__(self, context: ChunkContext, tables: list[tuple[catalog.TableShape, list]],
                 state: ResumeState, repairs: dict[int, list[KeyRange]] | None = None) -> None:
        self.context = context
        self.queue = list(tables)
        self.repairs = dict(repairs or {})   # relation id -> the key ranges copied again on request
        self.keys: list = []             # the current table's key ranges still to copy (planned once)
        self.point: ConsistentPoint | None = None
        self.triggered = False
        self.copy: Future | None = None
        self.slot: ExportSlot | None = None
        self.copier: TableCopier | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot-chunks")
        self._lock = threading.Lock()
        self._asked = 0.0
        self.rows, self.parts = 0, 0
        self.started = time.monotonic()
        self.resume_key = state.snapshots.resume_key

    @property
    def finished(self) -> bool:
        return not self.queue and self.copy is None

    def owns(self, slot: ExportSlot) -> bool:
        return self.slot is slot

    # -- a round ----------------------------------------------------------------------------
    def start(self, slot: ExportSlot, copier: TableCopier, point: ConsistentPoint) -> None:
        """Copy the first round under ``point`` (its slot and sessions are the flow's from now on)."""
        self._round(slot, copier, point)

    def _round(self, slot: ExportSlot, copier: TableCopier, point: ConsistentPoint) -> None:
        shape, _ = self.queue[0]
        if not self.keys and shape.published.relation_id in self.repairs:
            self.keys = list(self.repairs[shape.published.relation_id])
        elif not self.keys:
            planned = copier.plan_ranges(0, shape, self.resume_key(shape.published.relation_id),
                                         self.context.source.snapshot_chunk_rows)
            self.keys = [next(c.key for c in planned if c.part == p) for p in sorted({c.part for c in planned})]
        workers = self.context.source.snapshot_workers
        keys, self.keys = self.keys[:workers], self.keys[workers:]
        chunks = [Chunk(0, source, None, None, 1, key, part)
                  for part, key in enumerate(keys) for source in shape.sources]
        self.slot, self.copier, self.point, self.triggered = slot, copier, point, False
        self.copy = self._pool.submit(self._copy, copier, slot, shape, chunks)

    def _copy(self, copier: TableCopier, slot: ExportSlot, shape, chunks) -> list[tuple[object, ChunkResult]]:
        """Runs in the background; the exported snapshot is released as soon as the rows are read."""
        try:
            return list(zip(chunks, copier.copy([shape], chunks)))
        finally:
            copier.close()
            slot.close()

    def _next_round(self) -> None:
        name = f"cdc_apply_snap_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        source = self.context.source
        slot = ExportSlot(self.context.dsn, name, temporary=True, connect_timeout=source.connect_timeout,
                          application_name=f"cdc_apply-land-{source.name}")
        point = slot.create()
        try:
            copier = TableCopier(self.context.dsn, point, source.snapshot_workers, source.connect_timeout,
                                 f"cdc_apply-snapshot-{source.name}")
        except Exception:
            slot.close()
            raise
        # Described again under each point: the chunks' Relation is the table as of their copy.
        shape, serves = self.queue[0]
        copier.lock(shape.published.sql_name)
        self.queue[0] = (catalog.describe(copier.coordinator.cursor(), shape.published, source.binary), serves)
        self._round(slot, copier, point)

    # -- where the stream reaches the point ---------------------------------------------------
    def reached(self, message, seq, reader) -> bool:
        """Whether the stream has reached the round's point: ``message`` (just read, not fed yet) decides at
        or past it, or the session is idle with everything before it sent. Sets :attr:`triggered`."""
        if self.point is None or self.triggered:
            return self.triggered
        if message is not None:
            if seq.in_block:
                return False
            lsn = f.decision_lsn(message[1])
            self.triggered = lsn is not None and lsn >= self.point.lsn
            return self.triggered
        if seq.settled and reader.wal_end >= self.point.lsn:
            self.triggered = True
            return True
        now = time.monotonic()
        if now - self._asked >= KEEPALIVE_SECONDS:
            reader.request_keepalive()
            self._asked = now
        return False

    def land(self, state: ResumeState) -> ResumeState:
        """Land the round's chunks (waiting for their copy), then start the next round or the next table."""
        copy, point = self.copy, self.point
        assert copy is not None and point is not None  # landed once reached(): the round's copy and point are set
        results = copy.result()
        self.copy = None
        shape, serves = self.queue[0]
        landing = self.context.landing(state)
        parts = sorted({c.part for c, _ in results})
        repair = shape.published.relation_id in self.repairs
        for part in parts:
            key = next(c.key for c, _ in results if c.part == part)
            payloads = [r.payloads for c, r in results if c.part == part]
            last = not self.keys and part == parts[-1]
            self.rows += land_range(landing, shape, serves if last else [], point, key, payloads, repair)
        landing.commit(shape.published.qualified_name)
        state = landing.state
        name = shape.published.qualified_name
        done = not self.keys
        self.parts += len(parts)
        if not done:
            self.context.say(f"snapshot {name}: {self.rows:,} rows, {len(parts)} key ranges landed at "
                             f"{format_lsn(point.lsn)}, {len(self.keys)} to go")
        else:
            seconds = time.monotonic() - self.started
            rate = self.rows / max(seconds, 1e-9)
            self.context.say(f"snapshot {name}: {self.rows:,} rows in {seconds:.1f} s ({rate:,.0f} rows/s), "
                             f"{self.parts} key ranges of {shape.range_column}, the last consistent with lsn "
                             f"{format_lsn(point.lsn)}")
        self.context.probe("snapshot_chunks_landed", state=state, table=name)
        if done:
            self.context.landed(self.rows)
            self.repairs.pop(shape.published.relation_id, None)
            self.queue.pop(0)
            self.rows, self.parts, self.started = 0, 0, time.monotonic()
        self.point, self.triggered = None, False
        if self.queue:
            self._next_round()
        return state

    def close(self) -> None:
        if self.copy is not None:
            self.copy.cancel()
            try:
                self.copy.result(timeout=60)
            except Exception:  # noqa: BLE001 - the flow is abandoned: its chunks are copied again later
                pass
        self._pool.shutdown(wait=False)
        for part in (self.copier, self.slot):
            if part is not None:
                part.close()


def land_range(landing, shape: catalog.TableShape, serves: list, point: ConsistentPoint,
               key: KeyRange, payloads: list, repair: bool = False) -> int:
    """One key-range chunk as its own snapshot stream (no Truncate: the apply empties only the range);
    returns its rows. ``serves``: the requests it serves (the table's last range: its copy is complete);
    ``repair``: a range copied again on request, not part of a table's copy."""
    relation = shape.relation
    rows = sum(len(p) for p in payloads)
    widest = max((pc.max(pc.binary_length(p)).as_py() for p in payloads if len(p)), default=None)
    marker = snapshot_marker(relation, point.lsn, key_range=replace(key, rows=rows, widest=widest), serves=serves,
                             repair=repair)
    landing.frame([m.StreamStart(SNAPSHOT_XID, True), marker, *shape.types, relation])
    for part in payloads:
        if len(part):
            landing.rows(part)
    landing.frame([m.StreamStop(), m.StreamCommit(SNAPSHOT_XID, 0, point.lsn, point.lsn, point.taken_at)])
    if landing.due:
        landing.commit(shape.published.qualified_name)
    return rows


def land_ranges(context: ChunkContext, landing, shape: catalog.TableShape, serves: list, point: ConsistentPoint,
                chunks: list, results: Iterator[ChunkResult]) -> None:
    """One snapshot stream per key range of the table (a chunk per copy source each), in key order."""
    name = shape.published.qualified_name
    started = shown = time.monotonic()
    rows, parts = 0, chunks[-1].part + 1
    for part in range(parts):
        payloads = [next(results).payloads for c in chunks if c.part == part]
        key = next(c.key for c in chunks if c.part == part)
        rows += land_range(landing, shape, serves if part == parts - 1 else [], point, key, payloads)
        now = time.monotonic()
        if now - shown >= PROGRESS_SECONDS:
            shown = now
            share = (part + 1) / parts
            left = eta((now - started) * (1 - share) / share)
            context.say(f"snapshot {name}: {rows:,} rows, {part + 1} of {parts} key ranges, "
                        f"{rows / max(now - started, 1e-9):,.0f} rows/s, ETA {left}")
    context.landed(rows)
    seconds = time.monotonic() - started
    context.say(f"snapshot {name}: {rows:,} rows in {seconds:.1f} s ({rows / max(seconds, 1e-9):,.0f} rows/s), "
                f"{parts} key ranges of {shape.range_column}, consistent with lsn {m.format_lsn(point.lsn)}")
