"""PostgreSQL's side of a verification: one snapshot whose position in the change stream is known exactly,
each table's shape, key ranges, and per range a row count and hash sum — read at a bounded rate.

The point comes from a TEMPORARY logical replication slot created with an exported snapshot
(:class:`~cdc_apply.lander.snapshots.copy_sessions.ExportSlot`): the snapshot shows exactly the transactions
whose commit LSN is below the slot's consistent point ``C`` (decoding starts there), so it is the state
after the newest commit below ``C``. One REPEATABLE READ transaction imports it and does every read; the
slot is dropped once it is imported (the transaction keeps its snapshot).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdc_apply.delta.names import pg_ident
from cdc_apply.errors import CdcApplyError, VerifyError
from cdc_apply.lander.dsn import connection_error, scrubbed_line
from cdc_apply.lander.options import SESSION_SETTINGS, options_string
from cdc_apply.lander.snapshots.catalog import FIRST_GENBKI_OID, TYPE_NAMES
from cdc_apply.lander.snapshots.copy_sessions import ConsistentPoint, ExportSlot
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.pgoutput.types import ColumnType, TypeOptions, resolve_relation_column
from cdc_apply.verification.encoding import ColumnEncoding, RangeKind, pg_key_text, pg_range_predicate, pg_row_hash

if TYPE_CHECKING:
    from psycopg2.extensions import connection as PgConnection

SAMPLE_ROWS = 20000   # range cut points come from about this many sampled keys

# (A backslash ending a line inside the SQL joins it to the next: the text is one line there.)
_SHAPE = """
SELECT c.oid::int8, c.relkind, c.relreplident, c.relispartition,
       CASE WHEN c.relkind = 'p' THEN COALESCE((SELECT sum(GREATEST(p.reltuples, 0))::int8 \
FROM pg_partition_tree(c.oid) t
                 JOIN pg_class p ON p.oid = t.relid WHERE p.relkind <> 'p'), 0) ELSE GREATEST(c.reltuples, 0)::int8 END,
       (SELECT i.indkey::int2[] FROM pg_index i WHERE i.indrelid = c.oid AND CASE c.relreplident
            WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END LIMIT 1)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s
"""
# The publications' row filters of a table: none when any publication publishes it unfiltered (the
# filters of several publications are OR-ed, as the walsender applies them).
_ROW_FILTER = """
SELECT bool_or(rowfilter IS NULL), array_agg(rowfilter) FILTER (WHERE rowfilter IS NOT NULL)
FROM pg_publication_tables WHERE pubname = ANY(%s) AND schemaname = %s AND tablename = %s
"""
# Each column's send function (an array's: its element type's), qualified: a binary stream keeps the types
# the decoder has no converter for as their send form's bytes.
_COLUMNS = """
SELECT a.attnum, a.attname, a.atttypid::int8, a.atttypmod, format_type(a.atttypid, NULL),
       (SELECT quote_ident(n.nspname) || '.' || quote_ident(p.proname) FROM pg_type t
        LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
        JOIN pg_proc p ON p.oid = COALESCE(e.typsend, t.typsend) JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE t.oid = a.atttypid)
FROM pg_attribute a WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
"""


@dataclass(frozen=True)
class SourceColumn:
    name: str
    type: ColumnType
    sql_type: str     # format_type without typmod, for typed arrays of key values
    send: str | None = None   # the type's send function (an array's element type's), qualified


@dataclass(frozen=True)
class SourceTable:
    """A table as the verification reads it: its columns, its replica identity key (empty: keyless, a multiset)."""

    namespace: str
    name: str
    oid: int
    columns: tuple[SourceColumn, ...]
    key: tuple[str, ...]
    estimated_rows: int
    row_filter: str | None = None   # the publications' row filter (SQL): silver holds only the rows it passes
    is_partition: bool = False      # a partition of a partitioned table (pg_class.relispartition)

    @property
    def sql(self) -> str:
        return f"{pg_ident(self.namespace)}.{pg_ident(self.name)}"

    def where(self, predicate: str) -> str:
        """``predicate`` and the row filter, as a WHERE clause's body (for a query with parameters)."""
        return predicate if self.row_filter is None else f"({predicate}) AND ({self.row_filter.replace('%', '%%')})"

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"

    def column(self, name: str) -> SourceColumn:
        return next(c for c in self.columns if c.name == name)


class RateLimit:
    """Sleeps so that rows read stay at or below ``rows_per_second`` on average since the start (None: no bound)."""

    def __init__(self, rows_per_second: float | None) -> None:
        self.rows_per_second = rows_per_second
        self.rows = 0
        self.start = time.monotonic()
        self.slept = 0.0

    def read(self, rows: int) -> None:
        self.rows += rows
        if not self.rows_per_second:
            return
        due = self.start + self.rows / self.rows_per_second - time.monotonic()
        if due > 0:
            time.sleep(due)
            self.slept += due


