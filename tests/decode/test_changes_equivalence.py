"""The vectorised decode stage equals the row-at-a-time one it replaced (kept here as the oracle).

``reference_decode_batch`` is ``cdc_apply.decode.changes.decode_batch`` as it was before the
vectorisation (commit 811df2f), changed in three places only: a DML row the walk rejects is
quarantined with ``op`` = its payload's first byte (it was '\\x00'), like every other error row; a
control message in the change rows is ignored before anything else (the driver owns them; it was
decoded without its stream context); and a null, empty or unknown payload is an error even inside a
skipped range (it was dropped there; a null payload raised a TypeError).
Both must yield the same batches in the same order, and raise the same error (type and text)
after the same batches. Golden captures here; random streams in ``test_changes_properties``.
"""

from __future__ import annotations

import random
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pytest
from golden.loader import list_configs, list_scenarios, load_capture
from golden.oracle import options_for

from cdc_apply.decode import changes
from cdc_apply.decode.changes_rows import _convert  # the stage's own per-column conversion
from cdc_apply.errors import CdcApplyError, DecodeError, SchemaError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.columnar import DmlBatch, walk_dml
from cdc_apply.pgoutput.decoder import decode_message
from cdc_apply.planning.decode_plan import (
    COMMON_FIELDS,
    SKIP,
    DecodePlan,
    Slot,
    SourcePlan,
    output_schema,
    pool_columns,
)
from cdc_apply.planning.plan import plan_batch
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.state import SourceState

CONTROL = frozenset(b"BCORYSEcAbPKrp")
CHANGE = frozenset(b"IUDTM")
CONTROL_KINDS = frozenset(bytes([k]) for k in CONTROL)
CHANGE_KINDS = frozenset(bytes([k]) for k in CHANGE)

# -- the oracle: the row-at-a-time stage ------------------------------------------------------------


class _Rows:
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


def reference_decode_batch(batch: pa.RecordBatch, plan: DecodePlan, schema: pa.Schema | None = None,
                           walk: Callable = walk_dml) -> Iterator[pa.RecordBatch]:
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
            if payload is None:
                raise DecodeError("null payload (the bronze contract says NOT NULL)")
            kind = payload[:1]
            if kind in CONTROL_KINDS:
                continue
            if kind not in CHANGE_KINDS:
                decode_message(payload)
            if splan is None:
                raise SchemaError("no plan for this source")
            where = splan.locate(seq)
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
        except CdcApplyError as err:
            err = err.with_context(**_context(source, seq, lsn))
            if not plan.quarantine:
                raise err from None
            other.add(source=source, seq=seq, lsn=lsn, op=payload[:1].decode("latin-1") if payload else None,
                      error=str(err), payload=payload)
    if len(other):
        yield _common_batch(other, schema)
    if dml_rows:
        yield from _decode_dml(batch, dml_rows, dml_range, sources, seqs, lsns, plan, schema, walk)


