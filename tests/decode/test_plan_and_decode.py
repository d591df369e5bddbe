"""Planning a batch: seq ranges per transaction, and the bronze lookups planning needs."""

from __future__ import annotations

from test_changes_equivalence import CHANGE, first_change_seq

from cdc_apply.planning.decode_plan import SKIP
from cdc_apply.planning.plan import plan_batch
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.state import SourceState
from cdc_apply.testing.stream import StreamBuilder


def test_first_changes_of_every_aborted_subtransaction_are_looked_up_once_per_source():
    b = StreamBuilder(source="src")
    users = b.relation("public", "users", [("id", "int4", True), ("name", "text", False)])
    streams = [b.stream(xid=700 + 10 * k) for k in range(3)]
    for k, big in enumerate(streams):          # interleaved blocks, each with an aborted subtransaction
        with big.block() as blk:
            blk.insert(users, {"id": 10 * k, "name": "kept"})
            blk.sub(big.xid + 1).insert(users, {"id": 10 * k + 1, "name": "aborted"})
    for big in streams:
        big.abort(subxid=big.xid + 1)
        with big.block() as blk:
            blk.insert(users, {"id": 0, "name": "after"})
        big.commit()
    rows = b.rows()
    calls = []
    lookup = first_change_seq({"src": rows})

    def counted(source, ranges, subxids):
        calls.append((source, tuple(ranges), tuple(subxids)))
        return lookup(source, ranges, subxids)

    controls = sorted((seq, lsn, payload) for _, seq, lsn, payload in rows if payload[0] not in CHANGE)
    plan = plan_batch({"src": (SourceState(), SchemaHistory(), controls, rows[-1][1])}, counted)
    assert [c[2] for c in calls] == [(701, 711, 721)]
    aborted = {seq for _, seq, _, payload in rows if payload[0] in CHANGE and int.from_bytes(payload[1:5], "big")
               in (701, 711, 721)}
    sp = plan.decode.sources["src"]
    txn_of = {seq: sp.range_txn[sp.locate(seq)] if sp.locate(seq) >= 0 else None
              for _, seq, _, payload in rows if payload[0] in CHANGE}
    assert {seq for seq, txn in txn_of.items() if txn == SKIP} == aborted
    assert None not in txn_of.values()


def test_an_aborted_subtransaction_drops_its_own_later_blocks_but_not_a_block_of_another_transaction_between():
    b = StreamBuilder(source="src")
    users = b.relation("public", "users", [("id", "int4", True), ("name", "text", False)])
    a, other = b.stream(xid=800), b.stream(xid=900)
    with a.block() as blk:
        blk.insert(users, {"id": 1, "name": "kept"})
        blk.sub(801).insert(users, {"id": 2, "name": "aborted"})
    with other.block() as blk:                  # inside a's hole, but another transaction's change
        blk.insert(users, {"id": 3, "name": "other"})
    with a.block() as blk:                      # the subtransaction's changes streamed again before its abort
        blk.sub(801).insert(users, {"id": 4, "name": "aborted"})
    a.abort(subxid=801)
    a.commit()
    other.commit()
    rows = b.rows()
    controls = sorted((seq, lsn, payload) for _, seq, lsn, payload in rows if payload[0] not in CHANGE)
    plan = plan_batch({"src": (SourceState(), SchemaHistory(), controls, rows[-1][1])},
                      first_change_seq({"src": rows}))
    sp = plan.decode.sources["src"]
    committed = [t.xid for t in plan.sources["src"].committed]
    by_id = {}
    for _, seq, _, payload in rows:
        if payload[0] == ord("I"):
            where = sp.locate(seq)
            txn = sp.range_txn[where] if where >= 0 else None
            by_id[len(by_id) + 1] = "skip" if txn == SKIP else None if txn is None else committed[txn]
    assert by_id == {1: 800, 2: "skip", 3: 900, 4: "skip"}


def test_a_snapshot_makes_later_transactions_committed_below_its_lsn_skip_that_relation_only():
    from cdc_apply.pgoutput.snapshot import SNAPSHOT_XID
    from cdc_apply.testing.stream import StreamBuilder

    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True)])
    u = b.relation("public", "u", [("id", "int4", True)])
    with b.transaction() as tx:
        tx.insert(t, [1])
    at = b.snapshot(t, [[1], [2]], lsn=0x5000000)
    with b.transaction(commit_lsn=0x4000000) as tx:   # landed after the snapshot, committed before it
        tx.insert(t, [3])
        tx.insert(u, [3])
    with b.transaction(commit_lsn=0x5000000) as tx:   # at the snapshot's LSN: applies
        tx.insert(t, [4])
    with b.transaction(commit_lsn=0x4800000) as tx:   # cannot happen after one at C; the rule has ended
        tx.insert(t, [5])
    rows = b.rows()
    controls = [(seq, lsn, p) for _, seq, lsn, p in rows if p[:1] != b"I"]
    plan = plan_batch({"src": (SourceState(), SchemaHistory(), controls, rows[-1][1])}, lambda *a: {})
    batch = plan.sources["src"]
    assert [t_.xid for t_ in batch.committed][1] == SNAPSHOT_XID and batch.committed[1].commit_lsn == at
    assert plan.decode.sources["src"].skip_relations == {t.oid: frozenset({2})}
    assert batch.state.snapshot_resets == ()


def test_a_snapshot_rule_still_in_force_at_a_batch_end_is_carried_in_the_state():
    from cdc_apply.testing.stream import StreamBuilder

    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True)])
    b.snapshot(t, [[1]], lsn=0x5000000)
    rows = b.rows()
    controls = [(seq, lsn, p) for _, seq, lsn, p in rows if p[:1] != b"I"]
    plan = plan_batch({"src": (SourceState(), SchemaHistory(), controls, rows[-1][1])}, lambda *a: {})
    state = SourceState.from_json(plan.sources["src"].state.to_json())
    assert state.snapshot_resets == ((t.oid, 0x5000000),)
    with b.transaction(commit_lsn=0x4000000) as tx:
        tx.insert(t, [2])
    more = [(seq, lsn, p) for _, seq, lsn, p in b.rows()[len(rows):] if p[:1] != b"I"]
    later = plan_batch({"src": (state, SchemaHistory(), more, b.rows()[-1][1])}, lambda *a: {})
    assert later.decode.sources["src"].skip_relations == {t.oid: frozenset({0})}
