"""GaussdbTranscoder: the pgoutput it emits, keys, exclusions, positions, errors and carried state."""

from __future__ import annotations

from dataclasses import replace

import pytest

import cdc_apply.gaussdb.tables as tables_module
from cdc_apply.errors import ConfigError, DecodeError, SchemaError
from cdc_apply.gaussdb import (
    USER_MESSAGE_PREFIX,
    Begin,
    Commit,
    Delete,
    GaussdbTranscoder,
    Heartbeat,
    Insert,
    Update,
    encode_gaussdb,
    parse_timestamp,
)
from cdc_apply.gaussdb.tables import relation_id_for
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import StreamDecoder
from cdc_apply.pgoutput.encoder import encode
from cdc_apply.planning.assemble import assemble_transactions
from cdc_apply.planning.state import SourceState

TS = "2024-05-20 10:00:00.5+08"
ID, V = ("id", 23), ("v", 25)


def row(id_, v):
    return (("id", 23, id_), ("v", 25, v))


def key(id_):
    return (("id", 23, id_),)


def txn(first, *changes, user=None, xid=None, ts=TS, csn=None, begin_xid=None, origin_id=None):
    commit_lsn = first + 0x100
    return [Begin(first, csn if csn is not None else first // 16, first, ts, user, begin_xid, origin_id), *changes,
            Commit(commit_lsn, xid, ts)]


def names(result):
    return [type(o.message).__name__ for o in result.messages]


def test_a_transaction_becomes_begin_relation_insert_commit():
    t = GaussdbTranscoder()
    result = t.transcode(txn(0x1000, Insert(0x1010, "public", "t", row("1", None)), xid=2**32 + 5))
    assert names(result) == ["Begin", "Relation", "Insert", "Commit"]
    begin, rel, ins, commit = result.pgoutput()
    ts = parse_timestamp(TS)
    assert begin == m.Begin(final_lsn=0x1100, commit_ts=ts, xid=5)  # xid truncated to pgoutput's 32 bits
    assert commit == m.Commit(0, 0x1100, 0x1100, ts)
    assert rel == m.Relation(None, relation_id_for("public", "t"), "public", "t", "f",
                             (m.RelationColumn(1, "id", 23, -1), m.RelationColumn(1, "v", 25, -1)))
    assert ins == m.Insert(None, rel.relation_id, ("1", None))
    (info,) = result.transactions
    assert (info.xid, info.csn, info.first_lsn, info.commit_lsn, info.end_lsn, info.commit_ts, info.changes) == (
        2**32 + 5, 0x100, 0x1000, 0x1100, 0x1100, ts, 1)
    assert (info.begin_index, info.commit_index) == (0, 3)
    assert [o.lsn for o in result.messages] == [0x1000, 0x1010, 0x1010, 0x1100]
    for msg in result.pgoutput():  # every message survives the pgoutput wire
        assert StreamDecoder().decode(encode(msg)) == msg


def test_keys_come_from_the_old_tuple():
    t = GaussdbTranscoder()
    t.transcode(txn(0x1000, Insert(0x1010, "public", "t", row("1", "a"))))
    result = t.transcode(txn(0x2000, Update(0x2010, "public", "t", row("1", "b"), key("1")),
                             Update(0x2020, "public", "t", row("2", "b"), key("1")),
                             Delete(0x2030, "public", "t", key("2"))))
    assert names(result) == ["Begin", "Relation", "Update", "Update", "Delete", "Commit"]
    rel, same_key, moved, gone = result.pgoutput()[1:5]
    assert (rel.replica_identity, rel.key_columns) == ("d", ("id",))
    assert same_key == m.Update(None, rel.relation_id, None, None, ("1", "b"))  # 'K' only when the key changes
    assert moved == m.Update(None, rel.relation_id, ("1", None), None, ("2", "b"))
    assert gone == m.Delete(None, rel.relation_id, ("2", None), None)


def test_an_old_tuple_with_every_column_keeps_rows_matched_on_all_values():
    t = GaussdbTranscoder()
    result = t.transcode(txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")),
                             Update(0x1020, "public", "t", row("1", "b"), row("1", "a")),
                             Delete(0x1030, "public", "t", row("1", "b"))))
    assert names(result) == ["Begin", "Relation", "Insert", "Update", "Delete", "Commit"]
    rel, _, upd, dele = result.pgoutput()[1:5]
    assert rel.replica_identity == "f"
    assert upd == m.Update(None, rel.relation_id, None, ("1", "a"), ("1", "b"))
    assert dele == m.Delete(None, rel.relation_id, None, ("1", "b"))


