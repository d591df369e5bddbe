"""Decode change rows (Insert, Update, Delete, Truncate, Message) into typed Arrow batches.

This runs inside Spark's ``mapInArrow`` but imports no Spark: it gets Arrow
record batches of bronze rows and a :class:`DecodePlan` built on the driver,
and yields record batches of :func:`output_schema`. No row depends on another
row: a row's transaction comes from the seq ranges of the plan, its relation
version from the schema history in the plan, so partitions decode in parallel
in any order.

Each relation version present gets a *slot*: a struct ``n<k>`` for the new
tuple and ``o<k>`` for the key/old tuple, with fields ``c0, c1, ...`` typed
by the type map. Rows of other slots leave the struct null.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_apply.errors import CdcApplyError, DecodeError, SchemaError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.columnar import DmlBatch, walk_dml
from cdc_apply.pgoutput.decoder import decode_message
from cdc_apply.pgoutput.types import ColumnType
from cdc_apply.pgoutput.values import convert_binary, convert_text

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


class _Rows:
    """Common-column values accumulated for one output batch."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {n: [] for n, _, _ in COMMON_FIELDS}

    def add(self, **values) -> None:
        for name, column in self.cols.items():
            column.append(values.get(name))

    def __len__(self) -> int:
        return len(self.cols["seq"])


def _txn_fields(splan: SourcePlan, txn: int) -> dict:
    if txn < 0:
        return {}
    return {"txn": txn, "commit_lsn": splan.txn_commit_lsn[txn],
            "commit_ts": splan.txn_commit_ts[txn] if splan.txn_commit_ts else None,
            "origin": splan.txn_origin[txn] if splan.txn_origin else None,
            "user": splan.txn_user[txn] if splan.txn_user else None}


def _context(source: str, seq: int, lsn: int) -> dict:
    return {"source": source, "seq": seq, "lsn": m.format_lsn(lsn)}


