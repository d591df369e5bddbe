"""The snapshot's pure parts: COPY BINARY rows into Inserts, and what the resume state makes of snapshots
and snapshot requests (no server, no Spark)."""

from __future__ import annotations

import json
import struct

import pytest

from cdc_apply.errors import LandError
from cdc_apply.lander.snapshots.copy_binary import SIGNATURE, TRAILER, insert_payloads
from cdc_apply.lander.snapshots.state import ALL_TABLES, REQUEST_PREFIX, SnapshotState
from cdc_apply.lander.state import OutputTracker, ResumeState
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import decode_message
from cdc_apply.pgoutput.encoder import encode
from cdc_apply.pgoutput.snapshot import SNAPSHOT_XID, snapshot_abort, snapshot_marker


def copy_row(*fields: bytes | None) -> bytes:
    out = struct.pack(">h", len(fields))
    for value in fields:
        out += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    return out


HEADER = SIGNATURE + struct.pack(">ii", 0, 0)
ROWS = [copy_row(b"\x00\x00\x00\x01", b"one", None), copy_row(b"\x00\x00\x00\x02", None, b"2024"),
        copy_row(None, b"", b"x" * 300)]


def test_copy_binary_rows_become_inserts_with_one_kind_byte_per_field_and_bare_nulls():
    parts = [HEADER + ROWS[0], *ROWS[1:], TRAILER]
    payloads = insert_payloads(parts, 4242, b"btb").to_pylist()
    decoded = [decode_message(p, in_stream=True) for p in payloads]
    assert decoded == [m.Insert(SNAPSHOT_XID, 4242, (b"\x00\x00\x00\x01", "one", None)),
                       m.Insert(SNAPSHOT_XID, 4242, (b"\x00\x00\x00\x02", None, b"2024")),
                       m.Insert(SNAPSHOT_XID, 4242, (None, "", b"x" * 300))]
    assert payloads[0] == encode(decoded[0])


def test_copy_rows_that_do_not_come_one_per_message_are_found_field_by_field():
    stream = HEADER + b"".join(ROWS) + TRAILER
    parts = [stream[:7], stream[7:40], stream[40:]]
    assert insert_payloads(parts, 1, b"bbb").to_pylist() == insert_payloads(
        [HEADER + ROWS[0], *ROWS[1:], TRAILER], 1, b"bbb").to_pylist()


def test_a_copy_without_rows_gives_no_inserts_and_a_garbled_one_is_a_land_error():
    assert len(insert_payloads([HEADER + TRAILER], 1, b"b")) == 0
    with pytest.raises(LandError, match="fields"):
        insert_payloads([HEADER + ROWS[0], TRAILER], 1, b"bb")
    with pytest.raises(LandError, match="signature"):
        insert_payloads([b"NOTCOPY" + ROWS[0], TRAILER], 1, b"btb")


def message(prefix: str, content: dict, transactional: bool, xid: int | None = None) -> bytes:
    return encode(m.Message(xid, transactional, 0, prefix, json.dumps(content).encode()))


def feed(state: ResumeState, payloads: list[bytes], source: str = "pg") -> ResumeState:
    tracker = OutputTracker.starting_at(state, source)
    for payload in payloads:
        tracker.add(tracker.last_seq + 1, 77, payload)
    return tracker.state()


BEGIN = encode(m.Begin(1000, 0, 700))
COMMIT = encode(m.Commit(0, 1000, 1010, 0))


def test_a_request_in_a_transaction_is_pending_only_once_the_transaction_commits():
    request = message(REQUEST_PREFIX, {"source": "pg", "tables": ["public.t"]}, True)
    held = feed(ResumeState(), [BEGIN, request])
    assert held.snapshots.pending == () and held.snapshots.held == (("t", ("public.t",)),)
    again = ResumeState.from_json(held.to_json("app", "run"))[1]       # carried across bronze commits
    assert feed(again, [COMMIT]).snapshots.pending == ("public.t",)


def test_requests_of_another_source_are_left_and_unreadable_ones_are_kept_to_be_reported():
    other = message(REQUEST_PREFIX, {"source": "elsewhere", "tables": ["public.t"]}, False)
    broken = encode(m.Message(None, False, 0, REQUEST_PREFIX, b"{not json"))
    by_trigger = message(REQUEST_PREFIX, {"relation_ids": [16400]}, False)
    state = feed(ResumeState(), [other, broken, by_trigger])
    assert len(state.snapshots.pending) == 2
    assert state.snapshots.pending[0].startswith("!") and state.snapshots.pending[1] == 16400


