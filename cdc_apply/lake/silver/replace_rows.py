"""Silver writes without a MERGE, for the tables Delta's MERGE cannot write: a column name holding a
backtick while the table's Change Data Feed is on.

Delta 4.4 builds the change-feed rows of a MERGE (and of an UPDATE) by naming every target column
as ``packedCdc.`<name>``` without doubling the backticks inside it, so such a MERGE stops with
``[INVALID_ATTRIBUTE_NAME_SYNTAX]`` whatever its source looks like. Two of Delta's writes never name
a column that way: the replacing write (the ``replaceOn`` option: delete the rows a condition pairs
with a row of the DataFrame written, append the DataFrame, one commit) and DELETE. Both need the
table's deletion vectors: without them Delta 4.4 cannot find the files a delete by subquery touches
(``DELTA_FILE_TO_OVERWRITE_NOT_FOUND``).

So a batch's MERGE becomes two commits of one ledger step (:mod:`cdc_apply.lake.books.ledger`): first the
rows that stay — replaced whole, each with silver's values in the columns the batch leaves as they
are — then a DELETE of the rows that go. The first commit does not record the step (its
``userMetadata`` says ``replaces_for_step`` instead of ``apply_step``); the last one does. A run that
crashed between the two finds the first commit, computes from silver as it was just before it (Delta
time travel), and writes only the DELETE: no row is written twice, none is lost. The change feed shows
an updated row as a delete and an insert of one commit, where a MERGE shows its pre- and post-image.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING

from cdc_apply.delta.ddl import USER_METADATA, table_properties
from cdc_apply.delta.names import quote_ident
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import ApplyError
from cdc_apply.lake.books.commit_tag import decode_tag, encode_tag
from cdc_apply.lake.silver.merge_result import MergeResult
from cdc_apply.lake.silver.soft_deletes import marker_of
from cdc_apply.planning import columns as cc
from cdc_apply.planning.table_plan import TableWork

if TYPE_CHECKING:

    from cdc_apply.delta.engine import SparkTables

ALLOW_EXISTS = "spark.databricks.delta.delete.allowExistsSubquery"
HISTORY_PROBE = 16   # commits read back for a first commit left by a crashed run (a step writes two)


def needs_replace(tables: SparkTables, work: TableWork) -> bool:
    """Whether ``work``'s silver table must be written by :func:`replace_keyed` / :func:`replace_keyless`."""
    names = [c.name for c in work.columns] + [col for col, _ in work.meta]
    if not any("`" in name for name in names):
        return False
    props = table_properties(tables.spark, work.ref)
    if props.get("delta.enableChangeDataFeed", "false").lower() != "true":
        return False
    if props.get("delta.enableDeletionVectors", "false").lower() != "true":
        raise ApplyError(f"silver table {work.ref} has a column name holding a backtick and Change Data Feed on, "
                         "which Delta can write only with deletion vectors: turn them on for the table (ALTER TABLE "
                         "... SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true'); silver.deletion_vectors = "
                         "true and silver.readers = \"spark\" for new tables) or turn its change feed off "
                         "(silver.change_data_feed = false)",
                         table=work.qualified_name, source=work.source)
    return True


class Step:
    """The ledger step being written (from the ``userMetadata`` the session carries; none when the write
    is not one of a batch), and the first commit a crashed run of it left."""

    def __init__(self, tables: SparkTables, ref: TableRef) -> None:
        text = tables.spark.conf.get(USER_METADATA, None)
        self.metadata = text
        self.tag = decode_tag(text)
        self.step = None if self.tag is None else self.tag.get("apply_step")
        self.first_version = (self._first_commit(tables, ref, self.tag.get("app"))
                              if self.tag is not None and self.step is not None else None)

    def _first_commit(self, tables: SparkTables, ref: TableRef, app: object) -> int | None:
        for row in tables.delta_table(ref).history(HISTORY_PROBE).select("version", "userMetadata").collect():
            tag = decode_tag(row.userMetadata)
            if tag is None:
                continue
            if tag.get("app") == app and tag.get("replaces_for_step") == self.step:
                return int(row.version)
        return None

    def first_metadata(self, last: bool) -> str | None:
        """The first commit's ``userMetadata``: the step's own when no DELETE follows it."""
        if self.tag is None or last:
            return self.metadata
        tag = {k: v for k, v in self.tag.items() if k != "apply_step"}
        tag.update({"replaces_for_step": self.step, "part": "rows replaced"})
        return encode_tag(tag)


