"""Copying published tables under a snapshot that PostgreSQL ties to a position of the change stream.

:class:`ExportSlot` creates a replication slot with ``SNAPSHOT 'export'`` — the
source's own slot for the initial snapshot, a TEMPORARY one later — and keeps
its replication session open: the exported snapshot lives only as long as it.
:class:`TableCopier` opens a coordinator session and several copy sessions
that import that snapshot (``BEGIN ISOLATION LEVEL REPEATABLE READ; SET
TRANSACTION SNAPSHOT``); large tables are copied in ranges of blocks (``ctid``
ranges, a TID Range Scan each) in parallel with ``COPY ... (FORMAT binary)``,
each range turned into Insert messages by :mod:`cdc_apply.lander.snapshots.copy_binary`.
Results come back in the order the ranges were planned, so the lander can
write one table's snapshot after another.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa

from cdc_apply.delta.names import pg_ident
from cdc_apply.errors import LandError
from cdc_apply.lander.dsn import connection_error, scrubbed_line
from cdc_apply.lander.options import SESSION_SETTINGS, TCP_KEEPALIVES, options_string
from cdc_apply.lander.snapshots.catalog import CopySource, TableShape
from cdc_apply.lander.snapshots.copy_binary import CopySink, insert_payloads
from cdc_apply.pgoutput.messages import PG_EPOCH_UNIX_MICROS, format_lsn, parse_lsn
from cdc_apply.pgoutput.snapshot import KeyRange

if TYPE_CHECKING:
    from psycopg2.extras import LogicalReplicationConnection

CHUNK_BLOCKS = 2048          # 16 MiB of heap per copied range (8 kB blocks)
PROGRESS_SECONDS = 5.0       # how often a copy under way says how far it is
SAMPLE_BLOCKS = 2000         # blocks sampled (TABLESAMPLE SYSTEM) to cut a table into key ranges


def read_server_lsn(text: str) -> int:
    """An LSN the server answered, as a number; a ``LandError`` when it cannot be read."""
    try:
        return parse_lsn(text.strip())
    except ValueError:
        raise LandError(f"the server answered an LSN that cannot be read: {text!r}") from None


def eta(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def now_micros() -> int:
    """The current time in PostgreSQL's microseconds since 2000-01-01 UTC."""
    return time.time_ns() // 1000 - PG_EPOCH_UNIX_MICROS


@dataclass(frozen=True)
class ConsistentPoint:
    """Where a slot's decoding starts (``lsn``) and the exported snapshot that sees exactly what committed before."""

    slot: str
    lsn: int
    snapshot: str
    taken_at: int           # PostgreSQL microseconds

    def __str__(self) -> str:
        return f"{format_lsn(self.lsn)} (slot {self.slot!r}, snapshot {self.snapshot})"


