"""walk_dml (vectorised) equals walk_dml_reference (the reference decoder, message by message)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from golden.loader import list_configs, list_scenarios, load_capture
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import column_value, deletes, names, tuples, u32, updates

from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput import UNCHANGED_TOAST, Delete, Insert, Update, columnar, decode_message, encode
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.columnar import DmlBatch, walk_dml, walk_dml_reference


def assert_same(fast: DmlBatch, ref: DmlBatch) -> None:
    n = len(ref.op)
    for name in ("op", "relation_id", "xid", "new_count", "old_count"):
        got, want = getattr(fast, name), getattr(ref, name)
        assert got.dtype == want.dtype and got.shape == (n,), name
        assert np.array_equal(got, want), (name, got, want)
    assert fast.old_kind == ref.old_kind
    assert fast.toast == ref.toast
    assert [None if e is None else (type(e), str(e)) for e in fast.error] == \
           [None if e is None else (type(e), str(e)) for e in ref.error]
    for side in ("new", "old"):
        values, want_values = getattr(fast, f"{side}_values"), getattr(ref, f"{side}_values")
        binary, want_binary = getattr(fast, f"{side}_binary"), getattr(ref, f"{side}_binary")
        assert len(values) == len(want_values) == len(binary) == len(want_binary)
        for c, (got, want) in enumerate(zip(values, want_values)):
            assert got.type == pa.binary() and len(got) == n
            got.validate(full=True)
            assert got.equals(want), (side, c, got.to_pylist(), want.to_pylist())
            assert binary[c].dtype == bool and np.array_equal(binary[c], want_binary[c]), (side, c)


def check(payloads: list, in_stream: list[bool]) -> DmlBatch:
    arr = pa.array(payloads, pa.binary())
    flags = np.array(in_stream, dtype=bool)
    fast = walk_dml(arr, flags)
    assert_same(fast, walk_dml_reference(arr, flags))
    return fast


# -- random DML streams from the encoder ------------------------------------------------

@st.composite
def fixed_width_tuples(draw, width):
    return tuple(draw(st.lists(column_value, min_size=width, max_size=width)))


@st.composite
def dml(draw, width=None):
    """(message, in_stream): Insert/Update/Delete with random tuples, an Xid exactly when in a stream block."""
    in_stream = draw(st.booleans())
    xid = draw(u32) if in_stream else None
    tup = tuples if width is None else fixed_width_tuples(width)
    kind = draw(st.sampled_from("IUUDD"))
    relation = draw(st.sampled_from([16384, 16390, 2**32 - 1, 0]))
    if kind == "I":
        return Insert(xid, relation, draw(tup)), in_stream
    which = draw(st.sampled_from(["none", "key", "old"] if kind == "U" else ["key", "old"]))
    key = draw(tup) if which == "key" else None
    old = draw(tup) if which == "old" else None
    if kind == "U":
        return Update(xid, relation, key, old, draw(tup)), in_stream
    return Delete(xid, relation, key, old), in_stream


@st.composite
def streams(draw):
    """A batch mixing shapes: some of one fixed width (the common case), some of any width."""
    width = draw(st.integers(0, 9))
    items = draw(st.lists(st.one_of(dml(width), dml()), min_size=1, max_size=40))
    return [encode(msg) for msg, _ in items], [flag for _, flag in items]


@settings(max_examples=300, print_blob=True, deadline=None)
@given(streams())
def test_walk_equals_reference_on_random_dml(stream):
    payloads, in_stream = stream
    check(payloads, in_stream)


@settings(max_examples=150, print_blob=True, deadline=None)
@given(st.integers(0, 9).flatmap(lambda w: st.lists(dml(w), min_size=1, max_size=30)))
def test_walk_equals_reference_on_one_shape(items):
    check([encode(msg) for msg, _ in items], [flag for _, flag in items])


def _garble(payload: bytes, how: int, at: int, byte: int) -> bytes:
    at = at % (len(payload) + 1)
    if how == 0:
        return payload[:at]                                     # truncated
    if how == 1:
        return payload + bytes([byte])                          # trailing byte
    if how == 2 and at < len(payload):
        return payload[:at] + bytes([byte]) + payload[at + 1:]  # one byte changed
    if how == 3:
        return payload[:at] + bytes([byte]) + payload[at:]      # one byte inserted
    return payload[:at] + payload[at + 1:]                      # one byte deleted


@settings(max_examples=300, print_blob=True, deadline=None)
@given(streams(), st.lists(st.tuples(st.integers(0, 39), st.integers(0, 4), st.integers(0, 10_000),
                                     st.integers(0, 255)), max_size=8),
       st.lists(st.integers(0, 39), max_size=3))
def test_walk_equals_reference_on_garbled_dml(stream, garbles, flips):
    payloads, in_stream = stream
    for row, how, at, byte in garbles:
        if row < len(payloads):
            payloads[row] = _garble(payloads[row], how, at, byte)
    for row in flips:  # the wrong stream flag: an Xid too many or too few
        if row < len(in_stream):
            in_stream[row] = not in_stream[row]
    check(payloads, in_stream)


@settings(max_examples=100, print_blob=True, deadline=None)
@given(streams(), st.integers(1, 7))
def test_blocks_join_up(stream, block):
    payloads, in_stream = stream
    saved = columnar.BLOCK_ROWS
    columnar.BLOCK_ROWS = block
    try:
        check(payloads, in_stream)
    finally:
        columnar.BLOCK_ROWS = saved


# -- the golden captures ----------------------------------------------------------------

def golden_dml(scenario: str, config: str) -> tuple[list[bytes], list[bool]]:
    """The Insert/Update/Delete payloads of a capture and whether each sits in a stream block."""
    payloads, flags, in_stream = [], [], False
    for message in load_capture(scenario, config):
        if message.kind == "S":
            in_stream = True
        elif message.kind == "E":
            in_stream = False
        elif message.kind in "IUD":
            payloads.append(message.payload)
            flags.append(in_stream)
    return payloads, flags


GOLDEN = [(s, c) for s in list_scenarios() for c in list_configs(s)]


@pytest.mark.parametrize(("scenario", "config"), GOLDEN, ids=[f"{s}-{c}" for s, c in GOLDEN])
def test_walk_equals_reference_on_golden_capture(scenario, config):
    payloads, flags = golden_dml(scenario, config)
    walked = check(payloads, flags)
    assert all(e is None for e in walked.error)
    if any(flags):
        assert (walked.xid[np.array(flags)] >= 0).all()
    # and each value is what the reference decoder read for that message
    for i in range(0, len(payloads), 97):
        msg = decode_message(payloads[i], flags[i])
        new = getattr(msg, "new", None)
        if new is not None:
            got = [walked.new_values[c][i].as_py() for c in range(len(new))]
            want = [None if v is None or v is UNCHANGED_TOAST else v.encode() if isinstance(v, str) else v
                    for v in new]
            assert got == want


def test_golden_in_one_batch_across_blocks():
    payloads, flags = [], []
    for scenario, config in GOLDEN:
        p, f = golden_dml(scenario, config)
        payloads += p
        flags += f
    assert len(payloads) > 3 * columnar.BLOCK_ROWS
    walked = check(payloads, flags)
    assert all(e is None for e in walked.error)


# -- errors and inputs --------------------------------------------------------------------

def _error_of(payload: bytes | None, in_stream: bool = False) -> str:
    with pytest.raises(DecodeError) as info:
        decode_message(payload, in_stream)  # type: ignore[arg-type]
    return str(info.value)


def test_a_bad_row_gets_the_reference_error_and_the_others_their_values():
    good = encode(Insert(None, 7, ("1", "hello")))
    truncated = good[:-2]
    bad_kind = good.replace(b"t", b"x", 1)
    walked = check([good, truncated, good, bad_kind, good], [False] * 5)
    assert [e is None for e in walked.error] == [True, False, True, False, True]
    assert str(walked.error[1]) == _error_of(truncated)
    assert "unknown tuple column kind 'x' for column 0" in str(walked.error[3])
    assert walked.new_values[1].to_pylist() == [b"hello", None, b"hello", None, b"hello"]
    assert walked.op.tolist() == [73, 0, 73, 0, 73]


def test_invalid_utf8_text_is_an_error_naming_its_offset():
    good = encode(Insert(None, 1, ("ok", "x")))
    bad = good[:-1] + b"\xff"
    walked = check([good, bad, good], [False] * 3)
    assert walked.error[0] is None and walked.error[2] is None
    assert walked.error[1].context["offset"] == len(good) - 1
    assert "not valid UTF-8" in str(walked.error[1])
    assert walked.new_values[0].to_pylist() == [b"ok", None, b"ok"]


def test_non_ascii_text_passes():
    walked = check([encode(Insert(None, 1, ("żółw", "日本", "a"))),
                    encode(Insert(None, 1, ("é", None, b"\xff")))], [False, False])
    assert walked.new_values[0].to_pylist() == ["żółw".encode(), "é".encode()]
    assert walked.new_binary[2].tolist() == [False, True]


def test_unchanged_toast_in_a_key_or_old_tuple_is_an_error():
    key = encode(Update(None, 1, ("1", UNCHANGED_TOAST), None, ("1", "2")))
    old = encode(Delete(None, 1, None, (UNCHANGED_TOAST,)))
    walked = check([key, old], [False, False])
    assert all("unchanged TOAST value in a key/old tuple" in str(e) for e in walked.error)
    assert walked.op.tolist() == [0, 0] and walked.new_count.tolist() == [-1, -1]


def test_toast_lists_and_old_kinds():
    walked = check([encode(Update(None, 1, None, ("a", None), ("a", UNCHANGED_TOAST))),
                    encode(Update(None, 1, ("k", None), None, (UNCHANGED_TOAST, UNCHANGED_TOAST))),
                    encode(Update(None, 1, None, None, ("z", "y"))),
                    encode(Delete(None, 1, ("k", None), None))], [False] * 4)
    assert walked.toast == [[1], [0, 1], None, None]
    assert walked.old_kind == ["O", "K", None, "K"]
    assert walked.toast_array().to_pylist() == walked.toast and walked.toast_array().type == pa.list_(pa.int32())
    assert walked.old_kind_array().to_pylist() == walked.old_kind
    assert walked.old_count.tolist() == [2, 2, -1, 2] and walked.new_count.tolist() == [2, 2, 2, -1]


def test_messages_that_are_not_dml_or_empty_or_null():
    begin = bytes.fromhex("4200000000016f43e8000303d48cefc84a000002f2")
    walked = check([begin, b"", None, b"I"], [False] * 4)
    assert "expected Insert, Update or Delete" in str(walked.error[0])
    assert str(walked.error[1]) == _error_of(b"") == str(walked.error[2])
    assert str(walked.error[3]) == _error_of(b"I")


def test_xid_only_inside_stream_blocks():
    walked = check([encode(Insert(77, 5, ("1",))), encode(Insert(None, 5, ("2",)))], [True, False])
    assert walked.xid.tolist() == [77, -1]
    assert walked.relation_id.tolist() == [5, 5]


def test_empty_batch():
    walked = walk_dml(pa.array([], pa.binary()), np.zeros(0, dtype=bool))
    assert len(walked.op) == 0 and walked.new_values == [] and walked.error == []


def test_sliced_chunked_large_and_string_inputs():
    payloads = [encode(Insert(None, 3, (str(i), None, "x" * i))) for i in range(10)]
    want = walk_dml_reference(pa.array(payloads[3:8], pa.binary()), np.zeros(5, dtype=bool))
    flags = np.zeros(5, dtype=bool)
    assert_same(walk_dml(pa.array(payloads, pa.binary()).slice(3, 5), flags), want)
    assert_same(walk_dml(pa.chunked_array([payloads[3:5], payloads[5:8]], pa.binary()), flags), want)
    assert_same(walk_dml(pa.array(payloads[3:8], pa.large_binary()), flags), want)
    assert_same(walk_dml(pa.array([p.decode("latin-1").encode("latin-1") for p in payloads[3:8]]), flags), want)


def test_in_stream_must_match_the_payloads():
    with pytest.raises(ValueError, match="in_stream"):
        walk_dml(pa.array([b"I"]), np.zeros(2, dtype=bool))


def test_a_row_the_walk_refuses_but_the_reference_takes_is_merged(monkeypatch):
    """The safety net: should the walk ever refuse a good message, the reference decoder's values are used."""
    payloads = [encode(Insert(None, 1, ("a", "b"))), encode(Update(None, 2, ("k",), None, ("c", b"\x01", "d"))),
                encode(Insert(None, 1, ("e", "f")))]
    real = columnar.invalid_utf8_rows

    def refuse_row_one(column, rows):
        return np.union1d(real(column, rows), np.intersect1d(rows, [1]))

    monkeypatch.setattr(columnar, "invalid_utf8_rows", refuse_row_one)
    monkeypatch.setattr(columnar, "all_ascii", lambda column: False)
    walked = check(payloads, [False] * 3)
    assert walked.error == [None, None, None]
    assert walked.new_values[2].to_pylist() == [None, b"d", None]


