"""Collapse one silver table's changes to one row per key and MERGE them.

Changes arrive as decoded rows of one or more relation versions (slots). They are projected onto
the silver columns (``n_i`` value, ``x_i`` "the change carries column i"; masked columns masked),
turned into per-key events — an update that changes the key is a delete of the old key and a
*move-in* to the new one — and reduced per key in commit order:

* the last event decides: delete, or upsert;
* a column the last event does not carry (unchanged TOAST, or a column its
  relation version did not have) takes the last value an earlier event of the
  same key carried in this batch; if none did, the MERGE keeps the value the
  silver row already has — never a placeholder;
* a move-in's unchanged TOAST columns come from the old key's row just before
  the move (earlier in the batch, else silver), resolved before the reduction
  (:mod:`cdc_apply.lake.silver.merge_moves`).

Tables without a key (REPLICA IDENTITY FULL, or no identity) are matched on all values, with exact
duplicate counts: see :func:`merge_keyless`. A table Delta's MERGE cannot write (a column name holding
a backtick while its Change Data Feed is on) gets the same rows through :mod:`cdc_apply.lake.silver.replace_rows`.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Sequence

from cdc_apply.delta.names import quote_ident
from cdc_apply.errors import ApplyError
from cdc_apply.lake.silver.merge_result import MergeResult
from cdc_apply.lake.silver.merge_sql import key_bounds_sql, keyed_assignments_sql
from cdc_apply.lake.silver.replace_rows import Step, needs_replace, replace_keyed, replace_keyless, silver_before
from cdc_apply.lake.silver.soft_deletes import is_deleted_sql, keyed_soft_delete, keyless_soft_delete
from cdc_apply.planning import columns as cc
from cdc_apply.planning.masks import mask_sql
from cdc_apply.planning.table_plan import TableWork

if TYPE_CHECKING:
    from pyspark.sql import Column

    from cdc_apply.delta.engine import SparkTables

# The collapse's output is materialised (localCheckpoint) as row blocks, one per partition; a block
# evicted to disk is read back whole, so a wide table's batch needs more partitions than the default.
CELLS_PER_PARTITION = 2_000_000

# Spark settings for the sessions that build and run the MERGEs: the job's session while a batch runs
# (restored after; the sources are built from the decoded rows, which belong to it) and each table's.
# Constraint propagation off: a wide table's source has a few expressions per column, and Catalyst's
# constraint propagation grows much faster than that. Whole-stage code generation up to 400 nested
# fields (Spark's default stops at 100): Delta's queries over its log (its actions have 138) otherwise
# run without it, and every task of them generates its projections' Java source again. Rows wider than
# 400 fields (a ~100-column table's MERGE source) stay on Spark's default path. The batch's cached rows (the
# decode, a small batch's bronze rows) uncompressed: choosing and applying an encoding per cached column
# cost a 1M-change decode ~1.5-2 s for ~11 % less memory (the pooled value columns hardly compress).
# Their evidence: docs/BENCHMARKS.md, "The settings the job ships".
BATCH_SETTINGS = {"spark.sql.constraintPropagation.enabled": "false", "spark.sql.codegen.maxFields": "400",
                  "spark.sql.inMemoryColumnarStorage.compressed": "false"}

# Off: a MERGE rewrites the files it touches instead of marking rows in deletion vectors (see writes_deletion_vectors).
PERSISTENT_DVS = "spark.databricks.delta.merge.deletionVectors.persistent"
# Below this many changes of a table in a batch a MERGE always uses deletion vectors: counting the
# table's rows costs more than the choice can save.
REWRITE_MIN_CHANGES = 10_000
# A batch's new keys are appended in a commit of their own only from this many Inserts of the table on:
# that commit costs Spark jobs and a Delta commit, more than a few thousand rows cost in the MERGE's join
# (docs/BENCHMARKS.md). An insert-only batch of new keys is one append whatever its size.
NEW_KEYS_APPEND_MIN = 10_000


def project(decoded, work: TableWork):
    """The table's change rows: silver-column values ``n_i``/``o_i``, ``x_i`` the change carries column i,
    ``p_i`` column i exists in the change's relation version (``p_i and not x_i``: unchanged TOAST).

    Built as SQL text, one expression per output column: through the Column API the same projection
    takes ~100 Py4J calls per column, every table, every batch."""
    from pyspark.sql import functions as F

    where = _slot_in_sql(s.slot for s in work.slots)
    if work.truncate_after is not None:
        lsn, seq = work.truncate_after
        where = f"{where} AND (`commit_lsn` > {int(lsn)} OR (`commit_lsn` = {int(lsn)} AND `seq` > {int(seq)}))"
    rows = decoded.where(where)
    exprs = [F.expr(f"`{source}` AS {quote_ident(name)}") for source, name in (
        ("seq", cc.SEQ), ("commit_lsn", cc.COMMIT_LSN), ("commit_ts", cc.COMMIT_TS), ("xid", cc.XID),
        ("origin", cc.ORIGIN), ("user", cc.USER), ("op", cc.OP), ("old_kind", cc.OLD_KIND))]
    not_delete = "`op` <> 'D'"
    all_slots, masks = {s.slot for s in work.slots}, dict(work.masks)
    # silver column -> its position in each slot's relation version
    positions_of = [{i: j for j, i in enumerate(sm.mapping) if i is not None} for sm in work.slots]
    for i, column in enumerate(work.columns):
        # Slots reading column i from the same pooled column and type form one branch: a column keeps
        # its pooled column across relation versions, so a table with many versions in one batch
        # (renames, columns added and dropped) costs no CASE branch per version and column. Its
        # position, which the unchanged-TOAST list names, is looked up by slot in a constant array.
        groups: dict[tuple[int, str], dict[int, int]] = {}   # (pooled, ddl) -> slot -> position
        for sm, positions in zip(work.slots, positions_of):
            j = positions.get(i)
            if j is not None:
                groups.setdefault((sm.pooled[j], sm.ddls[j]), {})[sm.slot] = j
        new_v = old_v = f"CAST(NULL AS {column.spark_ddl})"
        carried = "false"
        for (pooled, ddl), positions in reversed(list(groups.items())):
            nv, ov = f"`new_{pooled}`", f"`old_{pooled}`"
            if ddl != column.spark_ddl:
                nv, ov = f"CAST({nv} AS {column.spark_ddl})", f"CAST({ov} AS {column.spark_ddl})"
            cv = f"({not_delete} AND NOT coalesce(array_contains(`toast`, {_position_sql(positions)}), false))"
            if set(positions) == all_slots:
                new_v, old_v, carried = nv, ov, cv
            else:
                hit = _slot_in_sql(positions)
                new_v, old_v, carried = (_case(hit, nv, new_v), _case(hit, ov, old_v), _case(hit, cv, carried))
        if i in masks:   # masked where values enter: silver, history, keys and matches see only masks
            new_v, old_v = (mask_sql(masks[i], work.salt, v) for v in (new_v, old_v))
        holders = {k for positions in groups.values() for k in positions}
        older = {sm.slot for sm in work.slots for c, added, _ in work.defaults
                 if c == i and sm.version_seq < added and sm.slot not in holders}
        new_c = F.expr(f"{new_v} AS {quote_ident(cc.value(i))}")
        if older:  # rows of versions before the column existed read its missing value
            value = next(v for c, _, v in work.defaults if c == i)
            hit = _slot_in_sql(older)
            # A Column, not text: the value is a typed Python value, which F.lit renders exactly.
            new_c = (F.when(F.expr(hit), F.lit(value).cast(column.spark_ddl)).otherwise(F.expr(new_v))
                     .alias(cc.value(i)))
            carried = _case(hit, not_delete, carried)
            holders |= older
        present = (not_delete if holders == all_slots else
                   f"({_slot_in_sql(holders)} AND {not_delete})" if holders else "false")
        exprs += [new_c, F.expr(f"{old_v} AS {quote_ident(cc.old(i))}"),
                  F.expr(f"{carried} AS {quote_ident(cc.carried(i))}"),
                  F.expr(f"{present} AS {quote_ident(cc.present(i))}")]
    return rows.select(*exprs)


def _case(condition: str, then: str, otherwise: str) -> str:
    return f"CASE WHEN {condition} THEN {then} ELSE {otherwise} END"


def _position_sql(positions: dict[int, int]) -> str:
    """The column's position in each row's relation version: a literal when all agree, else read from a
    constant array indexed by slot (O(1) per row, however many versions)."""
    distinct = set(positions.values())
    if len(distinct) == 1:
        return str(int(distinct.pop()))
    table = [-1] * (max(positions) + 1)
    for slot, j in positions.items():
        table[slot] = j
    return f"element_at(array({', '.join(map(str, table))}), `slot` + 1)"


def _slot_in_sql(slots) -> str:
    """``slot IN (...)``, or ``false`` for no slot."""
    listed = ", ".join(str(int(k)) for k in sorted(slots))
    return f"`slot` IN ({listed})" if listed else "false"


def null_safe_equal(a: Sequence, b: Sequence):
    return reduce(lambda x, y: x & y, [p.eqNullSafe(q) for p, q in zip(a, b)])


def collapse_partitions(rows: int, columns: int, default: int) -> int | None:
    """Partitions for a collapse of ``rows`` changes of a table of ``columns`` columns, when more than
    ``default`` (the shuffle partitions) are needed: about CELLS_PER_PARTITION values each."""
    wanted = -(-rows * (columns + 8) // CELLS_PER_PARTITION)
    return wanted if wanted > default else None


def writes_deletion_vectors(changes: int, table_rows, rewrite_share: float, table_bytes=None,
                            rewrite_table_bytes: int = 0) -> bool:
    """Whether a MERGE of ``changes`` changes should mark rows in deletion vectors (else rewrite files).

    Deletion vectors make a MERGE's cost follow the batch, not the table: it writes the changed rows
    and marks their old copies, where a rewrite also copies every untouched row of each file it
    touches. But building the vectors is a pass of its own (several small Spark jobs): a table whose files
    total less than ``rewrite_table_bytes`` costs less to rewrite, even whole, than that pass. A batch
    that changes ``rewrite_share`` of the table's rows or more touches nearly every file either way;
    then the rewrite is the cheaper MERGE too (one pass fewer over source and target). Rewritten files
    leave readers no vectors to apply. ``table_bytes`` (None or a callable: None when unknown) is called only with a
    ``rewrite_table_bytes``; ``table_rows`` only for batches of ``REWRITE_MIN_CHANGES`` or more.
    """
    if rewrite_table_bytes and table_bytes is not None:
        size = table_bytes()
        if size is not None and size < rewrite_table_bytes:
            return False
    if changes < REWRITE_MIN_CHANGES:
        return True
    return changes < rewrite_share * table_rows()


def key_range(collapsed, work: TableWork):
    """``(rows, lowest key, highest key)`` of the collapsed rows — one small job; the range only for a
    single-column key (``None`` otherwise)."""
    from pyspark.sql import functions as F

    if len(work.key_index) != 1:
        return collapsed.count(), None, None
    row = collapsed.agg(F.count(F.lit(1)), F.min("k_0"), F.max("k_0")).first()
    return row[0], row[1], row[2]


def merge_keyed(tables: SparkTables, collapsed, work: TableWork, bounds: tuple | None = None) -> MergeResult:
    """MERGE the collapsed rows: delete; update the columns each row carries (the rest keep silver's
    values); insert rows with nothing left to fill from silver. ``bounds`` (lowest, highest key of a
    single-column key) go into the join condition, so Delta skips silver files outside them — a
    batch of recent keys reads only the files that hold recent keys."""

    if needs_replace(tables, work):
        return replace_keyed(tables, collapsed, work, bounds)
    key_names = [work.columns[i].name for i in work.key_index]
    on = " AND ".join(f"t.{quote_ident(k)} = s.`{cc.key(p)}`" for p, k in enumerate(key_names))
    condition: str | Column = on
    ddl = work.columns[work.key_index[0]].spark_ddl
    if bounds is not None and bounds[0] is not None:
        condition = key_bounds_sql(on, f"t.{quote_ident(key_names[0])}", bounds, ddl)
        if condition == on:   # no SQL literal of the bounds: a Column has them, where the engine takes one
            condition = tables.between(on, f"t.{quote_ident(key_names[0])}", bounds, ddl)
    # SQL text on both kinds of session (merge_sql.py): the Column API's form took ~200 Py4J round trips
    # a four-column table, every batch.
    assignments, values = keyed_assignments_sql(work)
    merge = tables.delta_table(work.ref).alias("t").merge(collapsed.alias("s"), condition)
    merge, upsert = (keyed_soft_delete(merge, work, assignments, values) if work.deleted is not None else
                     (merge.whenMatchedDelete(condition="s._action = 'delete'"), "s._action = 'upsert'"))
    metrics = (merge.whenMatchedUpdate(condition=upsert, set=assignments)
               .whenNotMatchedInsert(condition="s._action = 'upsert' AND s._complete", values=values)
               .execute().collect())
    row = metrics[0].asDict() if metrics else {}   # a soft table's markings count as updates
    return MergeResult(row.get("num_inserted_rows", 0) or 0, row.get("num_updated_rows", 0) or 0,
                       row.get("num_deleted_rows", 0) or 0)


def merge_keyless(tables: SparkTables, projected, work: TableWork, target_empty: bool = False) -> MergeResult:
    """Tables matched on all values: apply each distinct row's changes in commit order, duplicates exact.

    Each Insert adds one copy of its row, each Delete removes one copy of its
    old row, an Update does both, old row first (its unchanged TOAST columns
    come from the old row, which REPLICA IDENTITY FULL sends whole). A removal
    that finds no copy left changes nothing (as in PostgreSQL's apply worker),
    so order matters: from ``c`` copies in silver, steps of +1/-1 with running
    sums ``S_k`` leave ``max(c + S_n, S_n - min(0, min_k S_k))`` copies (a
    Delete of a row silver lacks, then its Insert: one copy, not none). Delta
    cannot delete k of n identical rows, so when copies go away all ``c`` are
    deleted and the rest re-inserted (with the batch's latest commit metadata; soft deletes mark them).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F


    n = len(work.columns)
    step = Step(tables, work.ref) if needs_replace(tables, work) else None
    meta_cols = list(cc.EVENT_META)
    if projected.where((F.col(cc.OP) == "U") & F.col(cc.OLD_KIND).isNull()).limit(1).count():
        raise ApplyError("an update without its old row on a table without a key: cannot tell which row changed; "
                         "set REPLICA IDENTITY FULL or configure the key", table=work.qualified_name)
    filled = [F.when(F.col(cc.carried(i)), F.col(cc.value(i))).when(F.col(cc.present(i)), F.col(cc.old(i)))
              for i in range(n)]
    order = lambda step: F.struct(cc.COMMIT_LSN, cc.SEQ, F.lit(step).alias("_step"))  # noqa: E731
    meta = [F.col(c) for c in meta_cols]
    adds = projected.where(F.col(cc.OP).isin("I", "U")).select(
        *[v.alias(cc.final(i)) for i, v in enumerate(filled)], F.lit(1).alias("_d"), order(1).alias("_o"), *meta)
    subs = projected.where(F.col(cc.OP).isin("U", "D")).select(
        *[F.col(cc.old(i)).alias(cc.final(i)) for i in range(n)], F.lit(-1).alias("_d"), order(0).alias("_o"), *meta)
    values = [cc.final(i) for i in range(n)]
    running = Window.partitionBy(*values).orderBy("_o").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    net = (adds.unionByName(subs).withColumn("_s", F.sum("_d").over(running)).groupBy(*values)
           .agg(F.sum("_d").alias("_d"), F.least(F.min("_s"), F.lit(0)).alias("_low"),
                F.max_by(F.struct(*meta_cols), "_o").alias("_m"))
           .where("_d != 0 OR _low < 0"))
    net = net.select(*values, "_d", "_low", *[F.col(f"_m.{c}").alias(c) for c in meta_cols]).localCheckpoint()
    if target_empty:
        counted = net.withColumn("_c", F.lit(0).cast("long"))
    else:
        # Over Spark Connect a join of two sessions' DataFrames is refused (SESSION_NOT_SAME): silver is read
        # in the decoded rows' own session there.
        own = tables.on(tables.session_of(projected))
        silver = own.read(work.ref) if step is None else silver_before(own, work.ref, step)
        silver = silver.where(f"NOT {is_deleted_sql(work.deleted)}") if work.deleted else silver  # live copies
        target = silver.select(*[F.col(quote_ident(c.name)).alias(cc.final(i))
                                               for i, c in enumerate(work.columns)])
        cond = null_safe_equal([target[v] for v in values], [F.col(f"_n.{v}") for v in values])
        present = (target.join(F.broadcast(net.select(*values).alias("_n")), cond, "left_semi")
                   .groupBy(*values).agg(F.count(F.lit(1)).alias("_c")))
        counted = net.alias("a").join(present.alias("b"), null_safe_equal(
            [F.col(f"a.{v}") for v in values], [F.col(f"b.{v}") for v in values]), "left").select(
            *[F.col(f"a.{v}") for v in values], "a._d", "a._low", *[F.col(f"a.{c}") for c in meta_cols],
            F.coalesce(F.col("b._c"), F.lit(0)).alias("_c"))
    counted = counted.withColumn("_new", F.greatest(F.col("_c") + F.col("_d"), F.col("_d") - F.col("_low")))
    if step is not None:
        return replace_keyless(tables, counted, work, values, step)
    fewer = F.col("_new") < F.col("_c")
    deletes = counted.where(fewer).select(*values, *meta_cols, F.lit("del").alias(cc.KIND))
    copies = F.when(fewer, F.col("_new")).otherwise(F.col("_new") - F.col("_c"))
    inserts = (counted.where(copies > 0).withColumn("_k", F.explode(F.sequence(F.lit(1), copies.cast("int"))))
               .select(*values, *meta_cols, F.lit("ins").alias(cc.KIND)))
    source = deletes.unionByName(inserts)
    condition = " AND ".join(f"t.{quote_ident(c.name)} <=> s.`{cc.final(i)}`" for i, c in enumerate(work.columns))
    meta_set = {quote_ident(col): tables.column(f"s.`{src}`") for col, src in work.meta}
    insert_values = {quote_ident(c.name): tables.column(f"s.`{cc.final(i)}`") for i, c in enumerate(work.columns)}
    insert_values.update(meta_set)
    target = tables.delta_table(work.ref).alias("t")
    merge = (keyless_soft_delete(target, source.alias("s"), condition, work, insert_values) if work.deleted else
             target.merge(source.alias("s"), f"({condition}) AND s._kind = 'del'").whenMatchedDelete())
    metrics = merge.whenNotMatchedInsert(condition="s._kind = 'ins'", values=insert_values).execute().collect()
    row = metrics[0].asDict() if metrics else {}
    return MergeResult(row.get("num_inserted_rows", 0) or 0, 0, row.get("num_deleted_rows", 0) or 0)
