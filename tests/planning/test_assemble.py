from __future__ import annotations

import pytest

from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput import messages as m
from cdc_apply.planning.assemble import assemble_transactions, excluded_ranges, merge_ranges
from cdc_apply.planning.state import SourceState
from cdc_apply.testing.stream import StreamBuilder


def _users(b: StreamBuilder):
    return b.relation("public", "users", [("id", "int4", True), ("name", "text", False)])


def _assemble(rows, state=SourceState(), upto=None):
    controls = [(seq, lsn, payload) for _, seq, lsn, payload in rows]
    last = upto if upto is not None else controls[-1][0]
    return assemble_transactions(state, controls, last, source="src")


def test_a_plain_transaction_commits_with_the_range_from_begin_to_commit():
    b = StreamBuilder()
    users = _users(b)
    with b.transaction(xid=900) as tx:
        tx.insert(users, {"id": 1, "name": "a"})
    out = _assemble(b.rows())
    (txn,) = out.committed
    assert (txn.kind, txn.xid, txn.ranges, txn.in_stream) == ("plain", 900, ((1, 3),), False)
    assert txn.commit_lsn == b.messages()[1].final_lsn
    assert out.state.open_txn is None and out.state.applied_seq == 3
    assert [e.message.name for e in out.schema_events] == ["users"]


def test_a_transaction_open_at_the_end_of_a_batch_is_carried_and_committed_later():
    b = StreamBuilder()
    users = _users(b)
    with b.transaction(xid=901) as tx:
        tx.insert(users, {"id": 1, "name": "a"})
        tx.insert(users, {"id": 2, "name": "b"})
    rows = b.rows()
    first = _assemble(rows[:3])
    assert first.committed == () and first.state.open_txn.begin_seq == 1
    assert first.skip_ranges() == ((1, 2),)
    second = _assemble(rows[3:], state=first.state)
    assert second.committed[0].ranges == ((1, 4),)


def test_stream_blocks_interleaved_with_a_plain_transaction_commit_as_one():
    b = StreamBuilder()
    users = _users(b)
    big = b.stream(xid=950)
    with big.block() as blk:
        blk.insert(users, {"id": 1, "name": "a"})
    with b.transaction(xid=951) as tx:
        tx.insert(users, {"id": 2, "name": "b"})
    with big.block() as blk:
        blk.insert(users, {"id": 3, "name": "c"})
    big.commit()
    out = _assemble(b.rows())
    assert [t.xid for t in out.committed] == [951, 950]
    streamed = out.committed[1]
    assert streamed.kind == "streamed" and streamed.in_stream
    assert streamed.ranges == ((1, 3), (7, 9))


def test_stream_abort_of_the_top_level_xid_drops_the_transaction():
    b = StreamBuilder()
    users = _users(b)
    big = b.stream(xid=960)
    with big.block() as blk:
        blk.insert(users, {"id": 1, "name": "a"})
    big.abort()
    out = _assemble(b.rows())
    assert out.committed == () and [t.xid for t in out.aborted] == [960]
    assert out.skip_ranges() == ((1, 3),)


def test_a_subtransaction_abort_excludes_from_its_first_change_to_the_abort():
    b = StreamBuilder()
    users = _users(b)
    big = b.stream(xid=970)
    with big.block() as blk:
        blk.insert(users, {"id": 1, "name": "a"})          # seq 2
        blk.sub(971).insert(users, {"id": 2, "name": "b"})  # seq 3
    big.abort(subxid=971)                                   # seq 5
    with big.block() as blk:
        blk.insert(users, {"id": 3, "name": "c"})
    big.commit()
    (txn,) = _assemble(b.rows()).committed
    assert txn.sub_aborts == ((971, 5),)
    assert excluded_ranges(txn, {971: 3}) == ((3, 4),)  # within its own blocks
    assert excluded_ranges(txn, {}) == ()


def test_a_prepared_transaction_waits_for_commit_prepared_in_a_later_batch():
    b = StreamBuilder()
    users = _users(b)
    with b.prepared_transaction("g1", xid=980) as tx:
        tx.insert(users, {"id": 1, "name": "a"})
    rows = b.rows()
    first = _assemble(rows)
    assert first.committed == () and first.state.prepared[0].gid == "g1"
    b2 = StreamBuilder(start_seq=len(rows), start_lsn=0x2000000)
    b2.commit_prepared("g1", 980)
    second = _assemble(b2.rows(), state=first.state)
    (txn,) = second.committed
    assert (txn.kind, txn.gid, txn.ranges) == ("prepared", "g1", ((1, 3),))
    assert txn.commit_lsn == b2.messages()[0].commit_lsn
    assert second.state.prepared == ()