def test_wide_and_huge_counts_do_not_loop():
    wide = encode(Insert(None, 1, tuple(str(i) for i in range(1600))))
    lying = bytearray(encode(Insert(None, 1, ("1",))))
    lying[6:8] = (32767).to_bytes(2, "big")  # column count far past the message's end
    walked = check([wide, bytes(lying)], [False, False])
    assert walked.new_count.tolist() == [1600, -1]
    assert "truncated" in str(walked.error[1])


def test_length_fields_past_the_end_or_negative():
    good = encode(Insert(None, 1, ("abc",)))
    at = good.index(b"t") + 1
    payloads = [good[:at] + v.to_bytes(4, "big") + good[at + 4:]
                for v in (4, 2**31 - 1, 2**31, 2**32 - 1, 2**32 - 3)]
    walked = check(payloads, [False] * len(payloads))
    assert all(isinstance(e, DecodeError) for e in walked.error)


def test_names_strategy_is_shared():  # keeps the shared strategies module honest about its imports
    assert names is not None and updates is not None and deletes is not None and m.UNCHANGED_TOAST is UNCHANGED_TOAST


# -- the consumer: the Spark decode stage's per-partition function, without Spark ----------------

_CONTROL = set(b"BCORYSEcAbPKrp")


def _nan_safe(arr: pa.Array) -> pa.Array:
    """The array with floats as their bit patterns (Arrow's equals says NaN != NaN)."""
    if isinstance(arr, pa.ChunkedArray):
        return pa.chunked_array([_nan_safe(c) for c in arr.chunks], _nan_safe(pa.nulls(0, arr.type)).type)
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_floating(arr.type):
        return pa.Array.from_buffers({2: pa.int16(), 4: pa.int32(), 8: pa.int64()}[arr.type.bit_width // 8], len(arr),
                                     arr.buffers(), offset=arr.offset)
    if pa.types.is_struct(arr.type):
        children = [_nan_safe(arr.field(i)) for i in range(arr.type.num_fields)]
        return pa.StructArray.from_arrays(children, [f.name for f in arr.type], mask=mask)
    if pa.types.is_list(arr.type):
        return pa.ListArray.from_arrays(arr.offsets, _nan_safe(arr.values), mask=mask)
    return arr


def _first_change_seq(capture):
    def lookup(source, ranges, subxids):
        found: dict[int, int] = {}
        for start, end in ranges:
            for msg in capture[start:end + 1]:
                if msg.kind in "IUDTM" and len(msg.payload) >= 5:
                    xid = int.from_bytes(msg.payload[1:5], "big")
                    if xid in subxids:
                        found.setdefault(xid, msg.seq)
        return found
    return lookup


@pytest.mark.parametrize(("scenario", "config"), [("transactions", "v2_stream"), ("transactions", "v3_twophase"),
                                                  ("replica_identity", "v1"), ("types", "v1_binary"),
                                                  ("ddl", "v4_parallel"), ("truncate", "v2_stream_binary")])
def test_decode_batches_same_with_the_fast_and_the_reference_walk(scenario, config, monkeypatch):
    from cdc_apply.decode import changes
    from cdc_apply.planning.plan import plan_batch
    from cdc_apply.planning.schema import SchemaHistory
    from cdc_apply.planning.state import SourceState

    capture = load_capture(scenario, config)
    controls = [(msg.seq, msg.lsn, msg.payload) for msg in capture if msg.payload[0] in _CONTROL]
    plan = plan_batch({"src": (SourceState(), SchemaHistory(), controls, len(capture) - 1)},
                      _first_change_seq(capture), quarantine=True)
    rows = [msg for msg in capture if msg.payload[0] not in _CONTROL]
    batch = pa.record_batch({"source": pa.array(["src"] * len(rows)),
                             "seq": pa.array([msg.seq for msg in rows], pa.int64()),
                             "lsn": pa.array([msg.lsn for msg in rows], pa.int64()),
                             "payload": pa.array([msg.payload for msg in rows], pa.binary())})
    fast = pa.Table.from_batches(list(changes.decode_batches([batch], plan.decode)))
    monkeypatch.setattr(changes, "walk_dml", walk_dml_reference)
    reference = pa.Table.from_batches(list(changes.decode_batches([batch], plan.decode)))
    assert fast.num_rows > 0 and fast.schema == reference.schema
    for name in fast.column_names:
        assert _nan_safe(fast.column(name)).equals(_nan_safe(reference.column(name))), name


def test_batches_of_only_empty_or_null_payloads():
    walked = check([None, None, b""], [False, True, False])
    assert walked.new_values == [] and all("empty message" in str(e) for e in walked.error)
