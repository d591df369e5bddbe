"""Silver's side of a verification (Spark): the applied position, one pinned version of each silver table, the
keys changed at or after the source's point (from the history table), and per range a row count and hash sum
with the same encoding PostgreSQL used (:mod:`cdc_apply.verification.encoding`)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from cdc_apply.config import Config
from cdc_apply.delta.refs import TableRef, bronze_ref
from cdc_apply.errors import VerifyError
from cdc_apply.lake.books.bookkeeping import Bookkeeping
from cdc_apply.lake.history.versions import HistoryColumns
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.verification.encoding import ColumnEncoding, spark_key_text, spark_row_hash, spark_row_text

if TYPE_CHECKING:

    from cdc_apply.delta.engine import SparkTables

KEY = "_verify_k"      # key texts: _verify_k0, _verify_k1, ...
HASH = "_verify_h"
RANGE = "_verify_r"
TEXT = "_verify_t"     # value texts: _verify_t0, _verify_t1, ...


def applied_position(engine: SparkTables, config: Config, source: str) -> tuple[int | None, int | None]:
    """``(applied seq, applied commit LSN)`` of the source's newest progress row (None, None before any)."""
    from pyspark.sql import functions as F

    ref = Bookkeeping(config).ref("progress")
    if not engine.exists(ref):
        return None, None
    row = (engine.read(ref).where(F.col("source") == source).orderBy(F.desc("apply_version"))
           .select("applied_seq", "applied_commit_lsn").first())
    if row is None:
        return None, None
    return row[0], row[1]


def passed(engine: SparkTables, config: Config, source: str, lsn: int) -> tuple[bool, int | None]:
    """Whether every commit below ``lsn`` is applied, and the applied commit LSN. True when a commit at or past
    ``lsn`` is applied, or when the applied seq covers a bronze row the server sent from a WAL position at or
    past ``lsn``: the walsender decodes WAL in order, so every commit below ``lsn`` was sent — and landed —
    before it (a quiet source, whose transaction past the point changed no table, or one the apply skips)."""
    from pyspark.sql import functions as F

    seq, applied = applied_position(engine, config, source)
    if applied is not None and applied >= lsn:
        return True, applied
    if seq is None:
        return False, applied
    bronze = engine.read(bronze_ref(config))
    first = bronze.where((F.col("source") == source) & (F.col("lsn") >= lsn)).agg(F.min("seq")).collect()[0][0]
    return first is not None and int(first) <= int(seq), applied


def wait_applied(engine: SparkTables, config: Config, source: str, lsn: int, timeout: float,
                 poll: float = 1.0) -> int | None:
    """Wait until every commit below ``lsn`` is applied (:func:`passed`); returns the applied commit LSN then,
    a :class:`VerifyError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done, applied = passed(engine, config, source, lsn)
        if done:
            return applied
        if time.monotonic() >= deadline:
            shown = format_lsn(applied) if applied is not None else "nothing"
            landed = landed_lsn(engine, config, source)
            if landed is None or landed < lsn:
                raise VerifyError(f"bronze did not receive the source's point within {timeout:g} s (landed: "
                                  f"{format_lsn(landed) if landed is not None else 'nothing'}); is the lander "
                                  "(cdc-apply land) running? (--wait-seconds)", source=source, lsn=format_lsn(lsn))
            raise VerifyError(f"the apply job did not reach the source's point within {timeout:g} s (applied: "
                              f"{shown}; bronze holds {format_lsn(landed)}); is it running? (--wait-seconds)",
                              source=source, lsn=format_lsn(lsn))
        time.sleep(poll)


def landed_lsn(engine: SparkTables, config: Config, source: str) -> int | None:
    """The newest LSN bronze holds for ``source`` (None: no row)."""
    from pyspark.sql import functions as F


    return engine.read(bronze_ref(config)).where(F.col("source") == source).agg(F.max("lsn")).collect()[0][0]


def newest_tag(engine: SparkTables, ref: TableRef, version: int) -> dict | None:
    """The commit tag (:mod:`cdc_apply.lake.books.commit_tag`) of the newest batch write at or below silver
    version ``version`` among its last 100 commits (None: no such write)."""
    from pyspark.sql import functions as F

    from cdc_apply.lake.books.commit_tag import decode_tag

    commits = (engine.spark.sql(f"DESCRIBE HISTORY {ref.sql}").where(F.col("version") <= version)
               .orderBy(F.desc("version")).select("userMetadata").limit(100).collect())
    return next((tag for tag in (decode_tag(r.userMetadata) for r in commits) if tag and "apply_step" in tag), None)


def wait_logged(engine: SparkTables, config: Config, tag: dict | None, timeout: float, poll: float = 1.0,
                **context: str) -> None:
    """Wait until the batch whose write ``tag`` names (:func:`newest_tag`) has its progress row: its
    transactions log rows, written before that row, are then all there."""
    from pyspark.sql import functions as F

    from cdc_apply.lake.books.ledger import STEPS_PER_VERSION

    if tag is None:
        return
    wanted = int(tag["apply_step"]) // STEPS_PER_VERSION
    progress = Bookkeeping(config).ref("progress")
    deadline = time.monotonic() + timeout
    while (engine.read(progress).agg(F.max("apply_version")).collect()[0][0] or -1) < wanted:
        if time.monotonic() >= deadline:
            raise VerifyError(f"the batch of apply version {wanted} did not finish within {timeout:g} s", **context)
        time.sleep(poll)


def pin(engine: SparkTables, ref: TableRef):
    """``(version, DataFrame)``: the table's newest Delta version, read at that version whatever comes later."""
    newest = engine.spark.sql(f"DESCRIBE HISTORY {ref.sql} LIMIT 1").first()
    assert newest is not None  # a Delta table's history holds at least the commit that made it
    version = int(newest["version"])
    reader = engine.spark.read.format("delta").option("versionAsOf", version)
    return version, (ref.load(reader))