def test_a_request_in_a_prepared_transaction_waits_for_commit_prepared_and_goes_with_rollback():
    request = message(REQUEST_PREFIX, {"tables": ["public.t"]}, True)
    begin = encode(m.BeginPrepare(1000, 1010, 0, 700, "g1"))
    prepare = encode(m.Prepare(0, 1000, 1010, 0, 700, "g1"))
    prepared = feed(ResumeState(), [begin, request, prepare])
    assert prepared.snapshots.pending == () and prepared.snapshots.held == (("pg1", ("public.t",)),)
    assert feed(prepared, [encode(m.CommitPrepared(0, 1100, 1110, 0, 700, "g1"))]).snapshots.pending == ("public.t",)
    assert feed(prepared, [encode(m.RollbackPrepared(0, 1010, 1110, 0, 0, 700, "g1"))]).snapshots == SnapshotState()


def snapshot_stream(relation_id: int, serves: list, lsn: int, end: bytes) -> list[bytes]:
    relation = m.Relation(SNAPSHOT_XID, relation_id, "public", "t", "d", (m.RelationColumn(1, "id", 23, -1),))
    marker = snapshot_marker(relation, lsn)
    marker = m.Message(SNAPSHOT_XID, True, lsn, marker.prefix,
                       json.dumps({**json.loads(marker.content), "serves": serves}).encode())
    return [encode(x) for x in (m.StreamStart(SNAPSHOT_XID, True), marker, relation,
                                m.Insert(SNAPSHOT_XID, relation_id, (b"\0\0\0\1",)), m.StreamStop())] + [end]


def test_a_committed_snapshot_marks_its_table_done_serves_its_requests_and_leaves_resume_lsn_alone():
    state = ResumeState(resume_lsn=500, snapshots=SnapshotState(pending=(ALL_TABLES, "public.t")))
    commit = encode(m.StreamCommit(SNAPSHOT_XID, 0, 9000, 9000, 0))
    opened = feed(state, snapshot_stream(16400, ["public.t", ALL_TABLES], 9000, b"")[:-1])
    assert opened.snapshots.open == (16400, ("public.t", ALL_TABLES)) and opened.streams == ()
    done = feed(opened, [commit])
    assert done.snapshots == SnapshotState(done=(16400,)) and done.resume_lsn == 500
    assert done.last_seq == state.last_seq + 6


def test_an_aborted_snapshot_leaves_its_requests_pending():
    state = ResumeState(snapshots=SnapshotState(pending=("public.t",)))
    aborted = feed(state, snapshot_stream(16400, ["public.t"], 9000, encode(snapshot_abort())))
    assert aborted.snapshots == SnapshotState(pending=("public.t",))


def test_a_repair_request_names_key_ranges_as_entries_that_give_back_their_table_and_range():
    from cdc_apply.lander.snapshots.state import entry_table, parse_range_entry
    from cdc_apply.pgoutput.snapshot import KeyRange

    request = message(REQUEST_PREFIX, {"source": "pg", "tables": ["public.u"], "ranges": [
        {"table": "public.t", "column": "id", "low": None, "high": 60},
        {"table": "public.t", "column": "id", "low": -5, "high": None}]}, False)
    pending = feed(ResumeState(), [request]).snapshots.pending
    assert pending == ("public.u", "public.t#id[,60)", "public.t#id[-5,)")
    assert parse_range_entry(pending[1]) == ("public.t", KeyRange("id", None, 60))
    assert parse_range_entry(pending[2]) == ("public.t", KeyRange("id", -5, None))
    assert [entry_table(e) for e in pending] == ["public.u", "public.t", "public.t"]
    assert parse_range_entry("public.u") is None and parse_range_entry(16400) is None


def test_a_repaired_range_serves_its_request_and_leaves_the_table_done_with_no_copy_to_resume():
    from cdc_apply.pgoutput.snapshot import KeyRange

    entries = ("public.t#id[10,20)", "public.t#id[40,50)")
    state = ResumeState(snapshots=SnapshotState(done=(16400,), pending=entries))
    relation = m.Relation(SNAPSHOT_XID, 16400, "public", "t", "d", (m.RelationColumn(1, "id", 23, -1),))

    def chunk(low, high, serves):
        marker = snapshot_marker(relation, 9000, key_range=KeyRange("id", low, high), serves=serves, repair=True)
        return [encode(x) for x in (m.StreamStart(SNAPSHOT_XID, True), marker, relation, m.StreamStop(),
                                    m.StreamCommit(SNAPSHOT_XID, 0, 9000, 9000, 0))]

    first = feed(state, chunk(10, 20, []))
    assert first.snapshots == SnapshotState(done=(16400,), pending=entries)   # no resume key kept
    assert feed(first, chunk(40, 50, list(entries))).snapshots == SnapshotState(done=(16400,))