def test_configured_keys_flag_the_relation_and_must_be_in_the_old_tuple():
    t = GaussdbTranscoder(keys={"public.t": ["v"]})
    result = t.transcode(txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")),
                             Update(0x1020, "public", "t", row("1", "b"), row("1", "a"))))
    rel, _, upd = result.pgoutput()[1:4]
    assert (rel.replica_identity, rel.key_columns) == ("d", ("v",))
    assert upd == m.Update(None, rel.relation_id, (None, "a"), None, ("1", "b"))
    with pytest.raises(SchemaError) as info:
        t.transcode(txn(0x2000, Delete(0x2010, "public", "t", key("1"))))
    assert info.value.context["table"] == "public.t" and "lacks configured key column(s) ['v']" in str(info.value)
    with pytest.raises(SchemaError, match="configured key column"):
        GaussdbTranscoder(keys={"public.t": ["nope"]}).transcode(
            txn(0x1000, Insert(0x1010, "public", "t", row("1", "a"))))


@pytest.mark.parametrize("change", [
    Update(0x1020, "public", "t", row("1", "b"), None),
    Delete(0x1020, "public", "t", None),
    Delete(0x1020, "public", "t", ()),
])
@pytest.mark.parametrize("keys", [None, {"public.t": ["id"]}])
def test_a_change_that_cannot_be_keyed_is_an_error_naming_the_table(change, keys):
    t = GaussdbTranscoder(keys=keys)
    t.transcode(txn(0x100, Insert(0x110, "public", "t", row("1", "a"))))
    with pytest.raises(SchemaError) as info:
        t.transcode(txn(0x1000, change))
    assert info.value.context["table"] == "public.t"
    assert info.value.context["lsn"] == "0/1020"


def test_tuples_the_server_could_not_decode_are_errors():
    for change in (Insert(0x1010, "public", "t", ()), Insert(0x1010, "public", "t", None),
                   Update(0x1010, "public", "t", None, key("1"))):
        with pytest.raises(SchemaError, match="public.t"):
            GaussdbTranscoder().transcode(txn(0x1000, change))
    with pytest.raises(SchemaError, match="twice"):
        GaussdbTranscoder().transcode(txn(0x1000, Insert(0x1010, "public", "t", (("a", 23, "1"), ('"a"', 23, "2")))))


def test_column_lists_are_versioned_and_names_unquoted():
    t = GaussdbTranscoder()
    first = t.transcode(txn(0x1000, Insert(0x1010, "s", "t", (('"Mixed ""Q"""', 23, "1"),))))
    assert first.pgoutput()[1].columns[0].name == 'Mixed "Q"'
    same = t.transcode(txn(0x2000, Insert(0x2010, "s", "t", (('"Mixed ""Q"""', 23, "2"),))))
    assert names(same) == ["Begin", "Insert", "Commit"]
    added = t.transcode(txn(0x3000, Insert(0x3010, "s", "t", (('"Mixed ""Q"""', 23, "3"), ("x", 25, None)))))
    retyped = t.transcode(txn(0x4000, Insert(0x4010, "s", "t", (('"Mixed ""Q"""', 20, "4"), ("x", 25, None)))))
    assert [c.name for c in added.pgoutput()[1].columns] == ['Mixed "Q"', "x"]
    assert [c.type_oid for c in retyped.pgoutput()[1].columns] == [20, 25]
    ids = {msg.relation_id for r in (first, added, retyped) for msg in r.pgoutput() if hasattr(msg, "relation_id")}
    assert len(ids) == 1


def test_a_delete_first_describes_the_table_by_its_old_tuple():
    t = GaussdbTranscoder()
    result = t.transcode(txn(0x1000, Delete(0x1010, "public", "t", key("1")),
                             Insert(0x1020, "public", "t", row("2", "b"))))
    assert names(result) == ["Begin", "Relation", "Delete", "Relation", "Insert", "Commit"]
    first, _, second = result.pgoutput()[1:4]
    assert [c.name for c in first.columns] == ["id"] and [c.name for c in second.columns] == ["id", "v"]
    retyped = t.transcode(txn(0x2000, Delete(0x2010, "public", "t", (("id", 20, "2"),))))  # id became int8
    assert [(c.name, c.type_oid) for c in retyped.pgoutput()[1].columns] == [("id", 20), ("v", 25)]
    with pytest.raises(SchemaError, match="cannot be known"):  # names a column no new tuple described, lacks 'v'
        t.transcode(txn(0x3000, Delete(0x3010, "public", "t", (("id", 20, "2"), ("w", 25, None)))))