def silver_before(tables: SparkTables, ref: TableRef, step: Step):
    """Silver as the step's writes found it: as of the version before a first commit already made."""
    if step.first_version is None:
        return tables.read(ref)
    reader = tables.spark.read.format("delta").option("versionAsOf", step.first_version - 1)
    return ref.load(reader)


def replace_keyed(tables: SparkTables, collapsed, work: TableWork, bounds: tuple | None = None):
    """:func:`cdc_apply.lake.silver.merge.merge_keyed`'s writes: the kept rows replaced, the deleted removed."""
    from pyspark.sql import functions as F


    step = Step(tables, work.ref)
    n = len(work.columns)
    target = silver_before(tables, work.ref, step)
    if bounds is not None and bounds[0] is not None:   # read only the files that can hold the batch's keys
        key = work.columns[work.key_index[0]]
        target = target.where(F.col(quote_ident(key.name)).between(F.lit(bounds[0]).cast(key.spark_ddl),
                                                                   F.lit(bounds[1]).cast(key.spark_ddl)))
    soft = work.deleted is not None   # a marked row counts as absent; deletes mark rows (soft_deletes.py)
    marked = F.expr(f"coalesce({quote_ident(marker_of(work))}, false)") if soft else F.lit(False)
    target = target.select(*[F.col(quote_ident(c.name)).alias(f"_t_{i}") for i, c in enumerate(work.columns)],
                           F.lit(True).alias("_in_t"), marked.alias("_t_del"))
    match = [F.col(cc.key(p)) == F.col(f"_t_{i}") for p, i in enumerate(work.key_index)]
    upsert, found = F.col("_action") == "upsert", F.coalesce(F.col("_in_t"), F.lit(False))
    joined = collapsed.join(target, reduce(lambda a, b: a & b, match), "left").select(
        *[F.col(cc.key(p)) for p in range(len(work.key_index))], "_action", found.alias("_in_t"), "_complete",
        F.coalesce(F.col("_t_del"), F.lit(False)).alias("_t_del"),
        *[F.when(F.col(cc.sets(i)), F.col(cc.final(i))).otherwise(F.col(f"_t_{i}")).alias(cc.final(i))
          for i in range(n)], *[F.col(f"_t_{i}") for i in range(n)] * soft,
        *[F.col(src) for _, src in work.meta]).localCheckpoint()
    live = F.col("_in_t") & ~F.col("_t_del")
    counts = joined.agg(*[F.count(F.when(c, 1)).alias(a) for a, c in (
        ("updated", upsert & live), ("inserted", upsert & ~live & F.col("_complete")),
        ("deleted", ~upsert & live))]).first()
    flag = [F.lit(False).alias(marker_of(work))] if soft else []
    kept = joined.where(upsert & (live | F.col("_complete"))).select(
        *[F.col(cc.final(i)).alias(c.name) for i, c in enumerate(work.columns)],
        *[F.col(src).alias(col) for col, src in work.meta], *flag)
    gone = joined.where(~upsert & live).select(*[F.col(cc.key(p)) for p in range(len(work.key_index))])
    if soft:   # the deleted rows stay, silver's values marked with the delete's commit
        kept = kept.unionByName(joined.where(~upsert & live).select(
            *[F.col(f"_t_{i}").alias(c.name) for i, c in enumerate(work.columns)],
            *[F.col(src).alias(col) for col, src in work.meta], F.lit(True).alias(marker_of(work))))
        gone = gone.limit(0)
    key_names = [work.columns[i].name for i in work.key_index]
    _write(tables, work.ref, step, kept, counts.updated + counts.inserted + counts.deleted * soft, key_names,
           gone, [cc.key(p) for p in range(len(key_names))], counts.deleted * (not soft))
    return MergeResult(counts.inserted, counts.updated, counts.deleted)


