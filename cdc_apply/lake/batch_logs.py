"""The logs one batch appends under the state location, before its progress rows.

Schema history and type cache (the relation versions and types the batch met), the transactions log
(one row per applied transaction with its per-table counts and truncate flags), the logical decoding
messages and the quarantine. Each append is guarded by the batch's apply version
(:meth:`Bookkeeping.append`), so a re-run batch writes none of them twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from cdc_apply.planning.plan import BatchPlan
from cdc_apply.config import Config
from cdc_apply.lake.bookkeeping import Bookkeeping, relation_row
from cdc_apply.pgoutput import messages as m


DML_OPS = frozenset(chr(t) for t in m.DML_TYPES)  # the decode's ``op`` column holds the type as a letter


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class TableCounts:
    """One table's part of one transaction, as a struct of the transactions log's ``tables`` column."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    truncated: bool = False
    cascade: bool = False
    restart_identity: bool = False

    def count(self, op: str, n: int) -> None:
        if op == "I":
            self.inserts += n
        elif op == "U":
            self.updates += n
        elif op == "D":
            self.deletes += n
        else:
            raise ValueError(f"not a row change: {op!r}")

    def truncate(self, options: int) -> None:
        self.truncated = True
        self.cascade = self.cascade or bool(options & m.TRUNCATE_CASCADE)
        self.restart_identity = self.restart_identity or bool(options & m.TRUNCATE_RESTART_IDENTITY)

    @property
    def changes(self) -> int:
        return self.inserts + self.updates + self.deletes

    def row(self, table: str) -> tuple:
        return (table, self.inserts, self.updates, self.deletes, self.truncated, self.cascade,
                self.restart_identity)


class BatchLogs:
    """Writes one pipeline's per-batch logs (``type_name(source)`` names a source's column types)."""

    def __init__(self, spark, config: Config, books: Bookkeeping, names_of: Callable,
                 type_name: Callable[[str], Callable]) -> None:
        self.spark = spark
        self.config = config
        self.books = books
        self.names_of = names_of      # (source, relation ids) -> silver table names
        self.type_name = type_name

    def write_schema(self, plan: BatchPlan, version: int) -> None:
        at = now()
        rel_rows, type_rows = [], []
        for source, batch in plan.sources.items():
            type_name = self.type_name(source)
            rel_rows += [relation_row(source, v, type_name, version, at) for v in batch.new_versions]
            type_rows += [(source, t.type_oid, t.namespace, t.name, seq, lsn, version, at)
                          for seq, lsn, t in batch.new_types]
        self.books.append(self.spark, "schema_history", rel_rows, version)
        self.books.append(self.spark, "type_cache", type_rows, version)

    def write_logs(self, plan: BatchPlan, decoded, counts, truncates, version: int) -> None:
        """The transactions log, the messages and the quarantine of a batch that decoded changes."""
        from pyspark.sql import functions as F

        slot_names = {k: s.qualified_name for k, s in enumerate(plan.decode.slots)}
        per_txn: dict[tuple[str, int], dict[str, TableCounts]] = {}
        messages_per_txn: dict[tuple[str, int], int] = {}
        for r in counts:
            if r.txn is None or r.txn < 0:
                continue
            if r.op == "M":
                messages_per_txn[(r.source, r.txn)] = messages_per_txn.get((r.source, r.txn), 0) + r.n
            elif r.slot is not None and not r.errors and r.op in DML_OPS:
                per_txn.setdefault((r.source, r.txn), {}).setdefault(slot_names[r.slot], TableCounts()).count(r.op, r.n)
        for t in truncates:
            for name in self.names_of(t.source, t.trunc_relids):
                per_txn.setdefault((t.source, t.txn), {}).setdefault(name, TableCounts()).truncate(t.trunc_options)
        at = now()
        rows = []
        for source, batch in plan.sources.items():
            for index, txn in enumerate(batch.committed):
                tables = per_txn.get((source, index), {})
                if (self.config.apply.skip_empty_transactions and not tables
                        and not messages_per_txn.get((source, index))):
                    continue
                commit_ts = m.pg_timestamp_to_datetime(txn.commit_ts) if txn.commit_ts is not None else None
                rows.append((source, txn.xid, txn.kind, txn.gid, txn.commit_lsn, txn.end_lsn, commit_ts, txn.origin,
                             txn.origin_lsn, txn.begin_seq, txn.decide_seq, sum(c.changes for c in tables.values()),
                             [c.row(name) for name, c in sorted(tables.items())], version, at))
        self.books.append(self.spark, "transactions", rows, version)
        if any(r.op == "M" and not r.errors for r in counts):
            msgs = decoded.where("op = 'M' AND error IS NULL").select(
                "source", "seq", "lsn", "xid", F.col("msg_transactional").alias("transactional"),
                F.col("msg_prefix").alias("prefix"), F.col("msg_content").alias("content"), "commit_lsn",
                "commit_ts", F.lit(version).cast("long").alias("apply_version"))
            self.books.append_df(msgs, "messages", version)
        self.write_quarantine(plan, decoded if any(r.errors for r in counts) else None, version)

    def write_quarantine(self, plan: BatchPlan, decoded, version: int) -> int:
        """One guarded append with the decode's error rows and the bad control messages; returns how
        many control messages there were."""
        from pyspark.sql import functions as F

        bad_controls = [(source, b.seq, b.lsn, b.payload, b.error)
                        for source, batch in plan.sources.items() for b in batch.assembly.bad_controls]
        parts = []
        if decoded is not None:
            parts.append(decoded.where("error IS NOT NULL").select("source", "seq", "lsn", "payload", "error"))
        if bad_controls:
            parts.append(self.spark.createDataFrame(
                bad_controls, "source STRING, seq BIGINT, lsn BIGINT, payload BINARY, error STRING"))
        if parts:
            rows = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
            self.books.append_df(rows.select("*", F.lit(version).cast("long").alias("apply_version"),
                                             F.current_timestamp().alias("quarantined_at")), "quarantine", version)
        return len(bad_controls)