def decode_batches(batches: Iterable[pa.RecordBatch], plan: DecodePlan) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: bronze rows in, decoded change rows out."""
    schema = output_schema(plan)
    for batch in batches:
        if batch.num_rows:
            yield from decode_batch(batch, plan, schema)


def decode_batch(batch: pa.RecordBatch, plan: DecodePlan, schema: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
    schema = schema or output_schema(plan)
    sources = batch.column("source").to_pylist()
    seqs = batch.column("seq").to_numpy(zero_copy_only=False)
    lsns = batch.column("lsn").to_numpy(zero_copy_only=False)
    payloads = batch.column("payload")
    other = _Rows()
    dml_rows: list[int] = []
    dml_range: list[int] = []
    for row, (source, seq, lsn) in enumerate(zip(sources, seqs.tolist(), lsns.tolist())):
        splan = plan.sources.get(source)
        payload = payloads[row].as_py()
        try:
            if splan is None:
                raise SchemaError("no plan for this source")
            where = splan.locate(seq)
            kind = payload[:1]
            if where >= 0 and splan.range_txn[where] == SKIP:
                continue
            if kind in (b"I", b"U", b"D"):
                if where < 0:
                    raise DecodeError("change outside any transaction", message_type=m.MESSAGE_NAMES[kind.decode()])
                dml_rows.append(row)
                dml_range.append(where)
                continue
            in_stream = where >= 0 and splan.range_in_stream[where]
            message = decode_message(payload, in_stream)
            if isinstance(message, m.Truncate):
                if where < 0:
                    raise DecodeError("Truncate outside any transaction", message_type="Truncate")
                txn = splan.range_txn[where]
                other.add(source=source, seq=seq, lsn=lsn, **_txn_fields(splan, txn),
                          xid=message.xid if message.xid is not None else splan.txn_xid[txn], op="T",
                          trunc_relids=list(message.relation_ids), trunc_options=message.options)
            elif isinstance(message, m.Message):
                if where < 0 and message.transactional:
                    raise DecodeError("transactional Message outside any transaction", message_type="Message")
                txn = splan.range_txn[where] if where >= 0 else SKIP
                other.add(source=source, seq=seq, lsn=lsn, **({"txn": SKIP} | _txn_fields(splan, txn)),
                          xid=message.xid if message.xid is not None else (splan.txn_xid[txn] if txn >= 0 else None),
                          op="M", msg_transactional=message.transactional, msg_lsn=message.lsn,
                          msg_prefix=message.prefix, msg_content=message.content)
            # Relation, Type and the control messages are the driver's: nothing to emit.
        except CdcApplyError as err:
            err = err.with_context(**_context(source, seq, lsn))
            if not plan.quarantine:
                raise err from None
            other.add(source=source, seq=seq, lsn=lsn, op=payload[:1].decode("latin-1"), error=str(err),
                      payload=payload)
    if len(other):
        yield _common_batch(other, schema)
    if dml_rows:
        yield from _decode_dml(batch, dml_rows, dml_range, sources, seqs, lsns, plan, schema)


def _common_batch(rows: _Rows, schema: pa.Schema) -> pa.RecordBatch:
    n = len(rows)
    arrays = []
    for f in schema:
        if f.name in rows.cols:
            arrays.append(pa.array(rows.cols[f.name], type=f.type))
        else:
            arrays.append(pa.nulls(n, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _decode_dml(batch, rows, ranges, sources, seqs, lsns, plan, schema) -> Iterator[pa.RecordBatch]:
    payloads = batch.column("payload").take(pa.array(rows, type=pa.int64()))
    in_stream = np.array([plan.sources[sources[r]].range_in_stream[w] for r, w in zip(rows, ranges)], dtype=bool)
    walked: DmlBatch = walk_dml(payloads, in_stream)
    errors = _Rows()
    by_slot: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        source, seq, lsn = sources[row], int(seqs[row]), int(lsns[row])
        try:
            if walked.error[i] is not None:
                raise walked.error[i]
            splan = plan.sources[source]
            relation_id = int(walked.relation_id[i])
            if relation_id in splan.ignored:
                continue
            slot = splan.slot_for(relation_id, seq)
            if slot is None:
                raise SchemaError(f"change for relation {relation_id}, which no Relation message described before it",
                                  relation_id=relation_id)
            ncols = len(plan.slots[slot].column_types)
            if walked.new_count[i] not in (-1, ncols) or walked.old_count[i] not in (-1, ncols):
                got = walked.new_count[i] if walked.new_count[i] != -1 else walked.old_count[i]
                if walked.new_count[i] not in (-1, ncols):
                    got = walked.new_count[i]
                raise SchemaError(f"tuple has {got} columns, Relation {plan.slots[slot].qualified_name} has {ncols}",
                                  relation_id=relation_id)
            by_slot.setdefault(slot, []).append(i)
        except CdcApplyError as err:
            err = err.with_context(**_context(source, seq, lsn))
            if not plan.quarantine:
                raise err from None
            errors.add(source=source, seq=seq, lsn=lsn, op=chr(walked.op[i]), error=str(err),
                       payload=payloads[i].as_py())
    if len(errors):
        yield _common_batch(errors, schema)
    for slot, members in by_slot.items():
        yield from _slot_batch(slot, members, rows, ranges, sources, seqs, lsns, walked, plan, schema, payloads)


def _slot_batch(slot, members, rows, ranges, sources, seqs, lsns, walked, plan, schema, payloads):
    spec = plan.slots[slot]
    idx = np.asarray(members, dtype=np.int64)
    new_struct, new_bad = _typed_struct(spec, walked.new_values, walked.new_binary, idx, walked.new_count)
    old_struct, old_bad = _typed_struct(spec, walked.old_values, walked.old_binary, idx, walked.old_count)
    bad = new_bad | old_bad
    if bad:
        if not plan.quarantine:
            i, err = min(bad.items())
            row = rows[int(idx[i])]
            raise err.with_context(**_context(sources[row], int(seqs[row]), int(lsns[row])))
        errors = _Rows()
        for i, err in sorted(bad.items()):
            row = rows[int(idx[i])]
            errors.add(source=sources[row], seq=int(seqs[row]), lsn=int(lsns[row]), op=chr(walked.op[idx[i]]),
                       error=str(err.with_context(**_context(sources[row], int(seqs[row]), int(lsns[row])))),
                       payload=payloads[int(idx[i])].as_py())
        yield _common_batch(errors, schema)
        keep = np.array([i not in bad for i in range(len(idx))], dtype=bool)
        idx = idx[keep]
        new_struct = new_struct.filter(pa.array(keep))
        old_struct = old_struct.filter(pa.array(keep))
        if not len(idx):
            return
    common = _Rows()
    for i in idx.tolist():
        row = rows[i]
        splan = plan.sources[sources[row]]
        txn = splan.range_txn[ranges[i]]
        xid = walked.xid[i]
        common.add(source=sources[row], seq=int(seqs[row]), lsn=int(lsns[row]), **_txn_fields(splan, txn),
                   xid=int(xid) if xid >= 0 else splan.txn_xid[txn],
                   op=chr(walked.op[i]), slot=slot, old_kind=walked.old_kind[i], toast=walked.toast[i])
    arrays = []
    n = len(idx)
    for f in schema:
        if f.name in common.cols:
            arrays.append(pa.array(common.cols[f.name], type=f.type))
        elif f.name == f"n{slot}":
            arrays.append(new_struct)
        elif f.name == f"o{slot}":
            arrays.append(old_struct)
        else:
            arrays.append(pa.nulls(n, type=f.type))
    yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _typed_struct(spec: Slot, values: Sequence[pa.Array], binary: Sequence[np.ndarray], idx: np.ndarray,
                  counts: np.ndarray) -> tuple[pa.StructArray, dict[int, CdcApplyError]]:
    """The slot's struct for rows ``idx`` (null where the tuple is absent) and per-row conversion errors."""
    present = counts[idx] >= 0
    take = pa.array(idx, type=pa.int64())
    children = []
    bad: dict[int, CdcApplyError] = {}
    for c, column_type in enumerate(spec.column_types):
        raw = values[c].take(take) if c < len(values) else pa.nulls(len(idx), pa.binary())
        is_binary = binary[c][idx] if c < len(binary) else np.zeros(len(idx), dtype=bool)
        children.append(_convert(column_type, raw, is_binary, bad, spec.column_names[c]))
    mask = pa.array(~present)
    struct = pa.StructArray.from_arrays(children, fields=list(spec.struct_type()), mask=mask)
    return struct, bad


