"""The logs one batch appends under the state location, before its progress rows.

Schema history and type cache (the relation versions and types the batch met), the transactions log
(one row per applied transaction with its per-table counts and truncate flags), the logical decoding
messages and the quarantine. Each append is guarded by the batch's apply version
(:meth:`Bookkeeping.append`), so a re-run batch writes none of them twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

import pyarrow as pa

from cdc_apply.config import Config
from cdc_apply.lake.books.bookkeeping import SCHEMAS, Bookkeeping, arrow_rows, arrow_table, local_frame, relation_row
from cdc_apply.lake.books.transaction_rows import count_groups, entry_lists
from cdc_apply.pgoutput import messages as m
from cdc_apply.planning.plan import BatchPlan

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables


DML_OPS = frozenset(chr(t) for t in m.DML_TYPES)  # the decode's ``op`` column holds the type as a letter
# The committed transactions of a batch and their per-table counts, on their way into the transactions log.
TXN_META = [("source", "STRING"), ("txn", "INT"), ("xid", "BIGINT"), ("kind", "STRING"), ("gid", "STRING"),
            ("commit_lsn", "BIGINT"), ("end_lsn", "BIGINT"), ("commit_ts", "TIMESTAMP"), ("origin", "STRING"),
            ("origin_lsn", "BIGINT"), ("begin_seq", "BIGINT"), ("decide_seq", "BIGINT")]
TXN_TABLES = [("source", "STRING"), ("txn", "INT"), ("table", "STRING"), ("inserts", "BIGINT"), ("updates", "BIGINT"),
              ("deletes", "BIGINT"), ("truncated", "BOOLEAN"), ("cascade", "BOOLEAN"), ("restart_identity", "BOOLEAN")]


# Up to this many committed transactions in a batch, the decode counts changes per transaction as well
# and the transactions log is built on the driver: one small append. Summed in Spark instead, it is
# four jobs and two shuffles over the cached decode, beside the tables: an insert-only batch's table
# took 0.61 s instead of 0.34 s with them running on the other core. The counts stay small: at most
# this many transactions times the (relation version, kind) pairs each touched.
PER_TXN_COUNTS_MAX = 2_000


def counts_per_transaction(plan: BatchPlan) -> bool:
    """Whether the decode's counts of this batch are per transaction (their ``txn`` set)."""
    return sum(len(b.committed) for b in plan.sources.values()) <= PER_TXN_COUNTS_MAX


# Above PER_TXN_COUNTS_MAX transactions, the counts per (transaction, relation version) are summed in
# Spark and collected through Arrow while there can be at most this many (~40 bytes each on the driver;
# bounded by the batch's change rows): a 1M-change batch of 100,000 transactions has ~650,000. Past it,
# each transaction's entries are collected into lists in Spark as well.
COLLECTED_GROUPS_MAX = 4_000_000


# Up to this many change and message rows (~17 bytes each on the driver), their source, transaction,
# relation version and kind are collected through Arrow and counted there (transaction_rows.count_groups):
# the 1M-change batch's in 0.3-0.6 s against 1.5-2.7 s for Spark's aggregation to ~650,000 groups.
COLLECTED_ROWS_MAX = 4_000_000


def counted_rows(counts) -> int:
    """The decoded change and message rows the decode's counts hold."""
    return sum(r.n for r in counts if r.op in DML_OPS or r.op == "M")


def groups_bound(plan: BatchPlan, counts) -> int:
    """At most how many (transaction, relation version) groups the batch's change rows make."""
    rows = counted_rows(counts)
    transactions = sum(len(b.committed) for b in plan.sources.values())
    versions = len({r.slot for r in counts if r.slot is not None}) + 1   # + the messages' NULL
    return min(rows, transactions * versions)


def now() -> datetime:
    return datetime.now(timezone.utc)


def transaction_fields(txn) -> tuple:
    """A committed transaction's fields in the log, xid to decide seq (``TXN_META`` after source, txn)."""
    return (txn.xid, txn.kind, txn.gid, txn.commit_lsn, txn.end_lsn,
            m.pg_timestamp_to_datetime(txn.commit_ts) if txn.commit_ts is not None else None,
            txn.origin, txn.origin_lsn, txn.begin_seq, txn.decide_seq)


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

    def row(self, table: str) -> tuple:
        return (table, self.inserts, self.updates, self.deletes, self.truncated, self.cascade,
                self.restart_identity)