def replace_keyless(tables: SparkTables, counted, work: TableWork, values: list[str], step: Step):
    """:func:`cdc_apply.lake.silver.merge.merge_keyless`'s writes from its per-value counts (``_c`` copies in
    silver, ``_new`` after the batch; read from :func:`silver_before`): each value whose count changes
    is replaced by its ``_new`` copies, or deleted when none is left. ``step``: the one ``counted`` read
    silver for. A value's copies all carry the
    batch's commit metadata after (a MERGE keeps the old copies' when the count grows)."""
    from pyspark.sql import functions as F


    if work.deleted is not None:
        raise ApplyError(f"silver table {work.ref} has no key, a column name holding a backtick and Change Data "
                         "Feed on, which cannot take soft deletes: set its deletes to \"hard\" or turn its change "
                         "feed off (silver.change_data_feed = false)", table=work.qualified_name, source=work.source,
                         key=f"tables.{work.qualified_name}.deletes")
    counted = counted.where(F.col("_new") != F.col("_c")).localCheckpoint()
    counts = counted.agg(F.sum(F.when(F.col("_new") > 0, F.col("_new"))).alias("written"),
                         F.count(F.when(F.col("_new") > 0, 1)).alias("values"),
                         F.sum(F.when(F.col("_new") == 0, F.col("_c"))).alias("deleted"),
                         F.sum(F.when(F.col("_new") > 0, F.col("_c"))).alias("replaced")).first()
    kept = (counted.where(F.col("_new") > 0)
            .withColumn("_k", F.explode(F.sequence(F.lit(1), F.col("_new").cast("int"))))
            .select(*[F.col(v).alias(c.name) for v, c in zip(values, work.columns)],
                    *[F.col(src).alias(col) for col, src in work.meta]))
    gone = counted.where(F.col("_new") == 0).select(*values)
    _write(tables, work.ref, step, kept, counts["values"], [c.name for c in work.columns], gone, values,
           counts.deleted or 0)
    written, replaced = counts.written or 0, counts.replaced or 0
    return MergeResult(written, 0, replaced + (counts.deleted or 0))


def _write(tables: SparkTables, ref: TableRef, step: Step, kept, kept_rows: int, names: list[str], gone,
           gone_columns: list[str],
           gone_rows: int) -> None:
    """The step's two commits: ``kept`` replaces the silver rows whose ``names`` it holds (null-safe), then
    the rows whose ``names`` equal a ``gone`` row's ``gone_columns`` are deleted. Either is left out when
    it has no rows; the first also when a crashed run made it."""
    if kept_rows and step.first_version is None:
        condition = " AND ".join(f"t.{quote_ident(n)} <=> s.{quote_ident(n)}" for n in names)
        writer = (kept.alias("s").write.format("delta").mode("overwrite")
                  .option("replaceOn", condition).option("targetAlias", "t"))
        metadata = step.first_metadata(last=not gone_rows)
        if metadata is not None:
            writer = writer.option("userMetadata", metadata)
        writer.save(ref.path) if ref.path else writer.saveAsTable(ref.name)
    if gone_rows:
        _delete_matching(tables, ref, gone, gone_columns, names)


def _delete_matching(tables: SparkTables, ref: TableRef, rows, columns: list[str], names: list[str]) -> None:
    """DELETE the silver rows whose ``names`` equal (null-safe) those ``columns`` of a row of ``rows``: one
    commit, with the ``userMetadata`` the session carries (the step's)."""
    from pyspark.sql import functions as F

    probe = rows.select(*[F.col(c).alias(f"_g_{j}") for j, c in enumerate(columns)]).alias("s")
    pairs = [F.col(f"s._g_{j}").eqNullSafe(F.col(f"t.{quote_ident(n)}").outer()) for j, n in enumerate(names)]
    exists = probe.where(reduce(lambda a, b: a & b, pairs)).exists()
    tables.spark.conf.set(ALLOW_EXISTS, "true")
    try:
        tables.delta_table(ref).alias("t").delete(exists)
    finally:
        tables.spark.conf.unset(ALLOW_EXISTS)
