"""Bronze as the apply job and ``cdc-apply inspect`` read it: a configured table checked against the
contract (:mod:`cdc_apply.delta.bronze_schema`), and one source's messages in seq order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from cdc_apply.delta.bronze_schema import check_bronze_schema
from cdc_apply.errors import ConfigError
from cdc_apply.pgoutput import messages as m

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables

_START, _STOP = m.StreamStart.TYPE.encode(), m.StreamStop.TYPE.encode()


def check_bronze(tables: SparkTables, ref, key: str) -> None:
    """Raise :class:`ConfigError` naming ``key`` unless ``ref`` is a Delta table with the bronze columns."""
    if not tables.exists(ref):
        raise ConfigError("no bronze Delta table there: land into it first (cdc-apply land) or fix the setting",
                          key=key, table=str(ref))
    check_bronze_schema(tables.read(ref).schema, str(ref), key)


def read_bronze_messages(path: str, source: str | None = None, from_seq: int = 0,
                         spark=None) -> Iterator[tuple[str, bool, Iterator[tuple[int, int, bytes]]]]:
    """Per source: ``(source, in_stream_at_from_seq, rows)`` with rows ``(seq, lsn, payload)`` in seq order.

    Whether ``from_seq`` falls inside a Stream Start ... Stop block is found from
    the last Stream Start/Stop message before it, so decoding can start anywhere.
    """
    from pyspark.sql import functions as F

    from cdc_apply.spark import spark_session

    spark = spark or spark_session("cdc_apply-inspect")
    bronze = spark.read.format("delta").load(path)
    check_bronze_schema(bronze.schema, path)
    if source is not None:
        bronze = bronze.where(F.col("source") == source)
    sources = [r.source for r in bronze.select("source").distinct().orderBy("source").collect()]
    first_byte = F.substring("payload", 1, 1)
    for name in sources:
        rows = bronze.where(F.col("source") == name)
        last_marker = (rows.where((F.col("seq") < from_seq) & first_byte.isin(_START, _STOP))
                       .orderBy(F.col("seq").desc()).select(first_byte.alias("t")).limit(1).collect())
        in_stream = bool(last_marker) and bytes(last_marker[0].t) == _START
        selected = rows.where(F.col("seq") >= from_seq).select("seq", "lsn", "payload").orderBy("seq")
        yield name, in_stream, ((r.seq, r.lsn, bytes(r.payload)) for r in selected.toLocalIterator())
