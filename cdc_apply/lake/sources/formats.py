"""Source formats: how the pipeline reads one bronze source as a sequence of pgoutput messages.

Every source's bronze rows become pgoutput messages numbered by seq before anything is planned; the
planning core, the decode stage and the MERGE see nothing else. A format says:

* ``messages`` — its sources' messages as ``(source, seq, lsn, payload)`` rows;
* ``prepare`` — what it needs before a batch reads them (``Prepared``: the newest seq to apply, the
  state to carry, what the transcoding learned);
* ``bronze_seq`` — how far into bronze's own seqs a source is applied (the lag counts from there);
* ``freshness`` — the newest source time known beyond the last commit (GaussDB heartbeats).

``pgoutput`` rows are the messages themselves. ``gaussdb`` rows are transcoded
(:mod:`cdc_apply.lake.sources.gaussdb_format`) into an internal table of pgoutput messages with seqs of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol

from cdc_apply.config import Config
from cdc_apply.delta.ddl import create_table
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.sources.gaussdb_format import EXPANDED_DDL, expand_gaussdb, expanded_ref
from cdc_apply.planning.state import SourceState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables

COLUMNS = ("source", "seq", "lsn", "payload")


@dataclass(frozen=True)
class Prepared:
    """What a source's format prepared for one batch."""

    last_seq: int                        # the newest message seq the batch applies
    format_state: str | None = None      # carried to the next batch (None: the format keeps none)
    users: dict[int, str] = field(default_factory=dict)   # commit LSN -> user name (GaussDB)
    heartbeat_ts: int | None = None      # unix microseconds of the newest heartbeat


class SourceFormat(Protocol):
    name: str
    counts_bronze_rows: bool

    def messages(self, spark: SparkSession, bronze: TableRef): ...

    def prepare(self, spark: SparkSession, bronze: TableRef, source: str, state: SourceState, to_bronze_seq: int,
                version: int) -> Prepared: ...

    def bronze_seq(self, state: SourceState) -> int: ...

    def freshness(self, prepared: Prepared) -> datetime | None: ...


class PgoutputFormat:
    """Bronze rows are pgoutput messages: read as they are."""

    name = "pgoutput"
    counts_bronze_rows = True   # message seqs are bronze seqs: the bronze contract counts its rows

    def __init__(self, other_sources: frozenset[str] = frozenset()) -> None:
        self.other_sources = sorted(other_sources)   # bronze sources of other formats

    def messages(self, spark: SparkSession, bronze: TableRef):
        from pyspark.sql import functions as F

        df = bronze.read(spark)
        return df.where(~F.col("source").isin(self.other_sources)).select(*COLUMNS) if self.other_sources else df

    def prepare(self, spark: SparkSession, bronze, source, state, to_bronze_seq, version) -> Prepared:
        return Prepared(to_bronze_seq, state.format_state)

    def bronze_seq(self, state: SourceState) -> int:
        return state.applied_seq

    def freshness(self, prepared: Prepared) -> datetime | None:
        return None


class GaussdbFormat:
    """GaussDB / openGauss binary decode-style rows, transcoded into pgoutput messages."""

    name = "gaussdb"
    counts_bronze_rows = False  # message seqs are the transcoding's own

    def __init__(self, config: Config) -> None:
        self.config = config

    def create_tables(self, tables: SparkTables) -> None:
        create_table(tables, expanded_ref(self.config), EXPANDED_DDL, {"delta.appendOnly": "true"},
                     comment=f"cdc_apply: pgoutput messages transcoded from GaussDB sources of {self.config.pipeline}")

    def messages(self, spark: SparkSession, bronze: TableRef):
        return expanded_ref(self.config).read(spark).select(*COLUMNS)

    def prepare(self, spark: SparkSession, bronze, source, state, to_bronze_seq, version) -> Prepared:
        done = expand_gaussdb(spark, self.config, bronze, source, state.format_state, to_bronze_seq, version)
        return Prepared(done.last_seq, done.format_state, done.users, done.heartbeat_ts)

    def bronze_seq(self, state: SourceState) -> int:
        # Transcoded messages have seqs of their own; the bronze position is in the format state.
        return int(json.loads(state.format_state)["bronze_seq"]) if state.format_state else state.applied_seq

    def freshness(self, prepared: Prepared) -> datetime | None:
        beat = prepared.heartbeat_ts
        return datetime.fromtimestamp(beat / 1e6, timezone.utc) if beat is not None else None


class SourceFormats:
    """The formats of one pipeline's sources (``[bronze.formats]``; pgoutput unless named)."""

    def __init__(self, config: Config) -> None:
        gaussdb = frozenset(s for s, f in config.formats.items() if f == "gaussdb")
        self._pgoutput = PgoutputFormat(gaussdb)
        self._gaussdb = GaussdbFormat(config) if gaussdb else None
        self._config = config

    def of(self, source: str) -> SourceFormat:
        if self._config.format_of(source) == "gaussdb":
            return self._gaussdb or GaussdbFormat(self._config)
        return self._pgoutput

    def used(self) -> list[SourceFormat]:
        return [self._pgoutput] + ([self._gaussdb] if self._gaussdb else [])

    def create_tables(self, tables: SparkTables) -> None:
        if self._gaussdb is not None:
            self._gaussdb.create_tables(tables)

    def messages(self, spark: SparkSession, bronze: TableRef):
        """Every source's pgoutput messages, ``(source, seq, lsn, payload)``."""
        parts = [f.messages(spark, bronze) for f in self.used()]
        out = parts[0]
        for part in parts[1:]:
            out = out.unionByName(part)
        return out
