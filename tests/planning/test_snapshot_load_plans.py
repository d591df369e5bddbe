"""Which snapshots a batch loads on their own, and the narrowed decode that loads them (no JVM)."""

from __future__ import annotations

import pyarrow as pa

from cdc_apply.decode.changes import decode_batch
from cdc_apply.planning.plan import plan_batch
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.snapshot_loads import find_snapshot_loads
from cdc_apply.planning.state import SourceState
from cdc_apply.testing.stream import StreamBuilder

CONTROL = b"BCRYSEcAKPrbOp"


def _plan(b: StreamBuilder):
    rows = b.rows()
    controls = [(seq, lsn, p) for _, seq, lsn, p in rows if p[:1] in CONTROL or p[:1] == b"M"]
    history = SchemaHistory()
    plan = plan_batch({b.source: (SourceState(), history, controls, rows[-1][1])}, lambda *a: {})
    return plan, {b.source: history}, rows


def _arrow(rows) -> pa.RecordBatch:
    source, seq, lsn, payload = zip(*rows)
    return pa.RecordBatch.from_arrays([pa.array(source), pa.array(seq, pa.int64()), pa.array(lsn, pa.int64()),
                                       pa.array(payload, pa.binary())], names=["source", "seq", "lsn", "payload"])


def test_a_committed_snapshot_is_found_with_its_blocks_its_slot_and_its_point():
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 0, "v": "before"})
    c = b.snapshot(t, [{"id": i, "v": f"r{i}"} for i in range(5)], chunk_rows=2)
    with b.transaction() as tx:
        tx.insert(t, {"id": 9, "v": "after"})
    plan, histories, rows = _plan(b)
    [load] = find_snapshot_loads(plan, histories, lambda source, rid: True)
    assert (load.source, load.relation_id, load.commit_lsn, load.txn) == ("src", t.oid, c, 1)
    assert len(load.ranges) == 3                       # one stream block per chunk of two rows
    inserts = [r for r in rows if load.holds(r[1]) and r[3][:1] == b"I"]
    assert len(inserts) == 5
    assert plan.decode.slots[load.slot].relation_id == t.oid
    assert not any(load.holds(r[1]) for r in rows[:4] + rows[-3:])   # the transactions around it


def test_a_key_range_chunks_load_knows_its_longest_insert_payload_from_the_marker():
    from cdc_apply.pgoutput.snapshot import KeyRange

    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    b.snapshot(t, [{"id": i, "v": "x" * i} for i in range(1, 8)], chunk_rows=3, key_range=KeyRange("id", None, 8, 7))
    plan, histories, rows = _plan(b)
    [load] = find_snapshot_loads(plan, histories, lambda source, rid: True)
    longest = max(len(r[3]) for r in rows if load.holds(r[1]) and r[3][:1] == b"I")
    assert load.key_range is not None and load.key_range.widest == longest


def test_the_narrowed_plan_decodes_a_snapshots_rows_as_the_batchs_own_plan_does():
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int8", True), ("v", "text", False), ("n", "numeric", False)])
    b.snapshot(t, [{"id": i, "v": f"r{i}", "n": f"{i}.5"} for i in range(7)], chunk_rows=3)
    plan, histories, rows = _plan(b)
    [load] = find_snapshot_loads(plan, histories, lambda source, rid: True)
    inserts = _arrow([r for r in rows if load.holds(r[1]) and r[3][:1] == b"I"])
    whole = pa.Table.from_batches(list(decode_batch(inserts, plan.decode)))
    alone = pa.Table.from_batches(list(decode_batch(inserts, load.decode)))
    pooled_whole = [f"new_{p}" for p in _pooled(plan.decode, load.slot)]
    pooled_alone = [f"new_{p}" for p in _pooled(load.decode, 0)]
    for a, w in zip(pooled_alone, pooled_whole):
        assert alone.column(a).to_pylist() == whole.column(w).to_pylist()
    for column in ("seq", "commit_lsn", "commit_ts", "xid", "op"):
        assert alone.column(column).to_pylist() == whole.column(column).to_pylist()


def _pooled(decode, slot):
    from cdc_apply.planning.decode_plan import pool_columns

    return pool_columns(decode).columns[slot]


