"""The decode stage's plan and output schema (re-exported by :mod:`cdc_apply.apply.changes`).

Each relation version present gets a *slot*: a struct ``n<k>`` for the new
tuple and ``o<k>`` for the key/old tuple, with fields ``c0, c1, ...`` typed
by the type map. Rows of other slots leave the struct null.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import pyarrow as pa

from cdc_apply.pgoutput.types import ColumnType

SKIP = -1


@dataclass(frozen=True, slots=True)
class Slot:
    """One relation version's place in the output."""

    source: str
    relation_id: int
    version_seq: int
    qualified_name: str
    column_names: tuple[str, ...]
    column_types: tuple[ColumnType, ...]

    def struct_type(self) -> pa.StructType:
        return pa.struct([pa.field(f"c{i}", t.arrow_type) for i, t in enumerate(self.column_types)])

    def spark_ddl(self) -> str:
        return "STRUCT<" + ", ".join(f"c{i}: {t.spark_ddl}" for i, t in enumerate(self.column_types)) + ">"


@dataclass(frozen=True, slots=True)
class SourcePlan:
    """Where each seq of one source belongs, and which relation version decodes it."""

    range_starts: tuple[int, ...]
    range_ends: tuple[int, ...]
    range_txn: tuple[int, ...]  # index into txn_commit_lsn, or SKIP
    range_in_stream: tuple[bool, ...]
    txn_commit_lsn: tuple[int, ...]
    txn_xid: tuple[int, ...]
    txn_commit_ts: tuple[int, ...] = ()   # unix microseconds
    txn_origin: tuple[str | None, ...] = ()
    txn_user: tuple[str | None, ...] = ()  # GaussDB sources: the transaction's user name
    versions: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    # relation_id -> (version seqs ascending, slot index per version)
    ignored: frozenset[int] = frozenset()  # relations left out by the table allow/deny lists

    def locate(self, seq: int) -> int:
        """Index of the range holding ``seq``, or -1."""
        i = bisect.bisect_right(self.range_starts, seq) - 1
        if i >= 0 and seq <= self.range_ends[i]:
            return i
        return -1

    def slot_for(self, relation_id: int, seq: int) -> int | None:
        entry = self.versions.get(relation_id)
        if entry is None:
            return None
        seqs, slots = entry
        i = bisect.bisect_left(seqs, seq)
        return slots[i - 1] if i else None


@dataclass(frozen=True, slots=True)
class DecodePlan:
    sources: dict[str, SourcePlan]
    slots: tuple[Slot, ...]
    quarantine: bool = False


COMMON_FIELDS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("source", pa.string(), "STRING"),
    ("seq", pa.int64(), "BIGINT"),
    ("lsn", pa.int64(), "BIGINT"),
    ("txn", pa.int32(), "INT"),
    ("commit_lsn", pa.int64(), "BIGINT"),
    ("commit_ts", pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    ("origin", pa.string(), "STRING"),
    ("user", pa.string(), "STRING"),
    ("xid", pa.int64(), "BIGINT"),
    ("op", pa.string(), "STRING"),
    ("slot", pa.int32(), "INT"),
    ("old_kind", pa.string(), "STRING"),
    ("toast", pa.list_(pa.int32()), "ARRAY<INT>"),
    ("trunc_relids", pa.list_(pa.int64()), "ARRAY<BIGINT>"),
    ("trunc_options", pa.int32(), "INT"),
    ("msg_transactional", pa.bool_(), "BOOLEAN"),
    ("msg_lsn", pa.int64(), "BIGINT"),
    ("msg_prefix", pa.string(), "STRING"),
    ("msg_content", pa.binary(), "BINARY"),
    ("error", pa.string(), "STRING"),
    ("payload", pa.binary(), "BINARY"),
)


def output_schema(plan: DecodePlan) -> pa.Schema:
    fields = [pa.field(n, t) for n, t, _ in COMMON_FIELDS]
    for k, slot in enumerate(plan.slots):
        fields += [pa.field(f"n{k}", slot.struct_type()), pa.field(f"o{k}", slot.struct_type())]
    return pa.schema(fields)


def output_ddl(plan: DecodePlan) -> str:
    parts = [f"{n} {ddl}" for n, _, ddl in COMMON_FIELDS]
    for k, slot in enumerate(plan.slots):
        parts += [f"n{k} {slot.spark_ddl()}", f"o{k} {slot.spark_ddl()}"]
    return ", ".join(parts)
