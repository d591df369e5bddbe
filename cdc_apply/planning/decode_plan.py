"""The decode stage's plan and output schema (re-exported by :mod:`cdc_apply.decode.changes`).

Each relation version present gets a *slot*; its columns, typed by the type
map, live in *pooled* output columns ``new_<p>`` (new tuple) and ``old_<p>``
(key/old tuple) that rows of other slots share: a row belongs to one slot, so
slot ``k``'s column ``j`` is pooled column ``Pool.columns[k][j]``, and the
output is as wide as the widest relation (per type, counting every column its
versions in the batch had), not as all of them together. A column keeps its
pooled column across its relation's versions. Pooled columns a row's slot does
not use are null.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import pyarrow as pa

from cdc_apply.pgoutput.types import ColumnType

SKIP = -1
QUARANTINE = -2  # a range of a transaction quarantined whole: its rows become error rows


@dataclass(frozen=True, slots=True)
class Slot:
    """One relation version's place in the output."""

    source: str
    relation_id: int
    version_seq: int
    qualified_name: str
    column_names: tuple[str, ...]
    column_types: tuple[ColumnType, ...]
    # Per column, its lineage id (stable across the relation's versions); () means by position.
    lineage: tuple[int, ...] = ()

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
    quarantine_reasons: dict[int, str] = field(default_factory=dict)  # range start -> why (QUARANTINE ranges)
    # relation_id -> txn indexes whose changes of it are skipped (a snapshot taken after they committed)
    skip_relations: dict[int, frozenset[int]] = field(default_factory=dict)

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


@dataclass(frozen=True, slots=True)
class Pool:
    """Where the slots' columns live in the output (see the module docstring)."""

    types: tuple[ColumnType, ...]          # pooled column p
    columns: tuple[tuple[int, ...], ...]   # slot k, its column j -> pooled column p

    def new(self, slot: int, column: int) -> str:
        return f"new_{self.columns[slot][column]}"

    def old(self, slot: int, column: int) -> str:
        return f"old_{self.columns[slot][column]}"


def pool_columns(plan: DecodePlan) -> Pool:
    """Share output columns between slots. Within a relation, a column keeps one pooled column across
    all its versions (by lineage, while its type stays), so readers of a table need no per-version
    branches; across relations, the k-th such column of a type shares pooled column (type, k).
    Deterministic in the plan's slot order (the driver and every worker agree)."""
    types: list[ColumnType] = []
    by_type: dict[tuple[str, str], list[int]] = {}
    ordinals: dict[tuple, dict[int, int]] = {}   # (source, relation, type) -> lineage -> ordinal
    columns = []
    for slot in plan.slots:
        placed = []
        for t, lin in zip(slot.column_types, slot.lineage or range(len(slot.column_types))):
            key = (str(t.arrow_type), t.spark_ddl)
            seen = ordinals.setdefault((slot.source, slot.relation_id, key), {})
            i = seen.setdefault(lin, len(seen))
            pooled = by_type.setdefault(key, [])
            if i == len(pooled):
                pooled.append(len(types))
                types.append(t)
            placed.append(pooled[i])
        columns.append(tuple(placed))
    return Pool(tuple(types), tuple(columns))


def output_schema(plan: DecodePlan) -> pa.Schema:
    fields = [pa.field(n, t) for n, t, _ in COMMON_FIELDS]
    for p, t in enumerate(pool_columns(plan).types):
        fields += [pa.field(f"new_{p}", t.arrow_type), pa.field(f"old_{p}", t.arrow_type)]
    return pa.schema(fields)


def output_ddls(plan: DecodePlan) -> dict[str, str]:
    """Each output column's Spark type, in output order."""
    types = {n: ddl for n, _, ddl in COMMON_FIELDS}
    for p, t in enumerate(pool_columns(plan).types):
        types.update({f"new_{p}": t.spark_ddl, f"old_{p}": t.spark_ddl})
    return types


def output_ddl(plan: DecodePlan, columns: tuple[str, ...] | None = None) -> str:
    """The decode's output as Spark DDL; ``columns``: only those, in that order."""
    types = output_ddls(plan)
    return ", ".join(f"{n} {types[n]}" for n in (types if columns is None else columns))