class ExportSlot:
    """``CREATE_REPLICATION_SLOT ... LOGICAL pgoutput (SNAPSHOT 'export')`` on a replication session kept open."""

    def __init__(self, dsn: str, slot: str, temporary: bool, two_phase: bool = False,
                 connect_timeout: float = 10.0, application_name: str = "cdc_apply-snapshot") -> None:
        self.dsn = dsn
        self.slot = slot
        self.temporary = temporary
        self.two_phase = two_phase
        self.connect_timeout = connect_timeout
        self.application_name = application_name
        self._conn: LogicalReplicationConnection | None = None

    def create(self) -> ConsistentPoint:
        """Create the slot; it waits for the transactions running now to end (to find a consistent point)."""
        import psycopg2
        from psycopg2.extras import LogicalReplicationConnection

        try:
            self._conn = conn = psycopg2.connect(self.dsn, connection_factory=LogicalReplicationConnection,
                                                 connect_timeout=max(1, int(self.connect_timeout)),
                                                 application_name=self.application_name[:63], **TCP_KEEPALIVES)
        except psycopg2.Error as exc:
            raise connection_error(exc, self.dsn, replication=True) from None
        name = pg_ident(self.slot)
        if conn.server_version >= 150000:
            options = (["TWO_PHASE true"] if self.two_phase else []) + ["SNAPSHOT 'export'"]
            command = (f"CREATE_REPLICATION_SLOT {name}{' TEMPORARY' if self.temporary else ''} LOGICAL pgoutput "
                       f"({', '.join(options)})")
        elif self.two_phase:
            raise LandError("creating a two-phase slot with an exported snapshot needs PostgreSQL 15",
                            key="source.two_phase")
        else:
            command = (f"CREATE_REPLICATION_SLOT {name}{' TEMPORARY' if self.temporary else ''} LOGICAL pgoutput "
                       "EXPORT_SNAPSHOT")
        try:
            with conn.cursor() as cur:
                cur.execute(command)
                slot, lsn, snapshot, _ = cur.fetchone()
        except psycopg2.Error as exc:
            self.close()
            raise LandError(f"creating replication slot {self.slot!r} with an exported snapshot failed: "
                            f"{scrubbed_line(exc, self.dsn)}", slot=self.slot) from None
        return ConsistentPoint(slot, read_server_lsn(lsn), snapshot, now_micros())

    def close(self) -> None:
        """End the session: the snapshot is gone, a temporary slot is dropped."""
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken: nothing left to release
                pass
            self._conn = None

    def __enter__(self) -> "ExportSlot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Chunk:
    """One COPY: a range of blocks ``[low, high)`` of a copy source (``None``: open end), or — with ``key`` —
    the source's rows whose key column lies in a key range."""

    table: int              # index of the table in the copier's list
    source: CopySource
    low: int | None
    high: int | None
    blocks: int             # the blocks it covers, for progress
    key: KeyRange | None = None
    part: int = 0           # the key range's index in its table's plan (one chunk per copy source shares it)

    def where(self, row_filter: str | None) -> str:
        parts = [f"({row_filter})"] if row_filter else []
        if self.key is not None:
            column = pg_ident(self.key.column)
            if self.key.low is not None:
                parts.append(f"{column} >= {int(self.key.low)}")
            if self.key.high is not None:
                parts.append(f"{column} < {int(self.key.high)}")
        else:
            if self.low is not None:
                parts.append(f"ctid >= '({self.low},0)'::tid")
            if self.high is not None:
                parts.append(f"ctid < '({self.high},0)'::tid")
        return f" WHERE {' AND '.join(parts)}" if parts else ""


@dataclass(frozen=True)
class ChunkResult:
    chunk: Chunk
    payloads: pa.BinaryArray
    copied_bytes: int