class SourceSnapshot:
    """A session in one exported snapshot of ``dsn``; ``point.lsn`` is its consistent point."""

    def __init__(self, dsn: str, rows_per_second: float | None = None, connect_timeout: float = 10.0) -> None:
        self.dsn = dsn
        self.limit = RateLimit(rows_per_second)
        self.connect_timeout = connect_timeout
        self.point: ConsistentPoint | None = None
        self.conn: PgConnection | None = None

    def open(self) -> ConsistentPoint:
        """Create a temporary slot with an exported snapshot, import it in a read-only transaction, drop the slot."""
        import psycopg2

        slot = ExportSlot(self.dsn, f"cdc_apply_verify_{os.getpid()}_{time.monotonic_ns() % 10 ** 9}", temporary=True,
                          connect_timeout=self.connect_timeout, application_name="cdc_apply-verify")
        try:
            try:
                self.point = slot.create()
            except CdcApplyError as exc:  # the slot could not be made (unreachable, rights, max_replication_slots)
                raise VerifyError(f"no consistent point: {exc.detail}", **exc.context) from None
            except Exception as exc:
                raise VerifyError(f"no consistent point: {exc}") from None
            try:
                self.conn = conn = psycopg2.connect(self.dsn, connect_timeout=max(1, int(self.connect_timeout)),
                                                    application_name="cdc_apply-verify",
                                                    options=options_string(SESSION_SETTINGS))
            except psycopg2.Error as exc:
                err = connection_error(exc, self.dsn)
                raise VerifyError(err.detail, **err.context) from None
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cur.execute("SET TRANSACTION SNAPSHOT %s", (self.point.snapshot,))
        finally:
            slot.close()   # the imported transaction keeps the snapshot; the temporary slot goes
        return self.point

    def cancel(self) -> None:
        """Stop the query under way (from another thread), if any: the run ends without its result."""
        if self.conn is not None:
            try:
                self.conn.cancel()
            except Exception:  # best effort: the session is closed next
                pass

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # closing is best effort
                pass
            self.conn = None

    def __enter__(self) -> "SourceSnapshot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> PgConnection:
        if self.conn is None:
            raise VerifyError("the source snapshot is not open (SourceSnapshot.open)")
        return self.conn

    def _point(self) -> ConsistentPoint:
        if self.point is None:
            raise VerifyError("the source snapshot has no consistent point (SourceSnapshot.open)")
        return self.point

    def _query(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        import psycopg2

        conn = self._connection()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, tuple(params))   # always formatted: a row filter's % is written %%
                return cur.fetchall()
        except psycopg2.Error as exc:
            lsn = format_lsn(self.point.lsn) if self.point else None
            raise VerifyError(f"reading the source failed: {scrubbed_line(exc, self.dsn)}",
                              lsn=lsn) from None

    def values(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        """The rows of one query read in the snapshot (``%s`` parameters)."""
        return self._query(sql, params)

    def table(self, namespace: str, name: str, options: TypeOptions = TypeOptions(),
              publications: tuple[str, ...] = ()) -> SourceTable | None:
        """The table's shape under the snapshot (None: no such table now), with the row filter
        ``publications`` give it."""
        rows = self._query(_SHAPE, (namespace, name))
        if not rows:
            return None
        oid, _kind, identity, partition, estimate, key_attnums = rows[0]
        columns, by_attnum = [], {}
        found = self._query(_COLUMNS, (oid,))
        # User types by the names pgoutput's Type messages give them, as the decoder typed silver's columns (an
        # enum's array is an array).
        user_oids = sorted({int(c[2]) for c in found if int(c[2]) >= FIRST_GENBKI_OID})
        named = {int(o): (ns, n) for o, ns, n in self._query(TYPE_NAMES, (user_oids,))} if user_oids else {}
        for attnum, attname, type_oid, typmod, sql_type, send in found:
            column_type = resolve_relation_column(int(type_oid), int(typmod), named, options, f"{namespace}.{name}",
                                                  attname)   # an array column's configured dimensions
            column = SourceColumn(attname, column_type, sql_type, send)
            columns.append(column)
            by_attnum[int(attnum)] = column
        key = () if identity in ("f", "n") or not key_attnums else tuple(by_attnum[int(a)].name for a in key_attnums)
        row_filter = None
        if publications:
            unfiltered, filters = self._query(_ROW_FILTER, (list(publications), namespace, name))[0]
            if not unfiltered and filters:
                row_filter = " OR ".join(f"({f})" for f in filters)
        return SourceTable(namespace, name, int(oid), tuple(columns), key, int(estimate), row_filter, bool(partition))

    def sample(self, table: SourceTable, column: str) -> list:
        """Values of ``column`` from a block sample of about :data:`SAMPLE_ROWS` rows (all rows of a small table)."""
        share = min(100.0, 100.0 * SAMPLE_ROWS / max(table.estimated_rows, 1))
        sample = "" if share >= 100.0 else f" TABLESAMPLE SYSTEM ({share})"
        rows = self._query(f"SELECT {pg_key_text(column)} FROM {table.sql}{sample}")
        self.limit.read(len(rows))
        return [r[0] for r in rows]

    def range_sums(self, table: SourceTable, columns: list[ColumnEncoding], where: str, params: list,
                   buckets: int | None = None) -> dict[int, tuple[int, int]]:
        """``{range: (rows, hash sum)}`` of the rows ``where`` selects: one range (0), or with ``buckets``
        (a keyless table) the row hash's bucket, ``pmod(hash, buckets)``."""
        h = pg_row_hash(columns)
        if buckets:
            sql = (f"SELECT mod(mod(h, {buckets}) + {buckets}, {buckets}), count(*), sum(h) "
                   f"FROM (SELECT {h} AS h FROM {table.sql} WHERE {table.where(where)}) r GROUP BY 1")
        else:
            sql = f"SELECT 0, count(*), COALESCE(sum({h}), 0) FROM {table.sql} WHERE {table.where(where)}"
        out = {int(r): (int(n), int(s)) for r, n, s in self._query(sql, params) if n}
        self.limit.read(sum(n for n, _ in out.values()))
        return out

    def grouped_sums(self, table: SourceTable, columns: list[ColumnEncoding], column: str, kind: RangeKind,
                     bounds: list) -> dict[int, tuple[int, int]]:
        """``{range: (rows, hash sum)}`` of every range cut at ``bounds`` on ``column``, in one scan
        (:func:`grouped_sums_sql`). One scan of the table costs less than a query per range: each is an index
        range scan that reads the heap in the index's order."""
        sql, params = grouped_sums_sql(table, columns, column, kind, bounds)
        out = {int(r): (int(n), int(s)) for r, n, s in self._query(sql, params) if n}
        self.limit.read(sum(n for n, _ in out.values()))
        return out

    def rows(self, table: SourceTable, columns: list[ColumnEncoding], key: list[str], where: str,
             params: list) -> list[tuple]:
        """``(key texts..., row hash)`` of every row ``where`` selects (keyless: the row's text for a key)."""
        from cdc_apply.verification.encoding import pg_row_text

        keys = [pg_key_text(k) for k in key] or [pg_row_text(columns)]
        out = self._query(f"SELECT {', '.join(keys)}, {pg_row_hash(columns)} FROM {table.sql} "
                          f"WHERE {table.where(where)}", params)
        self.limit.read(len(out))
        return out

    def emit_marker(self) -> None:
        """A transactional logical message committed after the point, so a quiet source still gets a commit
        past it for the apply job to reach (best effort: a source without ``messages`` ignores it)."""
        import psycopg2

        point = self._point()
        try:
            conn = psycopg2.connect(self.dsn, connect_timeout=max(1, int(self.connect_timeout)))
        except psycopg2.Error:
            return
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT pg_logical_emit_message(true, 'cdc_apply.verify', %s)",
                            (format_lsn(point.lsn),))
        except psycopg2.Error:
            pass
        finally:
            conn.close()


