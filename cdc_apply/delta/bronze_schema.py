"""The bronze table: one row per pgoutput message (the public contract).

| column    | type               | meaning                                                  |
|-----------|--------------------|----------------------------------------------------------|
| source    | STRING NOT NULL    | name of the change stream (one replication slot)         |
| seq       | BIGINT NOT NULL    | position in the source's stream; strictly increasing     |
| lsn       | BIGINT NOT NULL    | LSN the server reported with the message                 |
| payload   | BINARY NOT NULL    | the message bytes, starting with its type byte           |
| landed_at | TIMESTAMP          | when it was written (optional)                           |

Order only by ``seq``: LSNs are neither unique nor monotonic across transactions.

The columns are listed once (:data:`COLUMNS`); the SQL text (:data:`BRONZE_DDL`), the Arrow schema
the lander writes Parquet with (:data:`ARROW_SCHEMA`) and Spark's (:func:`spark_schema`) are derived
from them. Importing this module imports no Spark: the lander writes bronze with pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from cdc_apply.errors import ConfigError

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables


@dataclass(frozen=True)
class BronzeColumn:
    """One column of the bronze contract; a NOT NULL column is one every bronze table must have."""

    name: str
    sql_type: str          # as Spark SQL spells it
    arrow_type: pa.DataType
    nullable: bool


COLUMNS = (
    BronzeColumn("source", "STRING", pa.string(), False),
    BronzeColumn("seq", "BIGINT", pa.int64(), False),
    BronzeColumn("lsn", "BIGINT", pa.int64(), False),
    BronzeColumn("payload", "BINARY", pa.binary(), False),
    BronzeColumn("landed_at", "TIMESTAMP", pa.timestamp("us", tz="UTC"), True),
)

BRONZE_DDL = ", ".join(f"{c.name} {c.sql_type}" + ("" if c.nullable else " NOT NULL") for c in COLUMNS)
# The columns a bronze table must have, with their types as Spark's ``simpleString`` shows them.
REQUIRED_COLUMNS = {c.name: c.sql_type.lower() for c in COLUMNS if not c.nullable}
ARROW_SCHEMA = pa.schema([pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in COLUMNS])


def spark_schema():
    """The bronze columns as Spark's ``StructType`` (pyspark is imported here, not with the module)."""
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType, TimestampType

    types = {"STRING": StringType, "BIGINT": LongType, "BINARY": BinaryType, "TIMESTAMP": TimestampType}
    return StructType([StructField(c.name, types[c.sql_type](), c.nullable) for c in COLUMNS])


def create_bronze_table(tables: SparkTables, path: str) -> None:
    """Create an empty bronze table at ``path`` unless one exists (idempotent)."""
    from cdc_apply.delta.refs import TableRef

    ref = TableRef(path=path)
    if tables.exists(ref):
        check_bronze_schema(tables.read(ref).schema, path)
        return
    text = (f"CREATE TABLE IF NOT EXISTS {ref.sql} ({BRONZE_DDL}) USING delta "
            "TBLPROPERTIES ('delta.appendOnly' = 'true')")
    tables.ensure_table(ref, lambda: tables.spark.sql(text), what="bronze")


def check_bronze_schema(schema, where: str, key: str = "bronze") -> None:
    """Raise :class:`ConfigError` unless ``schema`` has the bronze contract's columns and types."""
    present = {f.name: f.dataType.simpleString() for f in schema.fields}
    for name, kind in REQUIRED_COLUMNS.items():
        if name not in present:
            raise ConfigError(f"bronze table has no column {name!r} (the bronze contract: source STRING, seq "
                              "BIGINT, lsn BIGINT, payload BINARY)", key=key, table=where)
        if present[name] != kind:
            raise ConfigError(f"bronze column {name!r} is {present[name]}, expected {kind}", key=key, table=where)