def test_rollback_prepared_drops_it_and_an_unknown_gid_is_ignored_like_the_apply_worker():
    b = StreamBuilder()
    users = _users(b)
    with b.prepared_transaction("g2", xid=981) as tx:
        tx.insert(users, {"id": 1, "name": "a"})
    b.rollback_prepared("g2", 981)
    b.rollback_prepared("never-seen", 999)
    out = _assemble(b.rows())
    assert out.committed == () and [t.gid for t in out.aborted] == ["g2"]


def test_commit_prepared_without_its_prepare_is_an_error_naming_source_seq_and_lsn():
    b = StreamBuilder()
    b.commit_prepared("lost", 5)
    with pytest.raises(DecodeError, match="whose Prepare is not in bronze") as info:
        _assemble(b.rows())
    assert info.value.context["source"] == "src" and info.value.context["seq"] == 0
    assert info.value.context["lsn"] == m.format_lsn(b.rows()[0][2])


def test_commit_without_begin_is_an_error():
    b = StreamBuilder()
    b.emit(m.Commit(0, 1, 2, 3))
    with pytest.raises(DecodeError, match="Commit without a matching Begin"):
        _assemble(b.rows())


def test_a_restarted_stream_supersedes_the_blocks_received_before():
    b = StreamBuilder()
    users = _users(b)
    first_try = b.stream(xid=990)
    with first_try.block() as blk:
        blk.insert(users, {"id": 1, "name": "a"})
    again = b.stream(xid=990)
    with again.block() as blk:
        blk.insert(users, {"id": 1, "name": "a"})
    again.commit()
    out = _assemble(b.rows())
    assert out.committed[0].ranges == ((4, 6),)
    assert out.aborted[0].ranges == ((1, 3),)


def test_the_carried_state_survives_a_json_round_trip():
    b = StreamBuilder()
    users = _users(b)
    big = b.stream(xid=1000)
    with big.block() as blk:
        blk.insert(users, {"id": 1, "name": "a"})
    big.abort(subxid=1001)
    with b.prepared_transaction("g3", xid=1002) as tx:
        tx.insert(users, {"id": 2, "name": "b"})
    with big.block() as blk:
        blk.insert(users, {"id": 3, "name": "c"})
    state = _assemble(b.rows()[:-1]).state  # ends inside a block
    assert state.in_stream and state.block_start is not None
    assert SourceState.from_json(state.to_json()) == state


def test_merged_ranges_are_sorted_disjoint_and_join_adjacent_ones():
    assert merge_ranges([(10, 12), (1, 3), (4, 6), (5, 8), (20, 20)]) == ((1, 8), (10, 12), (20, 20))
    assert merge_ranges([]) == ()


@pytest.mark.parametrize("config", ["v1", "v2_stream", "v3_twophase", "v4_parallel_binary_twophase"])
def test_relation_messages_a_walsender_sent_with_lsn_0_take_their_transactions_lsn(config):
    from golden.loader import load_capture

    capture = [(msg.seq, msg.lsn, msg.payload) for msg in load_capture("ddl", config)]
    assert any(p[:1] == b"R" and lsn == 0 for _, lsn, p in capture)  # as PostgreSQL sends them
    out = assemble_transactions(SourceState(), capture, capture[-1][0], source="src")
    assert out.schema_events and all(e.lsn > 0 for e in out.schema_events)
    for event in out.schema_events:
        txn = next((t for t in out.committed if any(a <= event.seq <= b for a, b in t.ranges)), None)
        if txn is not None and txn.kind == "plain":
            assert event.lsn == txn.commit_lsn, event.seq


def _three_transactions():
    """Three one-insert transactions; returns the rows and the seqs of the middle one's Begin .. Commit."""
    b = StreamBuilder()
    users = _users(b)
    for i in range(3):
        with b.transaction(xid=700 + i) as tx:
            tx.insert(users, {"id": i, "name": "n"})
    rows = b.rows()
    begins = [r[1] for r in rows if r[3][:1] == b"B"]
    commits = [r[1] for r in rows if r[3][:1] == b"C"]
    return rows, begins[1], commits[1]


