"""Hand-written golden vectors (gaussdb_golden.json): decode, encode back, render; and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_apply.errors import DecodeError
from cdc_apply.gaussdb import (
    Begin,
    Commit,
    Delete,
    Heartbeat,
    Insert,
    Update,
    decode_gaussdb_payload,
    encode_gaussdb,
    heartbeat_micros,
    parse_timestamp,
    render_record,
)
from cdc_apply.pgoutput.messages import parse_lsn
from cdc_apply.pgoutput.render import render_timestamp

GOLDEN = json.loads((Path(__file__).parent / "gaussdb_golden.json").read_text(encoding="utf-8"))
VECTORS = {v["name"]: v for v in GOLDEN["vectors"]}
ERRORS = {e["name"]: e for e in GOLDEN["errors"]}


def payload_of(vector: dict) -> bytes:
    return bytes.fromhex("".join(part for part, _ in vector["hex"]))


def _tuple(items):
    return None if items is None else tuple((n, oid, v) for n, oid, v in items)


def record_of(spec: dict):
    kind = spec["type"]
    if kind == "Heartbeat":
        return Heartbeat(parse_lsn(spec["sent_position"]), parse_lsn(spec["flush_position"]), spec["timestamp"])
    lsn = parse_lsn(spec["lsn"])
    if kind == "Begin":
        return Begin(lsn, spec["csn"], parse_lsn(spec["first_lsn"]), spec["commit_ts"], spec["user_name"],
                     spec.get("xid"), spec.get("origin_id"))
    if kind == "Commit":
        return Commit(lsn, spec["xid"], spec["commit_ts"])
    if kind == "Insert":
        return Insert(lsn, spec["schema"], spec["table"], _tuple(spec["new"]))
    if kind == "Update":
        return Update(lsn, spec["schema"], spec["table"], _tuple(spec["new"]), _tuple(spec["old"]))
    return Delete(lsn, spec["schema"], spec["table"], _tuple(spec["old"]))


def encode_as(vector: dict) -> bytes:
    records = [record_of(r) for r in vector["records"]]
    framing = vector["framing"]
    if framing == "single":
        return encode_gaussdb(records, batch=False)
    return encode_gaussdb(records, batch=framing != "heartbeat", end="0" if framing == "batch0" else "F")


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_golden_vector_decodes_to_its_records(name):
    vector = VECTORS[name]
    assert decode_gaussdb_payload(payload_of(vector)) == [record_of(r) for r in vector["records"]]


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_encoder_writes_the_golden_bytes(name):
    assert encode_as(VECTORS[name]).hex() == payload_of(VECTORS[name]).hex()


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_golden_vector_renders_as_json(name):
    for record in decode_gaussdb_payload(payload_of(VECTORS[name])):
        rendered = render_record(record)
        assert json.loads(json.dumps(rendered)) == rendered
        assert rendered["type"] == type(record).__name__


def test_golden_vectors_cover_every_kind_optional_part_and_framing():
    names = set(VECTORS)
    assert {"begin_minimal", "begin_with_timestamp", "begin_with_user", "begin_with_timestamp_and_user",
            "begin_with_xid", "begin_with_xid_timestamp_and_origin", "begin_with_every_part",
            "batch_opengauss_default_transaction",
            "commit_minimal", "commit_with_xid", "commit_with_timestamp", "commit_with_xid_and_timestamp",
            "insert", "update_new_then_old", "update_new_only", "delete_old", "delete_without_tuple",
            "insert_without_tuple", "heartbeat", "batch_begin_insert_commit", "batch_ended_by_zero_length",
            "batch_empty", "batch_cut_inside_a_transaction"} <= names
    parts = "".join(p for v in GOLDEN["vectors"] for p, _ in v["hex"])
    assert "ffffffff" in parts and "00000000" in parts  # NULL and the empty string


def test_timestamps_in_the_vectors_read_as_utc():
    for vector in GOLDEN["vectors"]:
        if "commit_ts_utc" in vector:
            text = vector["records"][0]["commit_ts"]
            assert render_timestamp(parse_timestamp(text)) == vector["commit_ts_utc"]
            assert render_record(record_of(vector["records"][0]))["commit_ts"] == vector["commit_ts_utc"]
    beat = VECTORS["heartbeat"]
    assert render_timestamp(heartbeat_micros(beat["records"][0]["timestamp"])) == beat["heartbeat_utc"]


def test_render_of_an_update_names_everything():
    [record] = decode_gaussdb_payload(payload_of(VECTORS["update_new_then_old"]))
    assert render_record(record) == {
        "type": "Update", "lsn": "0/1000060", "schema": "public", "table": "t",
        "new": [{"name": "id", "type_oid": 23, "value": "1"}, {"name": "v", "type_oid": 25, "value": "b"}],
        "old": [{"name": "id", "type_oid": 23, "value": "1"}],
    }
    [begin] = decode_gaussdb_payload(payload_of(VECTORS["begin_with_timestamp_and_user"]))
    assert render_record(begin) == {
        "type": "Begin", "lsn": "0/1000028", "csn": 300, "first_lsn": "0/1000028", "xid": None,
        "commit_ts": "2024-05-20T02:00:00.500000Z", "commit_ts_text": "2024-05-20 10:00:00.5+08", "origin_id": None,
        "user_name": "alice",
    }
    [begin] = decode_gaussdb_payload(payload_of(VECTORS["begin_with_every_part"]))
    assert (render_record(begin)["xid"], render_record(begin)["origin_id"]) == (4294967301, 7)


def test_an_opengauss_begin_reads_its_xid_timestamp_and_origin_in_the_order_parallel_output_begin_writes():
    # ParallelOutputBegin: length, LSN, 'B', CSN, first_lsn, then 'X' xid, 'T' timestamp, 'O' origin id,
    # the length counting everything after itself.
    ts = b"2024-05-20 10:00:00.5+08"
    body = (bytes.fromhex("0000000001000028") + b"B" + (300).to_bytes(8, "big") + bytes.fromhex("0000000001000028")
            + b"X" + (2**32 + 5).to_bytes(8, "big") + b"T" + len(ts).to_bytes(4, "big") + ts
            + b"O" + (7).to_bytes(4, "big"))
    payload = len(body).to_bytes(4, "big") + body + b"F"
    assert len(body) == 25 + 9 + 29 + 5
    expected = Begin(0x1000028, 300, 0x1000028, ts.decode(), None, xid=2**32 + 5, origin_id=7)
    assert decode_gaussdb_payload(payload) == [expected]
    assert encode_gaussdb([expected], batch=False) == payload


def test_a_user_name_before_the_origin_decodes_as_after_it():
    # Where a server sending both puts GaussDB's 'N' relative to openGauss's 'O' is written down nowhere.
    after = payload_of(VECTORS["begin_with_every_part"])
    origin, user = bytes.fromhex("4f00000007"), bytes.fromhex("4e00000005616c696365")
    before = after.replace(origin + user, user + origin)
    assert before != after
    assert decode_gaussdb_payload(before) == decode_gaussdb_payload(after)


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_malformed_payload_is_a_decode_error_with_its_offset(name):
    case = ERRORS[name]
    with pytest.raises(DecodeError) as info:
        decode_gaussdb_payload(payload_of(case))
    assert case["says"] in str(info.value)
    assert info.value.context["offset"] == case["offset"], str(info.value)