def test_snapshots_of_unwanted_tables_and_snapshots_without_a_relation_of_their_own_are_left_to_the_decode():
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True)])
    u = b.relation("public", "u", [("id", "int4", True)])
    b.snapshot(t, [[1], [2]])
    b.snapshot(u, [[3]])
    plan, histories, _ = _plan(b)
    assert [load.relation_id for load in find_snapshot_loads(plan, histories, lambda s, rid: rid == u.oid)] == [u.oid]
    assert find_snapshot_loads(plan, histories, lambda s, rid: False) == ()


def test_a_snapshot_whose_rows_span_two_versions_of_its_relation_is_left_to_the_decode():
    from dataclasses import replace

    from cdc_apply.pgoutput import messages as m
    from cdc_apply.pgoutput.snapshot import SNAPSHOT_XID, snapshot_head

    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True)])
    wider = b.relation("public", "t", [("id", "int4", True), ("extra", "int4", False)], oid=t.oid, emit=False)
    for message in snapshot_head(t.message, 0x7000000):
        b.emit(message)
    b.emit(m.Insert(SNAPSHOT_XID, t.oid, t.tuple_of([1])))
    b.emit(m.StreamStop())
    b.emit(m.StreamStart(SNAPSHOT_XID, False))
    b.emit(replace(wider.message, xid=SNAPSHOT_XID))   # the table changed under the copy
    b.emit(m.Insert(SNAPSHOT_XID, t.oid, wider.tuple_of([2, 3])))
    b.emit(m.StreamStop())
    b.emit(m.StreamCommit(SNAPSHOT_XID, 0, 0x7000000, 0x7000000, 0))
    plan, histories, _ = _plan(b)
    assert [txn.xid for txn in plan.sources["src"].committed] == [SNAPSHOT_XID]
    assert find_snapshot_loads(plan, histories, lambda s, rid: True) == ()


def test_a_loads_taken_ranges_leave_out_unread_seqs_and_join_gaps_of_controls_and_held_rows_only():
    from cdc_apply.planning.snapshot_loads import taken_ranges

    blocks = ((10, 20), (22, 30), (40, 50))        # 21: a Stream Stop/Start seq; 31-39 another txn's rows
    assert taken_ranges(blocks, 10, unread=(11, 13), joins={21, 35}) == ((10, 10), (12, 12), (14, 30), (40, 50))
    assert taken_ranges(blocks, 10, unread=(), joins=set(range(31, 40)) | {21}) == ((10, 50),)


def test_a_loads_taken_ranges_start_at_the_first_seq_the_control_scan_read():
    from cdc_apply.planning.snapshot_loads import taken_ranges

    assert taken_ranges(((10, 20), (22, 30)), 15, unread=(14, 25), joins={21}) == ((15, 24), (26, 30))
    assert taken_ranges(((10, 20),), 25, unread=(), joins=set()) == ()


def test_a_loads_decode_returns_only_an_inserts_columns_and_fails_on_a_row_that_is_no_insert():
    import pytest

    from cdc_apply.decode.snapshot_rows import decode_snapshot_rows, insert_columns
    from cdc_apply.errors import DecodeError
    from cdc_apply.pgoutput import messages as m
    from cdc_apply.pgoutput.encoder import encode

    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int8", True), ("v", "text", False)])
    b.snapshot(t, [{"id": i, "v": f"r{i}"} for i in range(6)], chunk_rows=3)
    plan, histories, rows = _plan(b)
    [load] = find_snapshot_loads(plan, histories, lambda source, rid: True)
    inserts = [r for r in rows if load.holds(r[1]) and r[3][:1] == b"I"]
    columns = insert_columns(load.decode)
    [out] = list(decode_snapshot_rows([_arrow(inserts)], load.decode, columns))
    assert out.schema.names == list(columns) and "old_0" not in columns
    assert out.column("new_0").to_pylist() == list(range(6)) and set(out.column("op").to_pylist()) == {"I"}
    source, seq, lsn, _ = inserts[4]
    stray = inserts[:4] + [(source, seq, lsn, encode(m.Update(2, t.oid, None, None, t.tuple_of({"id": 4, "v": "x"}))))]
    with pytest.raises(DecodeError, match=rf"not an Insert of its relation.*message_type=Update.*seq={seq}\b"):
        list(decode_snapshot_rows([_arrow(stray)], load.decode, columns))