class TableCopier:
    """A coordinator session and ``workers`` copy sessions, all in the snapshot of ``point``."""

    def __init__(self, dsn: str, point: ConsistentPoint, workers: int, connect_timeout: float = 10.0,
                 application_name: str = "cdc_apply-snapshot") -> None:
        self.dsn = dsn
        self.point = point
        self.workers = max(1, workers)
        self.connect_timeout = connect_timeout
        self.application_name = application_name[:63]
        self._local = threading.local()
        self._conns: list = []
        self._lock = threading.Lock()
        self.coordinator = self._connect()

    def _connect(self):
        import psycopg2

        try:
            conn = psycopg2.connect(self.dsn, connect_timeout=max(1, int(self.connect_timeout)),
                                    application_name=self.application_name,
                                    options=options_string(SESSION_SETTINGS), **TCP_KEEPALIVES)
        except psycopg2.Error as exc:
            raise connection_error(exc, self.dsn) from None
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cur.execute("SET TRANSACTION SNAPSHOT %s", (self.point.snapshot,))
                # A key range is read by index: a sequential scan per range would read the table once per range.
                cur.execute("SET LOCAL enable_seqscan = off")
        except psycopg2.Error as exc:
            conn.close()
            raise LandError(f"importing snapshot {self.point.snapshot} failed: "
                            f"{scrubbed_line(exc, self.dsn)}", lsn=format_lsn(self.point.lsn)) from None
        with self._lock:
            self._conns.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except Exception:  # closing is best effort
                pass

    def lock(self, shape_sql_name: str) -> None:
        """ACCESS SHARE on a table until the snapshot ends: no DDL can change it while it is copied."""
        with self.coordinator.cursor() as cur:
            cur.execute(f"LOCK TABLE {shape_sql_name} IN ACCESS SHARE MODE")

    def plan(self, index: int, shape: TableShape) -> list[Chunk]:
        """Ranges of at most :data:`CHUNK_BLOCKS` blocks per copy source; the last one open-ended."""
        chunks = []
        with self.coordinator.cursor() as cur:
            for source in shape.sources:
                cur.execute("SELECT pg_relation_size(%s) / current_setting('block_size')::int8", (source.oid,))
                blocks = int(cur.fetchone()[0])
                if blocks <= CHUNK_BLOCKS:
                    chunks.append(Chunk(index, source, None, None, max(blocks, 1)))
                    continue
                edges = list(range(0, blocks, CHUNK_BLOCKS))
                for low, high in zip(edges, edges[1:] + [None]):
                    chunks.append(Chunk(index, source, low or None, high,
                                        (high if high is not None else blocks) - low))
        return chunks

    def plan_ranges(self, index: int, shape: TableShape, low: int | None, chunk_rows: int) -> list[Chunk]:
        """Key ranges of about ``chunk_rows`` rows from ``low`` on (``None``: the lowest key) over
        ``shape.range_column``, cut at quantiles of a sample of the table's blocks; one chunk per range and
        copy source, in key order, the last range open-ended."""
        range_column = shape.range_column
        if range_column is None:
            raise LandError("a table without an integer key column cannot be copied in key ranges",
                            table=shape.published.qualified_name)
        column = pg_ident(range_column)
        keys: list[int] = []
        blocks = 0
        with self.coordinator.cursor() as cur:
            for source in shape.sources:
                cur.execute("SELECT pg_relation_size(%s) / current_setting('block_size')::int8", (source.oid,))
                blocks += int(cur.fetchone()[0])
            share = min(100.0, 100.0 * SAMPLE_BLOCKS / max(blocks, 1))
            for source in shape.sources:
                cur.execute(f"SELECT {column} FROM ONLY {source.sql_name} TABLESAMPLE SYSTEM (%s)"
                            + (f" WHERE {column} >= %s" if low is not None else ""),
                            (share,) + ((int(low),) if low is not None else ()))
                keys += [int(r[0]) for r in cur.fetchall() if r[0] is not None]
        keys.sort()
        estimate = len(keys) * 100.0 / share
        parts = max(1, -(-int(estimate) // max(chunk_rows, 1)))
        cuts = sorted({keys[len(keys) * i // parts] for i in range(1, parts)} - {low}) if keys else []
        edges = [low, *cuts, None]
        chunks = []
        for part, (lo, hi) in enumerate(zip(edges, edges[1:])):
            for source in shape.sources:
                chunks.append(Chunk(index, source, None, None, max(1, blocks // parts),
                                    KeyRange(range_column, lo, hi), part))
        return chunks

    def copy(self, shapes: list[TableShape], chunks: list[Chunk]) -> Iterator[ChunkResult]:
        """Copy ``chunks`` on the worker sessions, yielding results in the order given."""
        window = 2 * self.workers
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="snapshot-copy") as pool:
            pending: deque[Future] = deque()
            queue = iter(chunks)
            try:
                for chunk in queue:
                    pending.append(pool.submit(self._copy, shapes[chunk.table], chunk))
                    if len(pending) >= window:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                for future in pending:
                    future.cancel()

    def _copy(self, shape: TableShape, chunk: Chunk) -> ChunkResult:
        import psycopg2

        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        sql = (f"COPY (SELECT {', '.join(shape.select)} FROM ONLY {chunk.source.sql_name}"
               f"{chunk.where(shape.published.row_filter)}) TO STDOUT (FORMAT binary)")
        sink = CopySink()
        try:
            with conn.cursor() as cur:
                cur.copy_expert(sql, sink)
        except psycopg2.Error as exc:
            raise LandError(f"copying {shape.published.qualified_name} failed: "
                            f"{scrubbed_line(exc, self.dsn)}", table=chunk.source.sql_name,
                            lsn=format_lsn(self.point.lsn)) from None
        copied = sum(map(len, sink.parts))
        try:
            payloads = insert_payloads(sink.parts, shape.relation.relation_id, shape.formats)
        except LandError as err:
            raise err.with_context(table=chunk.source.sql_name, lsn=format_lsn(self.point.lsn)) from None
        return ChunkResult(chunk, payloads, copied)