def _convert(column_type: ColumnType, raw: pa.Array, is_binary: np.ndarray, bad: dict, column: str) -> pa.Array:
    try:
        return _convert_all(column_type, raw, is_binary)
    except CdcApplyError:
        pass
    # Find the offending rows one by one, keep the others.
    out = []
    for i in range(len(raw)):
        one = raw.slice(i, 1)
        try:
            out.append(_convert_all(column_type, one, is_binary[i:i + 1]))
        except CdcApplyError as err:
            bad.setdefault(i, err.with_context(column=column))
            out.append(pa.nulls(1, column_type.arrow_type))
    return pa.concat_arrays(out) if out else pa.nulls(0, column_type.arrow_type)


def _convert_all(column_type: ColumnType, raw: pa.Array, is_binary: np.ndarray) -> pa.Array:
    if not is_binary.any():
        return convert_text(column_type, raw)
    valid = raw.is_valid().to_numpy(zero_copy_only=False)
    if not (valid & ~is_binary).any():
        return convert_binary(column_type, raw)
    mask = pa.array(is_binary)
    as_text = convert_text(column_type, pc.if_else(mask, pa.nulls(len(raw), raw.type), raw))
    as_binary = convert_binary(column_type, pc.if_else(mask, raw, pa.nulls(len(raw), raw.type)))
    return pc.if_else(mask, as_binary, as_text)
