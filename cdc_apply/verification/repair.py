"""``cdc-apply verify --repair``: the differing key ranges copied again through the lander's snapshot chunks,
then verified once more (docs/VERIFY.md).

The request is a snapshot request message (:func:`~cdc_apply.lander.snapshots.requests.emit_request`): a
table whose first key column is an integer gets its differing ranges as range entries, each copied by the
lander under a point of its own and applied as a key-range load (the range emptied, its rows loaded, at
exactly its place in commit order); any other table is copied whole. The request is served once bronze
holds the snapshot that names it (its ``serves``) and the apply job has applied that snapshot's commit.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from cdc_apply.config import Config
from cdc_apply.delta.refs import bronze_ref
from cdc_apply.errors import VerifyError
from cdc_apply.lander.snapshots.state import range_entry
from cdc_apply.verification import compare as cmp
from cdc_apply.verification import silver as sv

if TYPE_CHECKING:

    from cdc_apply.delta.engine import SparkTables

_STREAM_COMMIT_OF_SNAPSHOTS = "6300000002"   # hex of 'c' and the lander's snapshot xid (2): its Stream Commit


def repair_targets(plans) -> tuple[list[str], list[tuple], list[str]]:
    """``(tables copied whole, ranges, request entries)`` for the differing tables of ``plans``: the
    differing ranges of a table whose first key column is an integer, the whole table otherwise."""
    tables, ranges, entries = [], [], []
    for plan in plans:
        result = plan.result
        if result.status != cmp.DIFFERS:
            continue
        if plan.shape is not None and plan.shape.key and plan.kind == "int" and not plan.buckets:
            column = plan.shape.key[0]
            for diff in result.differing:
                low = None if diff.low is None else int(diff.low)
                high = None if diff.high is None else int(diff.high)
                ranges.append((result.table, column, low, high))
                entries.append(range_entry(result.table, column, low, high))
        else:
            tables.append(result.table)
            entries.append(result.table)
    return tables, ranges, entries


def wait_repaired(engine: SparkTables, config: Config, entries: list[str], lsn: int, timeout: float,
                  poll: float = 1.0) -> None:
    """Wait until bronze holds, past ``lsn``, the snapshots serving every entry and the apply job has applied
    the last one's Stream Commit; a :class:`VerifyError` after ``timeout`` seconds (is the lander running?)."""
    from pyspark.sql import functions as F

    source = config.source.name
    deadline = time.monotonic() + timeout
    needed = None
    floor = None
    while True:
        # The snapshot's own rows carry no WAL position: they follow the request's row, whose LSN is ``lsn``.
        rows = engine.read(bronze_ref(config)).where(F.col("source") == source)
        if floor is None:
            floor = rows.where(F.col("lsn") >= lsn).agg(F.min("seq")).collect()[0][0]
        bronze = rows.where(F.col("seq") > floor) if floor is not None else None
        if needed is None and bronze is not None:
            text = F.col("payload").cast("string")
            found = bronze.agg(*[F.min(F.when(text.contains(json.dumps(e)), F.col("seq"))).alias(f"e{i}")
                                 for i, e in enumerate(entries)]).collect()[0]
            if all(v is not None for v in found):
                last = max(found)
                commit = (bronze.where((F.col("seq") > last) & (F.hex(F.substring("payload", 1, 5)) ==
                                                                 _STREAM_COMMIT_OF_SNAPSHOTS))
                          .agg(F.min("seq")).collect()[0][0])
                needed = None if commit is None else int(commit)
        if needed is not None:
            applied, _ = sv.applied_position(engine, config, source)
            if applied is not None and applied >= needed:
                return
        if time.monotonic() >= deadline:
            what = "landed" if needed is None else "applied"
            raise VerifyError(f"the repair's copies were not {what} within {timeout:g} s: is the lander running "
                              "(cdc-apply land), and the apply job?", source=source)
        time.sleep(poll)
