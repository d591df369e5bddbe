"""The decode stage of a batch: its change rows through the decode (``mapInArrow``, or on the driver for
a local batch) and the counts the tables and logs are planned from (docs/ARCHITECTURE.md, step 4)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from cdc_apply.decode.changes import decode_batches
from cdc_apply.delta.spark_errors import unwrap_error
from cdc_apply.lake.books.batch_logs import counts_per_transaction
from cdc_apply.lake.control_scan import HELD_SCHEMA, ControlScan
from cdc_apply.lake.local_batch import TRUNCATE_FIELDS, count_decoded, decode_local, decoded_frame
from cdc_apply.lake.silver.snapshot_loads import without_loads
from cdc_apply.lake.sources.payload_columns import is_control
from cdc_apply.planning.decode_plan import output_ddl, output_schema
from cdc_apply.planning.plan import BatchPlan
from cdc_apply.planning.snapshot_loads import SnapshotLoad
from cdc_apply.planning.table_plan import SlotCount

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables

# Values (messages x decoded columns) per decode partition: few tasks, as each pays a fixed hand-off to a
# Python worker, yet cached blocks small enough that one evicted to disk can be read back whole
# (docs/BENCHMARKS.md, "The settings the job ships").
DECODE_VALUES_PER_PARTITION = 8_000_000


def decode_changes(tables: SparkTables, read_messages, fresh, plan: BatchPlan, messages: int = 0,
                   loads: tuple[SnapshotLoad, ...] = (), scanned: ControlScan | None = None, local=None):
    """The batch's decoded change rows (None: it has none) and, when decoded on the driver (``local``: the
    batch's rows there, Arrow), their counts (None: :func:`count_changes` counts them); rows decoded in
    Spark are a persisted DataFrame. ``fresh``: the batch's rows as a DataFrame; ``read_messages(spark)``:
    bronze's messages, which a transaction carried from earlier batches is read from again."""
    from pyspark.sql import functions as F

    if not plan.has_changes and not any(
            b.state.applied_seq > b.previous.applied_seq for b in plan.sources.values()):
        return None, None
    if local is not None:
        if not loads and not any(b.reread for b in plan.sources.values()):
            rows = decode_local(local, plan.decode)
            return decoded_frame(tables.spark, rows, plan.decode), count_decoded(rows, counts_per_transaction(plan))
        fresh = tables.spark.createDataFrame(local, HELD_SCHEMA)
    changes = fresh.where(~is_control()).select("source", "seq", "lsn", "payload")
    # Counted on the batch's own rows: planning the union with older rows would cost a Delta
    # file-skipping job here and another in the decode; those rows only add partitions.
    partitions = tables.partition_count(changes)   # None over Spark Connect: repartitioned only when large
    reread = None
    for source, batch in plan.sources.items():
        for a, b in batch.reread:
            cond = (F.col("source") == source) & F.col("seq").between(a, b)
            reread = cond if reread is None else reread | cond
    skip = scanned.skip_ranges(loads) if scanned is not None else {}
    changes = without_loads(changes, loads, skip)
    held = scanned.held_rows(skip) if scanned is not None and skip else []
    if held:   # the rows of the loads' ranges the general decode keeps, from the driver
        changes = changes.unionByName(tables.spark.createDataFrame(held, HELD_SCHEMA))
    if reread is not None:
        old = (read_messages(tables.spark).where(reread & ~is_control())
               .select("source", "seq", "lsn", "payload"))
        changes = changes.unionByName(without_loads(old, loads))
    # As few partitions as keep each cached block small (DECODE_VALUES_PER_PARTITION).
    messages -= sum(b - a + 1 for load in loads for a, b in load.ranges)   # loaded on their own
    per_partition = max(1, DECODE_VALUES_PER_PARTITION // len(output_schema(plan.decode)))
    slots = tables.default_parallelism()
    # Whole waves of tasks: 5 tasks on 2 slots run in 3 waves, the last on one core.
    wanted = slots * -(-max(slots, -(-messages // per_partition)) // slots)
    if (partitions < wanted) if partitions is not None else wanted > slots:
        # Hashed on seq, not round robin: Spark sorts every row before a round-robin split so that a
        # retried task gets the same rows (spark.sql.execution.sortBeforeRepartition), ~0.5 s a 1M
        # batch here; a hash of the seq is as even and as repeatable. No row's decode needs another's.
        changes = changes.repartition(wanted, "seq")
    decoded = changes.mapInArrow(partial(decode_batches, plan=plan.decode), output_ddl(plan.decode))
    # Cached in slot order: each table's projection reads the cache with `slot IN (...)`, which the cache's
    # per-batch statistics answer, so it reads its own rows' batches only, not every table's rows (ten
    # tables: ten scans of the whole batch before). Nothing reads the decoded rows by their order.
    return decoded.sortWithinPartitions("slot").persist(), None

def count_changes(plan: BatchPlan, decoded) -> list[SlotCount]:
    """The decode's counts: one job decodes everything (filling the cache) and returns what the driver
    needs — per source (and transaction: ``counts_per_transaction``), slot and kind."""
    from pyspark.sql import functions as F

    truncate = F.when((F.col("op") == "T") & F.col("error").isNull(), F.struct(*TRUNCATE_FIELDS))
    # Per transaction too when the batch has few: the transactions log is then built on the driver
    # from these counts rather than summed in Spark beside the tables (batch_logs).
    per_txn = counts_per_transaction(plan)
    try:
        return [SlotCount(*r) if per_txn else SlotCount(r.source, None, *r[1:]) for r in (
            decoded.groupBy("source", *(["txn"] if per_txn else []), "slot", "op")
            .agg(F.count(F.lit(1)).alias("n"), F.count("toast").alias("toasted"),
                 F.count(F.when((F.col("op") == "U") & F.col("old_kind").isNotNull(), F.col("toast")))
                 .alias("moved_toasted"),
                 F.count("error").alias("errors"), F.max("commit_lsn").alias("last_commit_lsn"),
                 F.collect_list(truncate).alias("truncates")).collect())]
    except Exception as exc:  # surface the decoder's own error, not a JVM stack trace
        raise unwrap_error(exc) from None