def test_excluded_users_and_the_user_message():
    t = GaussdbTranscoder(exclude_users=frozenset({"etl"}))
    result = t.transcode(txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")), user="etl")
                         + txn(0x2000, Insert(0x2010, "public", "t", row("2", "a")), user="alice"))
    assert names(result) == ["Begin", "Message", "Relation", "Insert", "Commit"]
    assert result.pgoutput()[1] == m.Message(None, True, 0x2000, USER_MESSAGE_PREFIX, b"alice")
    skipped, kept = result.transactions
    assert (skipped.excluded, skipped.user_name, skipped.begin_index, skipped.changes) == (True, "etl", None, 0)
    assert (kept.excluded, kept.user_name, kept.begin_index, kept.commit_index) == (False, "alice", 0, 4)
    quiet = GaussdbTranscoder(user_messages=False).transcode(txn(0x1000, user="bob"))
    assert names(quiet) == ["Begin", "Commit"] and quiet.transactions[0].user_name == "bob"


def test_a_transaction_spanning_payloads_is_emitted_at_its_commit():
    t = GaussdbTranscoder()
    records = txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")), Insert(0x1020, "public", "t", row("2", "a")))
    assert t.transcode(records[:2]).messages == () and t.pending
    assert t.transcode(records[2:3]).messages == ()
    beat = t.transcode([Heartbeat(0x1500, 0x1600, 1_716_170_400_000)])  # milliseconds, read by magnitude
    assert beat.heartbeats[0].timestamp == parse_timestamp("2024-05-20 02:00:00+00") and t.pending
    last = t.transcode(records[3:])
    assert names(last) == ["Begin", "Relation", "Insert", "Insert", "Commit"] and not t.pending


def test_a_resent_transaction_replaces_what_was_received():
    t = GaussdbTranscoder()
    records = txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")), Insert(0x1020, "public", "t", row("2", "a")))
    t.transcode(records[:2])
    result = t.transcode(records)  # the server starts the transaction over after a reconnect
    assert [msg.new for msg in result.pgoutput() if isinstance(msg, m.Insert)] == [("1", "a"), ("2", "a")]
    t.transcode(records[:1])
    with pytest.raises(DecodeError, match="still open"):
        t.transcode([Begin(0x5000, 9, 0x5000)])


@pytest.mark.parametrize("records, says", [
    ([Commit(0x100)], "Commit without a Begin"),
    ([Insert(0x100, "public", "t", row("1", "a"))], "outside a transaction"),
])
def test_sequence_errors(records, says):
    with pytest.raises(DecodeError, match=says):
        GaussdbTranscoder().transcode(records)


def test_a_failed_call_leaves_the_transcoder_as_it_was():
    t = GaussdbTranscoder()
    t.transcode(txn(0x100, Insert(0x110, "public", "t", row("1", "a"))))
    good = txn(0x1000, Insert(0x1010, "public", "u", row("1", "a")),
               Update(0x1020, "public", "t", row("1", "b"), key("1")))
    before = t.state_json()
    with pytest.raises(SchemaError):
        t.transcode(good[:2] + [Delete(0x1030, "public", "t", None)] + good[-1:])
    assert t.state_json() == before and not t.pending
    assert names(t.transcode(good)) == ["Begin", "Relation", "Insert", "Relation", "Update", "Commit"]


def test_positions_and_timestamps():
    csn = GaussdbTranscoder(commit_position="csn").transcode(txn(0x1000, csn=77))
    assert csn.pgoutput()[0].final_lsn == 77 and csn.pgoutput()[-1] == m.Commit(0, 77, 0x1100, parse_timestamp(TS))
    untimed = GaussdbTranscoder().transcode(txn(0x1000, ts=None))
    assert untimed.pgoutput()[0].commit_ts == 0 and untimed.transactions[0].commit_ts is None
    begin_only = GaussdbTranscoder().transcode([Begin(0x10, 1, 0x10, TS), Commit(0x20)])
    assert begin_only.transactions[0].commit_ts == parse_timestamp(TS)
    assert begin_only.pgoutput()[0].xid == 0 and begin_only.transactions[0].xid is None


def test_relation_ids_are_stable_and_collisions_probe_on(monkeypatch):
    assert relation_id_for("public", "t") == relation_id_for("public", "t") != relation_id_for("public.t", "")
    monkeypatch.setattr(tables_module, "relation_id_for", lambda schema, table: 0x7FFFFFFF)
    t = GaussdbTranscoder()
    result = t.transcode(txn(0x1000, Insert(0x1010, "a", "t", row("1", "a")), Insert(0x1020, "b", "t", row("1", "a"))))
    assert [msg.relation_id for msg in result.pgoutput() if isinstance(msg, m.Relation)] == [0x7FFFFFFF, 1]


