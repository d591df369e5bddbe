"""``cdc-apply optimize``: compact silver and history tables, clustered by key, and bronze.

A MERGE limited to a batch's key range (``merge_keyed``) skips the files whose key range lies
outside it; appends write their files sorted by key. Over time updates scatter keys across files,
and many small files pile up: ``OPTIMIZE ... ZORDER BY (key)`` rewrites a table into fewer files,
each covering a narrow key range, so a batch of recent keys touches only the files that hold them.
Run it from a scheduler between batches or beside a running job (Delta's OPTIMIZE commits without
changing rows; a MERGE racing it retries or fails on the conflict, and the batch is re-run whole).

Bronze gets one file per landed batch (up to one a second from a lander under load). Its compaction is
Delta's bin-packing OPTIMIZE, which commits with ``dataChange = false``: the apply's stream skips such
commits, the lag's tail ignores them, and a lander appending at the same time does not conflict with it
(an append never conflicts with a compaction of other files). No Z-order: bronze's readers select by
source and seq, which the landed files already cover in narrow ranges, and a Z-order would rewrite the
whole of bronze each time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdc_apply.config import Config
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.names import quote_ident
from cdc_apply.delta.refs import bronze_ref, history_ref_for, silver_ref_for
from cdc_apply.lake.books.bookkeeping import Bookkeeping
from cdc_apply.planning.tables import identity_of
from cdc_apply.spark.s3_commits import check_exclusive_commits

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Optimized:
    """What OPTIMIZE did to one table (``bronze`` for bronze)."""

    table: str
    key: tuple[str, ...]
    files_removed: int
    files_added: int


def optimize_silver(spark: SparkSession, config: Config, tables: list[str] | None = None) -> list[Optimized]:
    """OPTIMIZE every silver table of the pipeline (or those named ``ns.name``), Z-ordered by key, and
    the history table of each that has one (named ``ns.name (history)``), Z-ordered by the same key."""
    engine = spark_tables(spark)   # the optimize command's entry: the engine chosen here
    check_exclusive_commits(spark, (config.silver.path, config.state.path), "optimize")
    histories = Bookkeeping(config).load_history(engine)
    done = []
    for source, history in sorted(histories.items()):
        for relation in history.relations.values():
            latest = relation.latest
            if tables and latest.qualified_name not in tables:
                continue
            key = tuple(identity_of(latest, config.key_for(latest.qualified_name)) or ())
            for ref, label in ((silver_ref_for(config, source, relation.versions), latest.qualified_name),
                               (history_ref_for(config, source, relation.versions),
                                f"{latest.qualified_name} (history)")):
                if engine.exists(ref):
                    done.append(_optimize(spark, ref, label, key))
    return done


def _optimize(spark: SparkSession, ref, label: str, key: tuple[str, ...]) -> Optimized:
    text = f"OPTIMIZE {ref.sql}"
    if key:
        text += " ZORDER BY (" + ", ".join(quote_ident(k) for k in key) + ")"
    result = spark.sql(text).first()
    assert result is not None  # OPTIMIZE answers one row of metrics
    metrics = result.metrics
    return Optimized(label, key, int(metrics.numFilesRemoved), int(metrics.numFilesAdded))


def optimize_bronze(spark: SparkSession, config: Config) -> Optimized | None:
    """Compact bronze's files (bin-packing, no Z-order); None when the pipeline has no bronze table yet."""
    ref = bronze_ref(config)
    check_exclusive_commits(spark, (ref.path,), "optimize --bronze")
    if not spark_tables(spark).exists(ref):
        return None
    return _optimize(spark, ref, "bronze", ())
