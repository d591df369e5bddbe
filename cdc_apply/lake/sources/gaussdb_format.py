"""Bronze sources in another format than pgoutput: GaussDB / openGauss binary decode-style.

A GaussDB bronze row holds one decoding result or a batch of records. The
transcoder (:mod:`cdc_apply.gaussdb.transcode`) turns a source's payloads, in
seq order, into pgoutput messages; they are appended to an internal Delta table
(``gaussdb_messages`` under the state location) with seqs of their own, and
from there the source is applied exactly like a pgoutput source.

The transcoding runs on the driver, streaming the batch's rows
(``toLocalIterator``) and writing in chunks; only an open transaction is held
in memory (a documented limit). Its carried state — the last bronze seq read,
the next derived seq and the transcoder's tables and open transaction — lives
in the source's progress state, so a re-run batch transcodes the same rows to
the same messages and the guarded append writes them once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdc_apply.config import Config
from cdc_apply.delta.refs import TableRef, state_ref
from cdc_apply.errors import CdcApplyError
from cdc_apply.gaussdb.transcode import GaussdbTranscoder
from cdc_apply.pgoutput.encoder import encode
from cdc_apply.pgoutput.messages import PG_EPOCH_UNIX_MICROS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXPANDED_TABLE = "gaussdb_messages"
EXPANDED_DDL = [("source", "STRING"), ("seq", "BIGINT"), ("lsn", "BIGINT"), ("payload", "BINARY"),
                ("bronze_seq", "BIGINT")]
CHUNK = 100_000


@dataclass(frozen=True)
class Expansion:
    """What one batch's transcoding produced for one source."""

    last_seq: int                          # derived seq of the last message so far
    format_state: str                      # carried to the next batch
    users: dict[int, str] = field(default_factory=dict)   # commit LSN -> user name
    heartbeat_ts: int | None = None        # unix microseconds of the newest heartbeat
    messages: int = 0


def expanded_ref(config: Config) -> TableRef:
    return state_ref(config, EXPANDED_TABLE)


def _transcoder(config: Config, saved: str | None) -> GaussdbTranscoder:
    position, unit = config.gaussdb.commit_position, config.gaussdb.heartbeat_unit
    keys = {name: list(t.key) for name, t in config.tables.items() if t.key}
    excluded = frozenset(config.gaussdb.exclude_users)
    if saved:
        return GaussdbTranscoder.from_state_json(saved, keys, excluded, commit_position=position, heartbeat_unit=unit)
    return GaussdbTranscoder(keys, excluded, commit_position=position, heartbeat_unit=unit)


def _append(spark: SparkSession, config: Config, source: str, rows: list[tuple], version: int, chunk: int) -> None:
    import pyarrow as pa

    table = pa.table({
        "source": pa.array([r[0] for r in rows], pa.string()),
        "seq": pa.array([r[1] for r in rows], pa.int64()),
        "lsn": pa.array([r[2] for r in rows], pa.int64()),
        "payload": pa.array([r[3] for r in rows], pa.binary()),
        "bronze_seq": pa.array([r[4] for r in rows], pa.int64()),
    })
    df = spark.createDataFrame(table)
    # One guarded append per chunk: a re-run batch writes each chunk once.
    expanded_ref(config).append(df.coalesce(1), f"cdc_apply:{config.pipeline}:gaussdb:{source}",
                                version * 1000 + chunk)


def expand_gaussdb(spark: SparkSession, config: Config, bronze: TableRef, source: str, format_state: str | None,
                   to_bronze_seq: int, version: int) -> Expansion:
    """Transcode ``source``'s bronze rows after the carried position up to ``to_bronze_seq``."""
    from pyspark.sql import functions as F

    saved = json.loads(format_state) if format_state else {}
    done = saved.get("bronze_seq", -1)
    next_seq = saved.get("next_seq", 0)
    transcoder = _transcoder(config, saved.get("transcoder"))
    heartbeat_ts = saved.get("heartbeat_ts")
    rows = (bronze.read(spark).where((F.col("source") == source) & (F.col("seq") > done)
                                     & (F.col("seq") <= to_bronze_seq))
            .select("seq", "payload").orderBy("seq"))
    out: list[tuple] = []
    users: dict[int, str] = {}
    written = chunk = 0
    for row in rows.toLocalIterator():
        try:
            result = transcoder.transcode_payload(bytes(row.payload))
        except CdcApplyError as err:
            raise err.with_context(source=source, seq=row.seq) from None
        for om in result.messages:
            out.append((source, next_seq, om.lsn, encode(om.message), row.seq))
            next_seq += 1
        for txn in result.transactions:
            if txn.user_name is not None and not txn.excluded:
                users[txn.commit_lsn] = txn.user_name
        for beat in result.heartbeats:
            if beat.timestamp is not None:
                heartbeat_ts = beat.timestamp + PG_EPOCH_UNIX_MICROS
        if len(out) >= CHUNK:
            _append(spark, config, source, out, version, chunk)
            written, chunk, out = written + len(out), chunk + 1, []
    if out:
        _append(spark, config, source, out, version, chunk)
        written += len(out)
    state = json.dumps({"bronze_seq": max(done, to_bronze_seq), "next_seq": next_seq,
                        "transcoder": transcoder.state_json(), "heartbeat_ts": heartbeat_ts})
    return Expansion(next_seq - 1, state, users, heartbeat_ts, written)