def _garble(rows, seq, how):
    return [(s, q, lsn, how(p) if q == seq else p) for s, q, lsn, p in rows]


@pytest.mark.parametrize("what", ["truncated Commit", "garbled Begin", "truncated Begin"])
def test_under_quarantine_a_bad_begin_or_commit_quarantines_exactly_its_transaction(what):
    rows, begin, commit = _three_transactions()
    if what == "truncated Commit":
        rows = _garble(rows, commit, lambda p: p[:-3])
    elif what == "garbled Begin":
        rows = _garble(rows, begin, lambda p: p + b"\x00")
    else:
        rows = _garble(rows, begin, lambda p: p[:4])
    controls = [(seq, lsn, payload) for _, seq, lsn, payload in rows]
    with pytest.raises(DecodeError):
        assemble_transactions(SourceState(), controls, controls[-1][0], source="src")
    out = assemble_transactions(SourceState(), controls, controls[-1][0], source="src", quarantine=True)
    assert [t.xid for t in out.committed] == [700, 702]
    (q,) = out.quarantined
    assert q.ranges == ((begin, commit),) and "bad control message at seq" in q.reason
    (bad,) = out.bad_controls
    assert bad.seq == (commit if what == "truncated Commit" else begin) and "source=src" in bad.error
    assert out.state.open_txn is None and out.state.applied_seq == controls[-1][0]


def test_under_quarantine_a_truncated_relation_quarantines_its_transaction_and_later_ones_apply():
    b = StreamBuilder()
    with b.transaction(xid=800) as tx:
        tx.insert(_users(b), {"id": 1, "name": "a"})
    rows = b.rows()
    relation = next(r[1] for r in rows if r[3][:1] == b"R")
    controls = [(seq, lsn, payload[:9] if seq == relation else payload) for _, seq, lsn, payload in rows]
    out = assemble_transactions(SourceState(), controls, controls[-1][0], source="src", quarantine=True)
    assert out.committed == () and len(out.quarantined) == 1 and out.bad_controls[0].seq == relation


def test_a_transaction_quarantined_before_a_batch_ends_is_quarantined_whole_when_it_commits_later():
    rows, begin, commit = _three_transactions()
    rows = _garble(rows, begin, lambda p: p[:4])
    controls = [(seq, lsn, payload) for _, seq, lsn, payload in rows]
    first = [c for c in controls if c[0] < commit]
    out = assemble_transactions(SourceState(), first, first[-1][0], source="src", quarantine=True)
    assert out.quarantined == () and out.state.open_txn.quarantined
    state = SourceState.from_json(out.state.to_json())
    later = assemble_transactions(state, [c for c in controls if c[0] >= commit], controls[-1][0], source="src",
                                  quarantine=True)
    assert [q.ranges for q in later.quarantined] == [((begin, commit),)] and [t.xid for t in later.committed] == [702]


def test_a_quarantined_prepared_transaction_goes_to_quarantine_at_commit_prepared():
    b = StreamBuilder()
    users = _users(b)
    with b.prepared_transaction("g1", xid=900) as tx:
        tx.insert(users, {"id": 1, "name": "a"})
    b.commit_prepared("g1", 900)
    rows = b.rows()
    begin = next(r[1] for r in rows if r[3][:1] == b"b")
    controls = [(seq, lsn, payload[:6] if seq == begin else payload) for _, seq, lsn, payload in rows]
    out = assemble_transactions(SourceState(), controls, controls[-1][0], source="src", quarantine=True)
    assert out.committed == () and out.state.prepared == ()
    (q,) = out.quarantined
    assert q.ranges[0][0] == begin


def test_a_bad_stream_message_stops_the_source_even_under_quarantine():
    b = StreamBuilder()
    users = _users(b)
    big = b.stream(xid=950)
    with big.block() as blk:
        blk.insert(users, {"id": 1, "name": "a"})
    big.commit()
    rows = b.rows()
    start = next(r[1] for r in rows if r[3][:1] == b"S")
    controls = [(seq, lsn, payload[:3] if seq == start else payload) for _, seq, lsn, payload in rows]
    with pytest.raises(DecodeError):
        assemble_transactions(SourceState(), controls, controls[-1][0], source="src", quarantine=True)