class BatchLogs:
    """Writes one pipeline's per-batch logs (``type_name(source)`` names a source's column types)."""

    def __init__(self, tables: SparkTables, config: Config, books: Bookkeeping, names_of: Callable,
                 type_name: Callable[[str], Callable]) -> None:
        self.tables = tables
        self.spark = tables.spark
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
        self.books.append(self.tables, "schema_history", rel_rows, version)
        self.books.append(self.tables, "type_cache", type_rows, version)

    def write_logs(self, plan: BatchPlan, decoded, counts, truncates, version: int, loaded=()) -> None:
        """The transactions log, the messages and the quarantine of a batch that decoded changes.

        ``counts``: the decode's counts per (source, slot, op), and per transaction when
        :func:`counts_per_transaction`; ``loaded``: the snapshot loads' rows as count rows of their
        transactions (:class:`~cdc_apply.planning.table_plan.SlotCount`). With counts per transaction the
        log is built on the driver. Otherwise a transaction's counts per table are summed in Spark from
        the decoded rows and joined with the committed transactions there: a batch of 100,000
        transactions has as many log rows and close to a million (transaction, table, kind) counts,
        which a collect to the driver took seconds to carry."""
        from pyspark.sql import functions as F

        has_messages = any(r.op == "M" and not r.errors for r in counts)
        if has_messages:
            msgs = decoded.where("op = 'M' AND error IS NULL").select(
                "source", "seq", "lsn", "xid", F.col("msg_transactional").alias("transactional"),
                F.col("msg_prefix").alias("prefix"), F.col("msg_content").alias("content"), "commit_lsn",
                "commit_ts", F.lit(version).cast("long").alias("apply_version"))
            self.books.append_df(self.tables, msgs, "messages", version)
        transactions = self._transactions(plan, decoded, counts, truncates, version, loaded, has_messages)
        if isinstance(transactions, pa.Table):   # built on the driver
            self.books.append_table(self.tables, "transactions", transactions, version)
        elif transactions is not None:
            self.books.append_df(self.tables, transactions, "transactions", version)
        self.write_quarantine(plan, decoded if any(r.errors for r in counts) else None, version)

    def _transactions(self, plan: BatchPlan, decoded, counts, truncates, version: int, loaded, has_messages: bool):
        """One row per committed transaction of the batch, with its per-table counts: an Arrow table where
        they are assembled on the driver, a DataFrame where summed in Spark (None: no row).

        One aggregation over the decoded rows gives both the per-table counts and the transactional
        messages per transaction (``messages``): an empty transaction is one with neither."""
        from pyspark.sql import functions as F

        slot_names = {k: s.qualified_name for k, s in enumerate(plan.decode.slots)}
        if counts_per_transaction(plan):
            return self._transactions_from_counts(plan, counts, truncates, version, loaded, slot_names)
        dml_slots = sorted({r.slot for r in counts if r.slot is not None and r.op in DML_OPS})
        names = F.create_map(*[F.lit(x) for k in dml_slots for x in (k, slot_names[k])]) if dml_slots else None
        per_op = {op: F.sum(F.when(F.col("op") == op, 1).otherwise(0)).cast("long") for op in ("I", "U", "D", "M")}
        groups = rows = None   # per (source, transaction, relation version or NULL for messages); per row
        if names is not None or has_messages:
            dml = F.col("op").isin(*DML_OPS) & F.col("slot").isNotNull()
            rows = (decoded.where(F.col("error").isNull() & (F.col("txn") >= 0) & (dml | (F.col("op") == "M")))
                    .select("source", "txn", F.when(dml, F.col("slot")).alias("slot"), "op"))
            groups = (rows.groupBy("source", "txn", "slot")
                      .agg(per_op["I"].alias("inserts"), per_op["U"].alias("updates"), per_op["D"].alias("deletes"),
                           per_op["M"].alias("messages")))
        small = [(s, t, *c.row(n)) for (s, t, n), c in sorted(
            self._loaded_and_truncated(loaded, truncates, slot_names).items())]
        if rows is not None and counted_rows(counts) <= COLLECTED_ROWS_MAX:
            return self._transactions_collected(plan, count_groups(rows.toArrow()), small, version)
        if groups_bound(plan, counts) <= COLLECTED_GROUPS_MAX:
            collected = None if groups is None else groups.select(
                "source", "txn", "slot", "inserts", "updates", "deletes").toArrow()
            return self._transactions_collected(plan, collected, small, version)
        parts = []
        if groups is not None:
            parts.append(groups.select("source", "txn", (names[F.col("slot")] if names is not None
                                                         else F.lit(None).cast("string")).alias("table"),
                                       "inserts", "updates", "deletes",
                                       *[F.lit(False).alias(c) for c in ("truncated", "cascade", "restart_identity")],
                                       "messages"))
        if small:
            parts.append(local_frame(self.spark, TXN_TABLES, small).withColumn("messages", F.lit(0).cast("long")))
        at = now()
        txns = [(source, index, *transaction_fields(txn))
                for source, batch in plan.sources.items() for index, txn in enumerate(batch.committed)]
        log = local_frame(self.spark, TXN_META, txns)
        if parts:
            tables = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
            table = F.struct("table", "inserts", "updates", "deletes", "truncated", "cascade", "restart_identity")
            tables = (tables.groupBy("source", "txn")
                      .agg(F.sort_array(F.collect_list(F.when(F.col("table").isNotNull(), table))).alias("tables"),
                           F.sum(F.col("inserts") + F.col("updates") + F.col("deletes")).cast("long").alias("changes"),
                           F.sum("messages").alias("messages")))
            keep = "inner" if self.config.apply.skip_empty_transactions else "left"
            log = log.join(tables, ["source", "txn"], keep)
        elif self.config.apply.skip_empty_transactions:
            return None
        else:
            log = log.select("*", F.lit(None).alias("tables"), F.lit(None).cast("long").alias("changes"))
        empty = F.array().cast("array<struct<table: string, inserts: bigint, updates: bigint, deletes: bigint, "
                               "truncated: boolean, cascade: boolean, restart_identity: boolean>>")
        return log.select("source", "xid", "kind", "gid", "commit_lsn", "end_lsn", "commit_ts", "origin", "origin_lsn",
                          "begin_seq", F.col("decide_seq").alias("commit_seq"),
                          F.coalesce("changes", F.lit(0).cast("long")).alias("changes"),
                          F.coalesce("tables", empty).alias("tables"),
                          F.lit(version).cast("long").alias("apply_version"),
                          F.lit(at).cast("timestamp").alias("applied_at"))

    def _transactions_collected(self, plan: BatchPlan, collected, small: list[tuple], version: int):
        """:meth:`_transactions` from the counts per (transaction, relation version) on the driver (an Arrow
        table, or None), each transaction's ``tables`` assembled there (``transaction_rows``; ``small``: the
        snapshot loads' and truncates' entries as ``TXN_TABLES`` rows); ``None`` when every transaction is
        empty and empty ones are skipped."""
        import numpy as np

        committed = {source: len(batch.committed) for source, batch in plan.sources.items()}
        tables, changes, present = entry_lists(collected, small, [s.qualified_name for s in plan.decode.slots],
                                               committed)
        kept = np.flatnonzero(present) if self.config.apply.skip_empty_transactions else np.arange(len(present))
        if not len(kept):
            return None
        txns = [(source, txn) for source, batch in plan.sources.items() for txn in batch.committed]
        fields = list(zip(*((txns[k][0], *transaction_fields(txns[k][1])) for k in kept)))
        at = now()
        return arrow_table(self.spark, SCHEMAS["transactions"], [
            *fields, pa.array(changes[kept]), tables.take(kept), [version] * len(kept), [at] * len(kept)])

    def _loaded_and_truncated(self, loaded, truncates,
                              slot_names: dict[int, str]) -> dict[tuple[str, int, str], TableCounts]:
        """(source, txn, table) -> the counts of a snapshot load's rows and the flags of truncates."""
        small: dict[tuple[str, int, str], TableCounts] = {}
        for r in loaded:
            small.setdefault((r.source, r.txn, slot_names[r.slot]), TableCounts()).count(r.op, r.n)
        for t in truncates:
            for name in self.names_of(t.source, t.trunc_relids):
                small.setdefault((t.source, t.txn, name), TableCounts()).truncate(t.trunc_options)
        return small

    def _transactions_from_counts(self, plan: BatchPlan, counts, truncates, version: int, loaded,
                                  slot_names: dict[int, str]):
        """:meth:`_transactions` built on the driver from counts per transaction (an Arrow table; a local
        DataFrame where Arrow will not take a value as it is).

        The same rows: per transaction, one ``tables`` entry per relation version its changes used and
        one per table it truncated or a snapshot load filled; a transaction with none of these and no
        logical decoding message is empty."""
        entries: dict[tuple[str, int], dict[int, TableCounts]] = {}
        messages: set[tuple[str, int]] = set()
        for r in counts:
            valid = r.n - r.errors   # the Spark path's rows: quarantined changes are not counted
            if r.txn is None or r.txn < 0 or valid <= 0:
                continue
            if r.op in DML_OPS and r.slot is not None:
                entries.setdefault((r.source, r.txn), {}).setdefault(r.slot, TableCounts()).count(r.op, valid)
            elif r.op == "M":
                messages.add((r.source, r.txn))
        rows: dict[tuple[str, int], list[tuple]] = {
            key: [c.row(slot_names[slot]) for slot, c in per_slot.items()] for key, per_slot in entries.items()}
        for (source, txn_index, name), c in self._loaded_and_truncated(loaded, truncates, slot_names).items():
            rows.setdefault((source, txn_index), []).append(c.row(name))
        at, log = now(), []
        skip_empty = self.config.apply.skip_empty_transactions
        for source, batch in plan.sources.items():
            for index, txn in enumerate(batch.committed):
                tables = sorted(rows.get((source, index), ()))
                if skip_empty and not tables and (source, index) not in messages:
                    continue
                log.append((source, *transaction_fields(txn), sum(t[1] + t[2] + t[3] for t in tables), tables,
                            version, at))
        if not log:
            return None
        table = arrow_rows(self.spark, SCHEMAS["transactions"], log)
        return local_frame(self.spark, SCHEMAS["transactions"], log, None) if table is None else table

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
            self.books.append_df(self.tables, rows.select("*", F.lit(version).cast("long").alias("apply_version"),
                                             F.current_timestamp().alias("quarantined_at")), "quarantine", version)
        return len(bad_controls)