def prepared(frame, columns: list[ColumnEncoding], key: list[str], range_sql: str | None, buckets: int | None):
    """``frame`` as ``(key texts..., row hash, range index)``: a keyed table's range by its key (``range_sql``,
    None: one range), a keyless table's key its row text and its range the hash's bucket."""
    from pyspark.sql import functions as F

    frame, columns = with_value_texts(frame, columns)
    if key:
        keys = [F.expr(spark_key_text(k)).alias(f"{KEY}{i}") for i, k in enumerate(key)]
        index = F.expr(range_sql) if range_sql else F.lit(0)
        return frame.select(*keys, F.expr(spark_row_hash(columns)).alias(HASH), index.cast("int").alias(RANGE))
    out = frame.select(F.expr(spark_row_text(columns)).alias(f"{KEY}0"), F.expr(spark_row_hash(columns)).alias(HASH))
    index = F.expr(f"pmod({HASH}, {int(buckets)})") if buckets else F.lit(0)
    return out.withColumn(RANGE, index.cast("int"))


def with_value_texts(frame, columns: list[ColumnEncoding]) -> tuple[object, list[ColumnEncoding]]:
    """``frame`` with each column's value text computed once, in a projection of its own, and ``columns``
    reading those texts. A row's text names each value three times (null test, length, the text); in one
    projection Spark evaluated each of them again (~20 % of a verify's Spark time on a five-column table);
    the optimizer keeps a projection whose results the next one reads more than once."""
    from pyspark.sql import functions as F

    texts = [F.expr(c.spark).alias(f"{TEXT}{i}") for i, c in enumerate(columns)]
    return frame.select("*", *texts), [replace(c, spark=f"`{TEXT}{i}`") for i, c in enumerate(columns)]


def without(engine: SparkTables, rows, key: list[str], excluded: list[tuple]):
    """``rows`` less the excluded keys (keyless: row hashes): a broadcast anti-join."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    if not excluded:
        return rows
    if key:
        schema = StructType([StructField(f"{KEY}{i}", StringType()) for i in range(len(key))])
        cols = [f"{KEY}{i}" for i in range(len(key))]
        data = [tuple(k) for k in excluded]
    else:
        schema, cols, data = StructType([StructField(HASH, LongType())]), [HASH], [(int(k[0]),) for k in excluded]
    return rows.join(F.broadcast(engine.spark.createDataFrame(data, schema)), cols, "left_anti")


def total(rows) -> tuple[int, int]:
    """``(rows, exact hash sum)`` of the whole table: the sum of each hash's high 32 bits (signed) and of its
    low 32 bits (unsigned), each a BIGINT that cannot overflow below 2^31 rows, joined here. Two BIGINT sums
    cost less than a DECIMAL(38,0) one, whose every addition is a Java BigDecimal's."""
    from pyspark.sql import functions as F

    h = F.col(HASH)
    got = rows.agg(F.count(F.lit(1)), F.sum(F.shiftright(h, 32)), F.sum(h.bitwiseAND(0xFFFFFFFF))).first()
    n, high, low = got[0], got[1] or 0, got[2] or 0
    return int(n), (int(high) << 32) + int(low)


def range_sums(rows) -> dict[int, tuple[int, int]]:
    """``{range: (rows, exact hash sum)}``."""
    from pyspark.sql import functions as F

    got = rows.groupBy(RANGE).agg(F.count(F.lit(1)).alias("n"), F.sum(F.col(HASH).cast("decimal(38,0)")).alias("s"))
    return {int(r[RANGE]): (int(r["n"]), int(r["s"])) for r in got.collect()}


def range_rows(rows, ranges: list[int], key_count: int) -> list[tuple]:
    """``(key texts..., hash)`` of the rows in ``ranges`` (keyless: the row text for the key)."""
    from pyspark.sql import functions as F

    cols = [f"{KEY}{i}" for i in range(max(key_count, 1))] + [HASH]
    return [tuple(r) for r in rows.where(F.col(RANGE).isin(ranges)).select(*cols).collect()]


def changed_keys(engine: SparkTables, history: TableRef, prefix: str, lsn: int, columns: list[ColumnEncoding],
                 key: list[str]) -> list[tuple]:
    """Keys (keyless: row hashes) of the history table's versions made or ended by a commit at or after ``lsn``:
    every key a transaction committed at or past the point changed, deletes included. Read after silver is
    pinned: a batch writes its history before silver, so a batch under way is in it too."""
    from pyspark.sql import functions as F

    h = HistoryColumns(prefix)
    df = engine.read(history).where((F.col(h.valid_from_lsn) >= lsn) | (F.col(h.valid_to_lsn) >= lsn))
    if key:
        out = df.select(*[F.expr(spark_key_text(k)).alias(f"k{i}") for i, k in enumerate(key)]).distinct()
        return [tuple(r) for r in out.collect()]
    return [(r[0],) for r in df.select(F.expr(spark_row_hash(columns))).distinct().collect()]


def silver_columns(frame, prefix: str) -> dict[str, str]:
    """Silver's own columns (not the ``_cdc_`` metadata): name -> Spark simple type string."""
    return {f.name: f.dataType.simpleString() for f in frame.schema.fields if not f.name.startswith(prefix)}
