from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import messages  # noqa: E402  (tests/pgoutput is on sys.path under pytest's rootdir mode)

from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    Delete,
    Insert,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamDecoder,
    StreamStart,
    StreamStop,
    Truncate,
    Update,
    decode_message,
    encode,
)

STREAM_ABORT_SHORT = 9  # 'A', Int32 xid, Int32 subxid
STREAMED = {"Relation", "Type", "Insert", "Update", "Delete", "Truncate", "Message"}


def _in_stream(message) -> bool:
    return type(message).__name__ in STREAMED and getattr(message, "xid", None) is not None


@settings(max_examples=600, print_blob=True)
@given(messages())
def test_every_message_survives_encode_then_decode(message):
    assert decode_message(encode(message), in_stream=_in_stream(message)) == message


@settings(max_examples=300, print_blob=True)
@given(messages(), st.data())
def test_every_strict_prefix_of_a_message_is_a_decode_error(message, data):
    payload = encode(message)
    if len(payload) == 1 and payload == b"E":
        return
    cut = data.draw(st.integers(0, len(payload) - 1))
    if isinstance(message, StreamAbort) and message.abort_lsn is not None and cut == STREAM_ABORT_SHORT:
        # Protocol 4's parallel Stream Abort extends the protocol 2-3 layout: its first 9 bytes are
        # that whole message, which is what they must decode as.
        assert decode_message(payload[:cut]) == StreamAbort(message.xid, message.subxid)
        return
    with pytest.raises(DecodeError):
        decode_message(payload[:cut], in_stream=_in_stream(message))


@settings(max_examples=300, print_blob=True)
@given(messages(), st.binary(min_size=1, max_size=3))
def test_trailing_bytes_are_a_decode_error_naming_the_offset(message, extra):
    payload = encode(message)
    with pytest.raises(DecodeError) as info:
        decode_message(payload + extra, in_stream=_in_stream(message))
    assert info.value.context["offset"] >= 1


def test_unknown_message_type_names_the_byte():
    with pytest.raises(DecodeError, match=r"unknown message type 'Z' \(0x5a\)"):
        decode_message(b"Z\x00\x00")


def test_unknown_tuple_kind_is_an_error_not_a_skipped_column():
    payload = bytearray(encode(Insert(None, 16384, ("1", "2"))))
    second_kind = payload.index(b"t", payload.index(b"t") + 1)
    payload[second_kind] = ord("x")
    with pytest.raises(DecodeError, match="unknown tuple column kind 'x' for column 1") as info:
        decode_message(bytes(payload))
    assert info.value.context == {"message_type": "Insert", "offset": second_kind}


def test_update_with_key_tuple_keeps_key_and_new_apart():
    update = Update(None, 7, key=("1",), old=None, new=("2", UNCHANGED_TOAST))
    decoded = decode_message(encode(update))
    assert decoded.key == ("1",) and decoded.old is None and decoded.new == ("2", UNCHANGED_TOAST)


def test_delete_without_key_or_old_tuple_is_rejected():
    payload = encode(Delete(None, 7, key=("1",), old=None)).replace(b"K", b"N", 1)
    with pytest.raises(DecodeError, match="expected tuple marker 'K' or 'O', got 'N'"):
        decode_message(payload)


def test_stream_abort_length_tells_protocol_2_from_4():
    assert decode_message(encode(StreamAbort(9, 10))).abort_lsn is None
    v4 = decode_message(encode(StreamAbort(9, 10, 123, 456)))
    assert (v4.abort_lsn, v4.abort_ts) == (123, 456)


def test_truncate_option_bits_name_cascade_and_restart_identity():
    t = decode_message(encode(Truncate(None, 3, (1, 2))))
    assert t.cascade and t.restart_identity and t.relation_ids == (1, 2)


def test_stream_decoder_reads_xids_only_inside_stream_blocks():
    rel = Relation(None, 5, "public", "t", "d", (RelationColumn(1, "id", 23, -1),))
    rel_streamed = Relation(77, 5, "public", "t", "d", (RelationColumn(1, "id", 23, -1),))
    stream = [encode(rel), encode(StreamStart(77, True)), encode(rel_streamed),
              encode(Insert(77, 5, ("1",))), encode(StreamStop()), encode(Insert(None, 5, ("2",)))]
    decoder = StreamDecoder()
    decoded = [decoder.decode(p) for p in stream]
    assert decoded[2] == rel_streamed
    assert decoded[3].xid == 77 and decoded[5].xid is None
    assert not decoder.in_stream


def test_nested_stream_start_is_an_error():
    decoder = StreamDecoder()
    decoder.decode(encode(StreamStart(1, True)))
    with pytest.raises(DecodeError, match="inside an open stream block"):
        decoder.decode(encode(StreamStart(2, True)))


def test_invalid_utf8_in_text_value_names_its_offset():
    payload = encode(Insert(None, 1, ("ok", "x")))
    bad = payload[:-1] + b"\xff"
    with pytest.raises(DecodeError, match="not valid UTF-8") as info:
        decode_message(bad)
    assert info.value.context["offset"] == len(payload) - 1


def test_begin_decodes_fields_in_documented_order():
    assert decode_message(bytes.fromhex("4200000000016f43e8000303d48cefc84a000002f2")) == Begin(
        final_lsn=0x16F43E8, commit_ts=0x303D48CEFC84A, xid=754)
