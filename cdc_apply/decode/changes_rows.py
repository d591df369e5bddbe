"""The decode stage's per-row paths: rare rows, errors and the slot structs' conversion.

The vectorised stage (:mod:`cdc_apply.decode.changes`) hands these the rows
it does not take in bulk: everything that is not an Insert/Update/Delete
inside a decided transaction (Truncate, Message, the odd control message,
rows outside any transaction, rows of a source without a plan, null
payloads) and every row that fails. They build today's rows and today's
error text, one row at a time.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_apply.errors import ApplyError, CdcApplyError, DecodeError, SchemaError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import decode_message
from cdc_apply.pgoutput.types import ColumnType
from cdc_apply.pgoutput.values import convert_binary, convert_text
from cdc_apply.planning.decode_plan import COMMON_FIELDS, QUARANTINE, SKIP, DecodePlan, Slot, SourcePlan

_CHANGE_KINDS = frozenset(bytes([t]) for t in m.CHANGE_TYPES)
_CONTROL_KINDS = frozenset(bytes([t]) for t in m.CONTROL_TYPES)


class Rows:
    """Common-column values accumulated for one output batch."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {n: [] for n, _, _ in COMMON_FIELDS}

    def add(self, **values) -> None:
        for name, column in self.cols.items():
            column.append(values.get(name))

    def __len__(self) -> int:
        return len(self.cols["seq"])


def txn_fields(splan: SourcePlan, txn: int) -> dict:
    if txn < 0:
        return {}
    return {"txn": txn, "commit_lsn": splan.txn_commit_lsn[txn],
            "commit_ts": splan.txn_commit_ts[txn] if splan.txn_commit_ts else None,
            "origin": splan.txn_origin[txn] if splan.txn_origin else None,
            "user": splan.txn_user[txn] if splan.txn_user else None}


def context(source: str, seq: int, lsn: int) -> dict:
    return {"source": source, "seq": seq, "lsn": m.format_lsn(lsn)}


def common_batch(rows: Rows, schema: pa.Schema) -> pa.RecordBatch:
    n = len(rows)
    arrays = []
    for f in schema:
        if f.name in rows.cols:
            arrays.append(pa.array(rows.cols[f.name], type=f.type))
        else:
            arrays.append(pa.nulls(n, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def decode_row(plan: DecodePlan, source, seq: int, lsn: int, payload, out: Rows) -> None:
    """One bronze row the bulk path does not take, exactly as the row-at-a-time stage did it.

    Appends a Truncate or Message row (or, under quarantine, an error row) to ``out``; raises the
    row's error otherwise. An Insert/Update/Delete reaching here is outside any transaction or of
    a source without a plan: an error either way.
    """
    splan = plan.sources.get(source)
    try:
        if payload is None:
            raise DecodeError("null payload (the bronze contract says NOT NULL)")
        kind = payload[:1]
        if kind not in _CHANGE_KINDS:
            if kind in _CONTROL_KINDS:
                return  # Relation, Type and the control messages are the driver's: nothing to emit
            decode_message(payload)  # raises: an empty payload or an unknown type byte
        if splan is None:
            raise SchemaError("no plan for this source")
        where = splan.locate(seq)
        if where >= 0 and splan.range_txn[where] == SKIP:
            return
        if where >= 0 and splan.range_txn[where] == QUARANTINE:
            raise ApplyError("not applied: " + splan.quarantine_reasons.get(splan.range_starts[where], "quarantined"))
        if kind and kind[0] in m.DML_TYPES:
            if where < 0:
                raise DecodeError("change outside any transaction", message_type=m.MESSAGE_NAMES[kind.decode()])
            raise AssertionError("an Insert/Update/Delete inside a transaction belongs to the bulk path")
        in_stream = where >= 0 and splan.range_in_stream[where]
        message = decode_message(payload, in_stream)
        if isinstance(message, m.Truncate):
            if where < 0:
                raise DecodeError("Truncate outside any transaction", message_type="Truncate")
            txn = splan.range_txn[where]
            relids = [r for r in message.relation_ids if txn not in splan.skip_relations.get(r, ())]
            if relids:
                out.add(source=source, seq=seq, lsn=lsn, **txn_fields(splan, txn),
                        xid=message.xid if message.xid is not None else splan.txn_xid[txn], op="T",
                        trunc_relids=relids, trunc_options=message.options)
        elif isinstance(message, m.Message):
            if where < 0 and message.transactional:
                raise DecodeError("transactional Message outside any transaction", message_type="Message")
            txn = splan.range_txn[where] if where >= 0 else SKIP
            out.add(source=source, seq=seq, lsn=lsn, **({"txn": SKIP} | txn_fields(splan, txn)),
                    xid=message.xid if message.xid is not None else (splan.txn_xid[txn] if txn >= 0 else None),
                    op="M", msg_transactional=message.transactional, msg_lsn=message.lsn,
                    msg_prefix=message.prefix, msg_content=message.content)
    except CdcApplyError as err:
        err = err.with_context(**context(source, seq, lsn))
        if not plan.quarantine:
            raise err from None
        op = payload[:1].decode("latin-1") if payload else None
        out.add(source=source, seq=seq, lsn=lsn, op=op, error=str(err), payload=payload)


def typed_struct(spec: Slot, values: Sequence[pa.Array], binary: Sequence[np.ndarray], idx: np.ndarray,
                 counts: np.ndarray) -> tuple[pa.StructArray, dict[int, CdcApplyError]]:
    """The slot's struct for rows ``idx`` (null where the tuple is absent) and per-row conversion errors."""
    present = counts[idx] >= 0
    n = len(values[0]) if values else 0
    whole = len(idx) == n and (n == 0 or (idx[0] == 0 and idx[-1] == n - 1))  # idx ascends: it is every row
    take = None if whole else pa.array(idx, type=pa.int64())
    children = []
    bad: dict[int, CdcApplyError] = {}
    for c, column_type in enumerate(spec.column_types):
        if c < len(values):
            raw = values[c] if take is None else values[c].take(take)
            is_binary = binary[c] if take is None else binary[c][idx]
        else:
            raw = pa.nulls(len(idx), pa.binary())
            is_binary = np.zeros(len(idx), dtype=bool)
        children.append(_convert(column_type, raw, is_binary, bad, spec.qualified_name, spec.column_names[c]))
    mask = pa.array(~present)
    struct = pa.StructArray.from_arrays(children, fields=list(spec.struct_type()), mask=mask)
    return struct, bad


def _convert(column_type: ColumnType, raw: pa.Array, is_binary: np.ndarray, bad: dict, table: str,
             column: str) -> pa.Array:
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
            bad.setdefault(i, err.with_context(table=table, column=column))
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