def _common_batch(rows: _Rows, schema: pa.Schema) -> pa.RecordBatch:
    n = len(rows)
    arrays = []
    for f in schema:
        if f.name in rows.cols:
            arrays.append(pa.array(rows.cols[f.name], type=f.type))
        else:
            arrays.append(pa.nulls(n, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _decode_dml(batch, rows, ranges, sources, seqs, lsns, plan, schema, walk) -> Iterator[pa.RecordBatch]:
    payloads = batch.column("payload").take(pa.array(rows, type=pa.int64()))
    in_stream = np.array([plan.sources[sources[r]].range_in_stream[w] for r, w in zip(rows, ranges)], dtype=bool)
    walked: DmlBatch = walk(payloads, in_stream)
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
                new, old = int(walked.new_count[i]), int(walked.old_count[i])
                which, got = ("new", new) if new not in (-1, ncols) else ("key/old", old)
                raise SchemaError(f"{which} tuple has {got} columns, Relation {plan.slots[slot].qualified_name} "
                                  f"has {ncols}", relation_id=relation_id)
            by_slot.setdefault(slot, []).append(i)
        except CdcApplyError as err:
            err = err.with_context(**_context(source, seq, lsn))
            if not plan.quarantine:
                raise err from None
            # The one change from the original: op is the payload's first byte ('\x00' for a walk error before).
            errors.add(source=source, seq=seq, lsn=lsn, op=payloads[i].as_py()[:1].decode("latin-1"), error=str(err),
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
    pooled = pool_columns(plan).columns[slot]
    for f in schema:
        kind, _, p = f.name.partition("_")
        if f.name in common.cols:
            arrays.append(pa.array(common.cols[f.name], type=f.type))
        elif kind in ("new", "old") and p.isdigit() and int(p) in pooled:
            struct, j = (new_struct if kind == "new" else old_struct), pooled.index(int(p))
            # The column's values, null wherever the tuple is absent (a take with null indices, not flatten()).
            valid = struct.is_valid().to_pylist()
            arrays.append(struct.field(j).take(pa.array([i if valid[i] else None for i in range(n)], pa.int64())))
        else:
            arrays.append(pa.nulls(n, type=f.type))
    yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _typed_struct(spec: Slot, values, binary, idx: np.ndarray, counts: np.ndarray):
    present = counts[idx] >= 0
    take = pa.array(idx, type=pa.int64())
    children = []
    bad: dict[int, CdcApplyError] = {}
    for c, column_type in enumerate(spec.column_types):
        raw = values[c].take(take) if c < len(values) else pa.nulls(len(idx), pa.binary())
        is_binary = binary[c][idx] if c < len(binary) else np.zeros(len(idx), dtype=bool)
        children.append(_convert(column_type, raw, is_binary, bad, spec.qualified_name, spec.column_names[c]))
    mask = pa.array(~present)
    struct = pa.StructArray.from_arrays(children, fields=list(spec.struct_type()), mask=mask)
    return struct, bad


# -- comparing the two -------------------------------------------------------------------------------

def _nan_safe(arr: pa.Array) -> pa.Array:
    """The array with floats as their bit patterns (Arrow's equals says NaN != NaN), nested too."""
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_floating(arr.type):
        ints = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[arr.type.bit_width]
        return pa.Array.from_buffers(ints, len(arr), arr.buffers(), offset=arr.offset)
    if pa.types.is_struct(arr.type):
        children = [_nan_safe(arr.field(i)) for i in range(arr.type.num_fields)]
        return pa.StructArray.from_arrays(children, [f.name for f in arr.type], mask=mask)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        cls = pa.ListArray if pa.types.is_list(arr.type) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, _nan_safe(arr.values), mask=mask)
    return arr


def outcome(batches: Iterator[pa.RecordBatch]) -> tuple[list[pa.RecordBatch], BaseException | None]:
    """The batches a decode yields, and what it raised after them (None: it finished)."""
    out = []
    try:
        for b in batches:
            out.append(b)
    except Exception as exc:  # noqa: BLE001 - the oracle's TypeError on a null payload counts too
        return out, exc
    return out, None


def assert_same_outcome(got: tuple, want: tuple) -> None:
    (batches, err), (want_batches, want_err) = got, want
    if want_err is None:
        assert err is None, f"unexpected {type(err).__name__}: {err}"
    else:
        assert err is not None, f"expected {type(want_err).__name__}: {want_err}"
        assert (type(err), str(err)) == (type(want_err), str(want_err))
        if isinstance(want_err, CdcApplyError):
            assert err.context == want_err.context
    assert [b.num_rows for b in batches] == [b.num_rows for b in want_batches]
    for b, w in zip(batches, want_batches):
        assert b.schema == w.schema
        b.validate(full=True)
        if b.equals(w):
            continue
        for name in w.schema.names:  # NaN != NaN: compare the bits
            got_col, want_col = _nan_safe(b.column(name)), _nan_safe(w.column(name))
            assert got_col.equals(want_col), (name, got_col, want_col)


def check_batches(batches: list[pa.RecordBatch], plan: DecodePlan) -> tuple[list[pa.RecordBatch], Exception | None]:
    """Decode ``batches`` both ways (as ``decode_batches`` does) and compare; returns the new outcome."""
    schema = output_schema(plan)
    got, want = [], []
    for batch in batches:
        if not batch.num_rows:
            continue
        new = outcome(changes.decode_batch(batch, plan, schema))
        ref = outcome(reference_decode_batch(batch, plan, schema))
        assert_same_outcome(new, ref)
        got += new[0]
        want += ref[0]
        if ref[1] is not None:
            return got, new[1]
    return got, None


def bronze(rows: list[tuple]) -> pa.RecordBatch:
    """Bronze rows ``(source, seq, lsn, payload)`` as a record batch."""
    return pa.record_batch({"source": pa.array([r[0] for r in rows], pa.string()),
                            "seq": pa.array([r[1] for r in rows], pa.int64()),
                            "lsn": pa.array([r[2] for r in rows], pa.int64()),
                            "payload": pa.array([r[3] for r in rows], pa.binary())})


def first_change_seq(rows_by_source: dict[str, list[tuple]]):
    """The pipeline's lookup (min seq of a change row per subxid within the ranges), from bronze rows."""
    def lookup(source, ranges, subxids):
        found: dict[int, int] = {}
        for _, seq, _, payload in sorted(rows_by_source.get(source, []), key=lambda r: r[1]):
            if payload and payload[0] in CHANGE and len(payload) >= 5 and any(a <= seq <= b for a, b in ranges):
                xid = int.from_bytes(payload[1:5], "big")
                if xid in subxids:
                    found.setdefault(xid, seq)
        return found
    return lookup


# -- golden captures ---------------------------------------------------------------------------------

CASES = [(s, c) for s in list_scenarios() for c in list_configs(s)]


def _pipeline(capture_rows: list[tuple], cuts: list[int], quarantine: bool, options) -> Iterator[tuple]:
    """What ``Pipeline.process`` decodes batch by batch: ``(plan, change rows incl. re-read ranges)``."""
    state, history = SourceState(), SchemaHistory()
    lookup = first_change_seq({"src": capture_rows})
    for cut in cuts:
        fresh = [r for r in capture_rows if state.applied_seq < r[1] <= cut]
        controls = sorted((r[1], r[2], r[3]) for r in fresh if r[3][0] in CONTROL)
        plan = plan_batch({"src": (state, history, controls, cut)}, lookup, options, quarantine=quarantine)
        batch = plan.sources["src"]
        reread = [r for r in capture_rows if any(a <= r[1] <= b for a, b in batch.reread)]
        yield plan, [r for r in fresh + reread if r[3][0] in CHANGE]
        state = batch.state


@pytest.mark.parametrize("quarantine", [False, True])
@pytest.mark.parametrize("scenario,config", CASES, ids=[f"{s}-{c}" for s, c in CASES])
def test_golden_captures_decode_the_same(scenario, config, quarantine):
    capture = [("src", msg.seq, msg.lsn, msg.payload) for msg in load_capture(scenario, config)]
    last = capture[-1][1]
    rng = random.Random(f"{scenario}/{config}")
    decoded = 0
    for cuts in ([last], sorted({rng.randrange(last) for _ in range(3)} | {last})):
        for plan, rows in _pipeline(capture, cuts, quarantine, options_for(scenario)):
            if not rows:
                continue
            decoded += sum(b.num_rows for b in check_batches([bronze(rows)], plan.decode)[0])
            # As Spark may hand them: any order, any split, control rows mixed in.
            mixed = rows + rng.sample(capture, min(len(capture), 50))
            rng.shuffle(mixed)
            size = rng.randint(1, 200)
            check_batches([bronze(mixed[i:i + size]) for i in range(0, len(mixed), size)], plan.decode)
    assert decoded > 0


def test_the_oracle_is_not_the_code_under_test():
    assert reference_decode_batch is not changes.decode_batch and "_Decode" in vars(changes)
