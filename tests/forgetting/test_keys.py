"""Which messages carry a forgotten key (pure: messages built with the encoder, no PostgreSQL or Spark)."""

from __future__ import annotations

import pytest

from cdc_apply.errors import ForgetError
from cdc_apply.forgetting.keys import ForgetKey, ScanSpec, classify, parse_keys
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.encoder import encode

REL = 16385
ADA = ForgetKey(("ada",), ("ada",), (b"ada",), ("V3:ada",))
# int4 7: output text '7', send form four big-endian bytes
SEVEN = ForgetKey(("7",), ("7",), ((7).to_bytes(4, "big"),), ("7",))


def spec(*keys: ForgetKey, positions=(0,), streams=()) -> ScanSpec:
    return ScanSpec({REL: ((10,), (positions,))}, keys, streams)


def test_a_single_column_key_is_its_text_and_a_composite_key_a_json_object():
    assert parse_keys(["ada"], ["id"], "public.c") == [("ada",)]
    assert parse_keys(['{"a": 3, "b": "x"}'], ["a", "b"], "public.p") == [("3", "x")]


@pytest.mark.parametrize("given, message", [
    (['{"a": 3}'], "must name exactly the key columns a, b"),
    (["3"], 'give --key as a JSON object'),
    (['{"a": 3, "b": null}'], "never NULL"),
    (["{nope"], "is not a JSON object"),
    ([], "no key given"),
])
def test_a_key_that_does_not_name_every_key_column_once_is_refused(given, message):
    with pytest.raises(ForgetError, match=message):
        parse_keys(given, ["a", "b"], "public.p")


def test_a_table_without_a_key_is_refused():
    with pytest.raises(ForgetError, match="no replica identity key"):
        parse_keys(["x"], [], "public.t")


def test_an_insert_of_the_key_carries_it_in_text_and_in_binary_form():
    text = encode(m.Insert(None, REL, ("ada", "Ada L.")))
    assert classify(text, 20, spec(ADA)) == ("carries", "")
    binary = encode(m.Insert(None, REL, ((7).to_bytes(4, "big"), b"x")))
    assert classify(binary, 20, spec(SEVEN)) == ("carries", "")
    other = encode(m.Insert(None, REL, ("bob", "Ada L.")))
    assert classify(other, 20, spec(ADA)) is None


def test_an_update_and_a_delete_of_the_key_carry_it():
    update = encode(m.Update(None, REL, None, None, ("ada", "new name")))
    delete = encode(m.Delete(None, REL, ("ada", None), None))
    full = encode(m.Delete(None, REL, None, ("ada", "old name")))
    for payload in (update, delete, full):
        assert classify(payload, 20, spec(ADA)) == ("carries", "")


def test_an_update_moving_a_row_away_from_a_forgotten_key_is_named_as_a_move():
    moved = encode(m.Update(None, REL, ("ada", None), None, ("bob", "Ada L.")))
    assert classify(moved, 20, spec(ADA)) == ("moves", "an Update moves a row from forgotten key #1 to a key not "
                                                       "forgotten")
    back = encode(m.Update(None, REL, ("bob", None), None, ("ada", "Ada L.")))
    assert classify(back, 20, spec(ADA))[0] == "moves"


def test_a_change_inside_a_stream_block_is_read_with_its_xid():
    streamed = encode(m.Insert(900, REL, ("ada", "x")))
    assert classify(streamed, 20, spec(ADA, streams=((15, 25),))) == ("carries", "")
    assert classify(streamed, 30, spec(ADA, streams=((15, 25),)))[0] == "undecodable"


def test_a_change_of_another_relation_or_a_truncated_message_is_not_the_key():
    assert classify(encode(m.Insert(None, REL + 1, ("ada", "x"))), 20, spec(ADA)) is None
    assert classify(encode(m.Insert(None, REL, ("ada", "x")))[:-2], 20, spec(ADA))[0] == "undecodable"


def test_the_key_column_is_found_at_its_position_in_the_version_of_the_change():
    two = ScanSpec({REL: ((10, 50), ((0,), (1,)))}, (ADA,))
    before, after = encode(m.Insert(None, REL, ("ada", "z"))), encode(m.Insert(None, REL, ("z", "ada")))
    assert classify(before, 20, two) == ("carries", "") and classify(after, 20, two) is None
    assert classify(after, 60, two) == ("carries", "") and classify(before, 60, two) is None


def test_the_recorded_digest_names_no_value_and_differs_by_table():
    assert "ada" not in ADA.digest("public.c")
    assert ADA.digest("public.c") != ADA.digest("public.d")
