"""The bronze table: one row per pgoutput message (the public contract).

| column    | type               | meaning                                                  |
|-----------|--------------------|----------------------------------------------------------|
| source    | STRING NOT NULL    | name of the change stream (one replication slot)         |
| seq       | BIGINT NOT NULL    | position in the source's stream; strictly increasing     |
| lsn       | BIGINT NOT NULL    | LSN the server reported with the message                 |
| payload   | BINARY NOT NULL    | the message bytes, starting with its type byte           |
| landed_at | TIMESTAMP          | when it was written (optional)                           |

Order only by ``seq``: LSNs are neither unique nor monotonic across transactions.
"""

from __future__ import annotations

from typing import Iterator

from cdc_apply.errors import ConfigError
from cdc_apply.pgoutput import messages as m

_START, _STOP = m.StreamStart.TYPE.encode(), m.StreamStop.TYPE.encode()

BRONZE_DDL = "source STRING NOT NULL, seq BIGINT NOT NULL, lsn BIGINT NOT NULL, payload BINARY NOT NULL, landed_at TIMESTAMP"
REQUIRED_COLUMNS = {"source": "string", "seq": "bigint", "lsn": "bigint", "payload": "binary"}


def bronze_schema():
    from pyspark.sql.types import (
        BinaryType, LongType, StringType, StructField, StructType, TimestampType,
    )

    return StructType([
        StructField("source", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("lsn", LongType(), False),
        StructField("payload", BinaryType(), False),
        StructField("landed_at", TimestampType(), True),
    ])


def create_bronze_table(spark, path: str) -> None:
    """Create an empty bronze table at ``path`` unless one exists (idempotent)."""
    from delta.tables import DeltaTable

    from cdc_apply.delta.table_create import ensure_table
    from cdc_apply.delta.refs import TableRef

    if DeltaTable.isDeltaTable(spark, path):
        check_bronze_schema(spark.read.format("delta").load(path).schema, path)
        return
    ensure_table(spark, TableRef(path=path), lambda: DeltaTable.createIfNotExists(spark).location(path).addColumns(
        bronze_schema()).property("delta.appendOnly", "true").execute(), what="bronze")


def check_bronze(spark, ref, key: str) -> None:
    """Raise :class:`ConfigError` naming ``key`` unless ``ref`` is a Delta table with the bronze columns."""
    if not ref.exists(spark):
        raise ConfigError("no bronze Delta table there: land into it first (cdc-apply land) or fix the setting",
                          key=key, table=str(ref))
    check_bronze_schema(ref.read(spark).schema, str(ref), key)


def check_bronze_schema(schema, where: str, key: str = "bronze") -> None:
    """Raise :class:`ConfigError` unless ``schema`` has the bronze contract's columns and types."""
    present = {f.name: f.dataType.simpleString() for f in schema.fields}
    for name, kind in REQUIRED_COLUMNS.items():
        if name not in present:
            raise ConfigError(f"bronze table has no column {name!r} (the bronze contract: source STRING, seq "
                              "BIGINT, lsn BIGINT, payload BINARY)", key=key, table=where)
        if present[name] != kind:
            raise ConfigError(f"bronze column {name!r} is {present[name]}, expected {kind}", key=key, table=where)


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