def grouped_sums_sql(table: SourceTable, columns: list[ColumnEncoding], column: str, kind: RangeKind,
                     bounds: list) -> tuple[str, list]:
    """SQL and parameters of every range's ``(range, rows, hash sum)``: a row's range is ``width_bucket`` over
    the cut points (the count of those at or below its key, as Spark's
    :func:`~cdc_apply.verification.encoding.spark_range_index` numbers it), in the order both sides use.

    The rows are grouped through a join with the ranges' numbers (``generate_series``), not by ``width_bucket``
    alone: the planner takes an expression of a unique key for as many groups as rows and sorts the whole
    table (on disk) to group it; told there are ``len(bounds) + 1`` groups, each parallel worker hashes them.
    A replica identity's key columns are NOT NULL, so every row has a range and joins."""
    h = pg_row_hash(columns)
    c = pg_ident(column) + (' COLLATE "C"' if kind == "text" else "")
    array = {"int": "int8", "uuid": "uuid", "text": "text"}[kind]
    return (f"SELECT b.r, count(*), sum(g.h) FROM (SELECT width_bucket({c}, %s::{array}[]) AS r, {h} AS h "
            f"FROM {table.sql} WHERE {table.where('TRUE')}) g JOIN generate_series(0, {len(bounds)}) b(r) "
            "ON b.r = g.r GROUP BY b.r", [list(bounds)])


def key_predicate(table: SourceTable, range_column: str | None, kind: RangeKind | None, low, high) -> tuple[str, list]:
    """SQL and parameters selecting one key range of ``table`` (the whole table without a range column)."""
    if range_column is None:
        return "TRUE", []
    return pg_range_predicate(range_column, kind, low, high)


def excluded_predicate(table: SourceTable, columns: list[ColumnEncoding], keys: list[tuple]) -> tuple[str, list]:
    """SQL and parameters selecting the rows of ``keys`` (key texts; keyless: row hashes) — to subtract them."""
    if not table.key:
        return f"{pg_row_hash(columns)} = ANY(%s::int8[])", [[int(k[0]) for k in keys]]
    names = ", ".join(pg_ident(k) for k in table.key)
    arrays = ", ".join(f"%s::{table.column(k).sql_type}[]" for k in table.key)
    return (f"({names}) IN (SELECT * FROM unnest({arrays}))",
            [[k[i] for k in keys] for i in range(len(table.key))])
