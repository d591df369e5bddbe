"""Does a history table hold every state its PostgreSQL table went through? Does ``read_as_of`` equal
PostgreSQL at an LSN?

:class:`SourceRecord` keeps the source's state after every statement batch a workload ran (a
snapshot of its tables and ``pg_current_wal_insert_lsn()`` right after it). A commit's LSN is below
the insert position read after it, and the next commit's is at or above it, so the history as of
that position minus one is the state after the commit (:meth:`SourceRecord.take`). States are
compared on the columns the history table still has under the same name (a column dropped or renamed
since is not compared; silver's own comparison covers those), typed values exactly, as
:mod:`cdc_apply.testing.compare` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import pyarrow as pa

from cdc_apply.errors import StateError
from cdc_apply.pgoutput.messages import parse_lsn
from cdc_apply.testing.compare import (
    SourceTable,
    apply_column_rules,
    compare_tables,
    silver_table,
    snapshot_postgres,
    typed_source_table,
)

if TYPE_CHECKING:
    from cdc_apply.lake.history.as_of import AsOfMethod


@dataclass
class SourceRecord:
    """The source's states, in commit order: (LSN to read them at, tables)."""

    schemas: tuple[str, ...]
    states: list[tuple[int, list[SourceTable]]] = field(default_factory=list)

    def recorder(self, conn, execute: Callable[[str], None]) -> Callable[[str], None]:
        """``execute`` that records the state after each call (what it committed, if anything)."""
        def run(sql: str) -> None:
            execute(sql)
            self.take(conn)

        return run

    def take(self, conn) -> int:
        """Record the state now; returns the LSN it is read at: the WAL insert position less one. Every
        commit made so far started before the position; the next may start exactly there — a ``COMMIT
        PREPARED`` writes nothing before its commit record. A slot made after this state has its
        consistent point at or above the position, and its initial snapshot's rows are valid from that
        point only: :func:`states_since` reads the states taken before a slot at its consistent point."""
        with conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_insert_lsn()::text")
            position = parse_lsn(cur.fetchone()[0])
        self.states.append((position - 1, snapshot_postgres(conn, self.schemas)))
        return position - 1


def states_since(states: list[tuple[int, list[SourceTable]]], point: int) -> list[tuple[int, list[SourceTable]]]:
    """The states a slot whose consistent point is ``point`` can show: the last one taken at or before it,
    read at the point (an initial snapshot's rows are valid from there, and nothing committed in between),
    and every later one. States taken before a slot existed are not in its stream: only its snapshot is."""
    before = [s for s in states if s[0] <= point]
    return ([(point, before[-1][1])] if before else []) + [s for s in states if s[0] > point]


def consistent_point(spark, config, source: str) -> int:
    """Where ``source``'s slot starts, for a slot made with an initial snapshot: its first applied commit
    LSN (the snapshot's units carry the slot's consistent point); 0 when nothing was applied."""
    from pyspark.sql import functions as F

    from cdc_apply.lake.books.bookkeeping import Bookkeeping

    log = Bookkeeping(config).ref("transactions").read(spark)
    first = log.where(F.col("source") == source).agg(F.min("commit_lsn")).first()[0]
    return int(first or 0)


def _history_state(table: pa.Table, lsn: int, prefix: str) -> pa.Table:
    """A history table's rows (Arrow) valid at ``lsn``, one per copy."""
    import numpy as np
    import pyarrow.compute as pc

    start, end = table.column(prefix + "valid_from_lsn"), table.column(prefix + "valid_to_lsn")
    mask = pc.and_(pc.less_equal(start, lsn), pc.or_kleene(pc.is_null(end), pc.greater(end, lsn)))
    valid = table.filter(mask)
    copies = valid.column(prefix + "copies").to_numpy(zero_copy_only=False)
    return valid.take(pa.array(np.repeat(np.arange(valid.num_rows), copies.astype("int64"))))


def check_history(spark, config, source: str, states: list[tuple[int, list[SourceTable]]]) -> list[str]:
    """Every state in ``states`` (from a :class:`SourceRecord`) of every source table against its
    history table; the differences found."""
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.delta.refs import history_ref_for
    from cdc_apply.lake.books.bookkeeping import Bookkeeping

    engine = spark_tables(spark)
    history = Bookkeeping(config).load_history(engine).get(source)
    prefix = config.silver.metadata_prefix
    failures: list[str] = []
    tables: dict[int, pa.Table | None] = {}
    compared: dict[int, tuple] = {}   # the last state compared per table: identical ones are skipped
    for lsn, snapshot in states:
        for table in snapshot:
            if history is None or (relation := history.relations.get(table.oid)) is None:
                if table.rows:
                    failures.append(f"{source}: {table.qualified_name} as of {lsn:X}: rows, but no relation applied")
                continue
            if compared.get(table.oid) == (table.columns, table.rows):
                continue
            compared[table.oid] = (table.columns, table.rows)
            if table.oid not in tables:
                ref = history_ref_for(config, source, relation.versions)
                tables[table.oid] = ref.read(spark).toArrow() if engine.exists(ref) else None
            kept = tables[table.oid]
            if kept is None:
                if table.rows:
                    failures.append(f"{source}: {table.qualified_name}: no history table")
                continue
            state = _history_state(kept, lsn, prefix)
            want, names = apply_column_rules(typed_source_table(table, history.types),
                                             [c[0] for c in table.columns], relation, config)
            common = [i for i, n in enumerate(names) if n in kept.column_names]
            want = pa.Table.from_arrays([want.column(i) for i in common], names=[f"c{k}" for k in range(len(common))])
            got = pa.Table.from_arrays([state.column(names[i]).combine_chunks() for i in common],
                                       names=[f"c{k}" for k in range(len(common))])
            check = compare_tables(table.qualified_name, want, got)
            if not check.equal:
                failures.append(f"{source}: history as of {lsn:X}: {check.line()}")
    return failures


def check_as_of(spark, config, source: str, lsn: int, snapshot: list[SourceTable],
                method: AsOfMethod = "auto") -> list[str]:
    """``read_as_of`` at ``lsn`` against the source's tables as recorded then; the differences found."""
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.books.bookkeeping import Bookkeeping
    from cdc_apply.lake.history.as_of import read_as_of

    history = Bookkeeping(config).load_history(spark_tables(spark)).get(source)
    if history is None:
        raise StateError("no schema history recorded for the source", source=source)
    names = {t.oid: history.relations[t.oid].latest.qualified_name for t in snapshot if t.oid in history.relations}
    result = read_as_of(spark, config, lsn, tables=sorted(set(names.values())), source=source, method=method)
    failures = []
    for table in snapshot:
        name = names.get(table.oid)
        if name is None:
            continue
        frame = result[name]
        want, columns = apply_column_rules(typed_source_table(table, history.types), [c[0] for c in table.columns],
                                           history.relations[table.oid], config)
        common = [i for i, n in enumerate(columns) if n in frame.columns]
        want = pa.Table.from_arrays([want.column(i) for i in common], names=[f"c{k}" for k in range(len(common))])
        check = compare_tables(table.qualified_name, want, silver_table(frame, [columns[i] for i in common]))
        if not check.equal:
            failures.append(f"{source}: read_as_of({lsn:X}, {method}) -> {result.method} at {result.lsn_text}: "
                            f"{check.line()}")
    return failures
