"""Encoder/decoder round trips (property tests) and the timestamp text of the format."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from gaussdb_strategies import PG_MAX_TS, PG_MIN_TS, heartbeats, offsets, records  # noqa: E402
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_apply.gaussdb import (
    decode_gaussdb_payload,
    encode_gaussdb,
    format_timestamp,
    heartbeat_micros,
    parse_timestamp,
)
from cdc_apply.gaussdb.timestamps import INFINITY, NEG_INFINITY
from cdc_apply.pgoutput.messages import PG_EPOCH


@settings(print_blob=True, max_examples=300, deadline=None)
@given(st.lists(records, max_size=8), st.sampled_from(["F", "0"]))
def test_batch_round_trip(recs, end):
    assert decode_gaussdb_payload(encode_gaussdb(recs, batch=True, end=end)) == recs


@settings(print_blob=True, max_examples=300, deadline=None)
@given(records)
def test_single_result_round_trip(record):
    payload = encode_gaussdb([record], batch=False)
    assert payload.endswith(b"F")
    assert decode_gaussdb_payload(payload) == [record]


@settings(print_blob=True, deadline=None)
@given(heartbeats)
def test_heartbeat_round_trip(beat):
    assert decode_gaussdb_payload(encode_gaussdb([beat], batch=False)) == [beat]


@settings(print_blob=True, max_examples=500, deadline=None)
@given(st.integers(PG_MIN_TS, PG_MAX_TS), offsets)
def test_timestamp_text_round_trip(micros, offset):
    assert parse_timestamp(format_timestamp(micros, offset)) == micros


@settings(print_blob=True, max_examples=300, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)), offsets)
def test_timestamp_agrees_with_datetime(moment, offset):
    micros = (moment.replace(tzinfo=timezone.utc) - PG_EPOCH) // (datetime.resolution)
    text = format_timestamp(micros, offset)
    assert parse_timestamp(text) == micros
    if offset == 0:
        iso = moment.isoformat(sep=" ")
        assert text.startswith(iso.rstrip("0").rstrip(".") if "." in iso else iso)


@pytest.mark.parametrize("text, utc", [
    ("2024-05-20 10:00:00.5+08", "2024-05-20 02:00:00.500000"),
    ("2000-01-01 00:00:00+00", "2000-01-01 00:00:00"),
    ("1999-12-31 19:00:00-05", "2000-01-01 00:00:00"),
    ("2024-02-29 23:59:59.999999+05:30", "2024-02-29 18:29:59.999999"),
    ("1970-01-01 00:00:00-03:30:15", "1970-01-01 03:30:15"),
    ("2024-05-20 10:00:00", "2024-05-20 10:00:00"),  # no offset: UTC
])
def test_timestamp_examples(text, utc):
    expected = datetime.fromisoformat(utc).replace(tzinfo=timezone.utc)
    assert parse_timestamp(text) == (expected - PG_EPOCH) // datetime.resolution


def test_timestamp_specials_and_far_dates():
    assert parse_timestamp("infinity") == INFINITY and parse_timestamp("-infinity") == NEG_INFINITY
    assert format_timestamp(INFINITY) == "infinity" and format_timestamp(NEG_INFINITY) == "-infinity"
    # 1 BC is year 0: one leap year (366 days) before 0001-01-01.
    one_ad = parse_timestamp("0001-01-01 00:00:00+00")
    assert parse_timestamp("0001-01-01 00:00:00+00 BC") == one_ad - 366 * 86_400_000_000
    assert format_timestamp(parse_timestamp("4713-11-24 00:00:00+00 BC")) == "4713-11-24 00:00:00+00 BC"
    assert format_timestamp(parse_timestamp("294276-12-31 23:59:59.999999+00")) == "294276-12-31 23:59:59.999999+00"


@pytest.mark.parametrize("text", [
    "", "yesterday", "2024-02-30 00:00:00+00", "2023-02-29 00:00:00+00", "2024-13-01 00:00:00+00",
    "2024-01-01 24:00:00+00", "2024-01-01 00:60:00+00", "2024-01-01 00:00:00.1234567+00", "2024-01-01T00:00:00+00",
    "0000-01-01 00:00:00+00 BC", "(timestamp out of range)", "2024-01-01 00:00:00+24", " 2024-01-01 00:00:00+00",
])
def test_timestamp_rejects(text):
    with pytest.raises(ValueError):
        parse_timestamp(text)


def test_heartbeat_units():
    unix = 1_716_170_400  # 2024-05-20T02:00:00Z
    expected = (datetime(2024, 5, 20, 2, tzinfo=timezone.utc) - PG_EPOCH) // datetime.resolution
    assert heartbeat_micros(unix) == heartbeat_micros(unix * 1000) == heartbeat_micros(unix * 1_000_000) == expected
    assert heartbeat_micros(unix * 1000, "ms") == expected
    assert heartbeat_micros(5, "us") == 5 - 946_684_800_000_000
    with pytest.raises(ValueError):
        heartbeat_micros(1, "minutes")
