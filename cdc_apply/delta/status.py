"""What ``cdc-apply status`` shows: per source, the latest progress row and what is pending."""

from __future__ import annotations

from typing import Any

from cdc_apply.apply.state import SourceState
from cdc_apply.config import Config
from cdc_apply.delta.bookkeeping import Bookkeeping
from cdc_apply.pgoutput.messages import format_lsn


def read_status(spark, config: Config) -> list[dict[str, Any]]:
    """One dict per source: applied seq and commit LSN, pending transactions, lag, oldest bronze seq needed."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    books = Bookkeeping(config)
    if not books.ref("progress").exists(spark):
        return []
    latest = (books.ref("progress").read(spark)
              .withColumn("_r", F.row_number().over(Window.partitionBy("source").orderBy(F.desc("apply_version"))))
              .where("_r = 1").orderBy("source").collect())
    out = []
    for row in latest:
        state = SourceState.from_json(row.state)
        pending = state.describe_pending()
        out.append({
            "source": row.source,
            "apply_version": row.apply_version,
            "applied_seq": row.applied_seq,
            "applied_commit_lsn": format_lsn(row.applied_commit_lsn) if row.applied_commit_lsn is not None else None,
            "applied_commit_ts": row.applied_commit_ts,
            "pending_open": pending["open"],
            "pending_streamed": pending["streamed"],
            "pending_prepared": pending["prepared"],
            "prepared_gids": [p.gid for p in state.prepared],
            "oldest_needed_seq": row.oldest_needed_seq,
            "bronze_max_seq": row.bronze_max_seq,
            "lag_seq": row.lag_seq,
            "lag_seconds": row.lag_seconds,
            "updated_at": row.updated_at,
        })
    return out