def test_state_round_trips_through_json_mid_transaction():
    records = (txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")), user="etl")
               + txn(0x2000, Insert(0x2010, "public", "t", row("1", "a")),
                     Update(0x2020, "public", "t", row("1", "b"), key("1")),
                     Delete(0x2030, "public", "t", key("1")), user="alice"))
    options = dict(keys={"public.x": ["id"]}, exclude_users=frozenset({"etl"}))
    whole = GaussdbTranscoder(**options).transcode(records)
    for cut in range(len(records) + 1):
        t = GaussdbTranscoder(**options)
        head = t.transcode(records[:cut])
        resumed = GaussdbTranscoder.from_state_json(t.state_json(), **options)
        tail = resumed.transcode(records[cut:])
        assert head.pgoutput() + tail.pgoutput() == whole.pgoutput(), cut
        unindexed = lambda txns: [replace(x, begin_index=None, commit_index=None) for x in txns]  # noqa: E731
        assert unindexed(head.transactions + tail.transactions) == unindexed(whole.transactions), cut


def test_an_opengauss_transaction_with_default_options_carries_its_xid_to_pgoutput():
    # include-xids is on by default: openGauss writes the xid in Begin ('X' after first_lsn) and in Commit.
    t = GaussdbTranscoder()
    result = t.transcode(txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")), xid=2**32 + 5, begin_xid=2**32 + 5))
    assert names(result) == ["Begin", "Relation", "Insert", "Commit"]
    assert result.pgoutput()[0].xid == 5 and result.transactions[0].xid == 2**32 + 5


def test_the_begin_xid_serves_when_the_commit_has_none():
    result = GaussdbTranscoder().transcode(txn(0x1000, begin_xid=2**32 + 9))
    assert result.pgoutput()[0].xid == 9 and result.transactions[0].xid == 2**32 + 9


def test_a_begin_and_a_commit_naming_different_xids_are_a_decode_error():
    t = GaussdbTranscoder()
    with pytest.raises(DecodeError, match="differs from the Begin's xid 7") as info:
        t.transcode(txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")), xid=8, begin_xid=7))
    assert info.value.context["lsn"] == "0/1100" and not t.pending


def test_a_replication_origin_becomes_an_origin_message_after_begin():
    t = GaussdbTranscoder(user_messages=True)
    result = t.transcode(txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")), user="alice", origin_id=7))
    assert names(result) == ["Begin", "Origin", "Message", "Relation", "Insert", "Commit"]
    assert result.pgoutput()[1] == m.Origin(0, "7")  # openGauss sends the id: no name, no origin commit LSN
    assert result.transactions[0].origin_id == 7
    payloads = [(seq, 0, encode(msg)) for seq, msg in enumerate(result.pgoutput())]
    (decided,) = assemble_transactions(SourceState(), payloads, len(payloads) - 1, source="gauss").committed
    assert (decided.origin, decided.origin_lsn) == ("7", 0)


def test_the_local_origin_0_sends_no_origin_message():
    result = GaussdbTranscoder().transcode(txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")), origin_id=0))
    assert names(result) == ["Begin", "Relation", "Insert", "Commit"]
    assert result.transactions[0].origin_id == 0


def test_an_open_transaction_keeps_its_xid_and_origin_through_the_carried_state():
    records = txn(0x1000, Insert(0x1010, "public", "t", row("1", "a")), xid=2**32 + 5, begin_xid=2**32 + 5,
                  origin_id=3)
    t = GaussdbTranscoder()
    t.transcode(records[:2])
    resumed = GaussdbTranscoder.from_state_json(t.state_json())
    assert resumed.open.begin == records[0]
    assert resumed.transcode(records[2:]).pgoutput() == GaussdbTranscoder().transcode(records).pgoutput()


def test_configuration_is_checked():
    with pytest.raises(ConfigError):
        GaussdbTranscoder(keys={"public.t": "id"})
    with pytest.raises(ConfigError):
        GaussdbTranscoder(keys={"public.t": []})
    with pytest.raises(ConfigError):
        GaussdbTranscoder(commit_position="scn")
    with pytest.raises(ConfigError):
        GaussdbTranscoder(heartbeat_unit="minutes")


def test_transcode_payload_decodes_first():
    payload = encode_gaussdb(txn(0x1000, Insert(0x1010, "public", "t", row("1", "a"))), batch=True)
    assert names(GaussdbTranscoder().transcode_payload(payload)) == ["Begin", "Relation", "Insert", "Commit"]
