"""A small batch on the driver: its micro-batch collected once; its bounds, contract count, control scan
and decode run in the driver's Python.

A running job's batches are mostly small (a lander committing every second: a few thousand messages a
batch), and on the general path each of those steps is a Spark job over the micro-batch or its cached
copy, with Catalyst's planning between them: ~0.9 s of a 3.5 s batch of 3,500 messages, against ~2 s of
MERGE (docs/BENCHMARKS.md). A micro-batch whose files come to at most ``LOCAL_BATCH_BYTES``, as Spark's
plan sizes them without a job, is instead collected as Arrow in one job; when it holds exactly the
batch's rows (``ApplyPipeline._holds_the_batch``) the steps run on that copy here, by the same rules —
the payload tests' twin (:func:`~cdc_apply.lake.sources.payload_columns.payload_kinds`), the
contract's error (:func:`~cdc_apply.lake.sources.bronze_contract.landed_twice`), the decode stage's own
function (:func:`~cdc_apply.decode.changes.decode_batches`) — and the tables get one DataFrame of the
decoded rows. A batch with snapshot loads or rows to read again from bronze decodes on the general
path, over a DataFrame of the same copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_apply.decode.changes import decode_batches
from cdc_apply.lake.sources.bronze_contract import landed_twice
from cdc_apply.lake.sources.micro_batch import Bounds
from cdc_apply.lake.sources.payload_columns import payload_is_control
from cdc_apply.planning.decode_plan import DecodePlan, output_ddl, output_schema
from cdc_apply.planning.table_plan import SlotCount

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Files of at most this many bytes (compressed: ~2-3 times as many bytes of payloads; ~30,000 messages
# of a narrow table) make a local batch: past it the decode's two Python workers beat the driver's one.
LOCAL_BATCH_BYTES = 4 << 20
ROWS = ("source", "seq", "lsn", "payload")
# A truncate as the general path's counts collect it: a Row of these fields.
TRUNCATE_FIELDS = ("source", "seq", "commit_lsn", "txn", "trunc_relids", "trunc_options")


def collect_micro_batch(df, planned: int | None) -> pa.Table | None:
    """The micro-batch ``df``'s rows (source, seq, lsn, payload) on the driver when ``planned`` bytes —
    its files' as Spark's plan sizes them, or its payloads' once counted (None: not known) — may make a
    local batch; else None."""
    if planned is None or planned > LOCAL_BATCH_BYTES:
        return None
    return df.select(*ROWS).toArrow()


def bounds_of(rows: pa.Table) -> dict[str, Bounds]:
    """Per source: its last and first seq, its rows and its payloads' bytes."""
    sized = rows.select(["source", "seq"]).append_column("bytes", pc.binary_length(rows["payload"]))
    grouped = sized.group_by("source").aggregate([
        ("seq", "max"), ("seq", "min"), ("seq", "count", pc.CountOptions(mode="all")), ("bytes", "sum")])
    return {g["source"]: Bounds(g["source"], g["seq_max"], g["seq_min"], g["seq_count"], g["bytes_sum"])
            for g in grouped.to_pylist()}


def count_local(rows: pa.Table) -> dict[str, int]:
    """Rows per source, a (source, seq) found twice a :class:`BronzeError` (``count_rows`` on the driver)."""
    out = {}
    for source in pc.unique(rows["source"]).to_pylist():
        seqs = np.sort(rows["seq"].filter(pc.equal(rows["source"], source)).to_numpy())
        twice = seqs[1:][seqs[1:] == seqs[:-1]]
        if len(twice):
            raise landed_twice(source, int(twice[0]), int((seqs == twice[0]).sum()))
        out[source] = len(seqs)
    return out


def decode_local(rows: pa.Table, plan: DecodePlan) -> pa.Table:
    """The decode stage's output for the batch's rows but its control messages (``mapInArrow``'s
    function, run here)."""
    changes = rows.filter(pa.array([not payload_is_control(p) for p in rows["payload"].to_pylist()],
                                   pa.bool_()))
    schema = output_schema(plan)
    out = list(decode_batches(changes.select(list(ROWS)).to_batches(), plan=plan))
    # Spark's conversion wants a chunk in every column, empty or not.
    return pa.Table.from_batches(out or [pa.RecordBatch.from_pylist([], schema=schema)], schema=schema)


def count_decoded(decoded: pa.Table, per_txn: bool) -> list[SlotCount]:
    """The decode's counts (``ApplyPipeline._counts`` on the driver): per source, transaction (``per_txn``),
    slot and kind."""
    op = decoded["op"]
    toast = pc.is_valid(decoded["toast"])
    moved = pc.fill_null(pc.and_(pc.and_(pc.equal(op, "U"), pc.is_valid(decoded["old_kind"])), toast), False)
    truncate = pc.fill_null(pc.and_(pc.equal(op, "T"), pc.is_null(decoded["error"])), False)
    keys = ["source", "txn", "slot", "op"] if per_txn else ["source", "slot", "op"]
    flags = pa.table({**{k: decoded[k] for k in keys}, "commit_lsn": decoded["commit_lsn"],
                      "toasted": toast.cast(pa.int64()), "moved": moved.cast(pa.int64()),
                      "errors": pc.is_valid(decoded["error"]).cast(pa.int64())})
    grouped = flags.group_by(keys).aggregate([
        ("commit_lsn", "count", pc.CountOptions(mode="all")), ("toasted", "sum"), ("moved", "sum"),
        ("errors", "sum"), ("commit_lsn", "max")])
    truncates: dict[tuple, list] = {}
    if pc.any(truncate).as_py():
        from pyspark.sql import Row

        for t in decoded.filter(truncate).select(list(dict.fromkeys(keys + list(TRUNCATE_FIELDS)))).to_pylist():
            truncates.setdefault(tuple(t[k] for k in keys), []).append(Row(**{k: t[k] for k in TRUNCATE_FIELDS}))
    out = []
    for g in grouped.to_pylist():
        key = tuple(g[k] for k in keys)
        out.append(SlotCount(g["source"], g["txn"] if per_txn else None, g["slot"], g["op"],
                             g["commit_lsn_count"], g["toasted_sum"], g["moved_sum"], g["errors_sum"],
                             g["commit_lsn_max"], truncates.get(key, [])))
    return out


def decoded_frame(spark: SparkSession, decoded: pa.Table, plan: DecodePlan):
    """The decoded rows as a DataFrame of the decode stage's types, for the tables."""
    return spark.createDataFrame(decoded, output_ddl(plan))
