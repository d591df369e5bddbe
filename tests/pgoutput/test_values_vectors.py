"""Golden vectors from a real PostgreSQL 18 (tests/pgoutput/data/values_*.json).

Every vector's text forms (under each GUC variant) and its binary send form must convert to
the value the server computed as the oracle — and to equal Arrow values, since the same row
may arrive from a text-format stream or a binary-format stream.
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal

import pyarrow as pa
import pytest
from value_vectors import column_type_of, load_groups  # noqa: E402  (tests/pgoutput is on sys.path)

from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput.types import ColumnType
from cdc_apply.pgoutput.values import convert_binary, convert_binary_value, convert_text, convert_text_value

pytestmark = pytest.mark.usefixtures("conversion_path")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
GROUPS = load_groups()


# -- the oracle, as Arrow-comparable Python values ----------------------------------------------
def _time_text(micros: int) -> str:
    seconds, fraction = divmod(micros, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"


def _timetz_text(micros: int, east: int) -> str:
    minutes, seconds = divmod(abs(east), 60)
    text = f"{_time_text(micros)}{'+' if east >= 0 else '-'}{minutes // 60:02d}:{minutes % 60:02d}"
    return text + (f":{seconds:02d}" if seconds else "")


def expected_value(ct: ColumnType, oracle):
    """The oracle JSON of one value in the form :func:`comparable` gives for converted values."""
    if oracle is None:
        return None
    kind = ct.kind
    if kind == "array":
        return [expected_value(ct.element, item) for item in oracle]
    if kind in ("float4", "float8"):
        number = struct.unpack(">f" if kind == "float4" else ">d", bytes.fromhex(oracle))[0]
        return "nan" if math.isnan(number) else struct.pack(">d", number).hex()
    if kind in ("numeric", "money"):
        return Decimal(oracle)
    if kind == "date":
        return {"infinity": INT32_MAX, "-infinity": INT32_MIN}.get(oracle, oracle)
    if kind in ("timestamp", "timestamptz"):
        special = {"infinity": INT64_MAX, "-infinity": INT64_MIN}.get(oracle)
        # PostgreSQL's last 29 years do not fit Arrow: clamped to the last finite value.
        return special if special is not None else min(max(int(oracle), INT64_MIN + 1), INT64_MAX - 1)
    if kind == "time":
        return _time_text(oracle)
    if kind == "timetz":
        return _timetz_text(*oracle)
    if kind == "interval":
        if oracle == "infinity":
            return {"months": INT32_MAX, "days": INT32_MAX, "microseconds": INT64_MAX}
        if oracle == "-infinity":
            return {"months": INT32_MIN, "days": INT32_MIN, "microseconds": INT64_MIN}
        return dict(zip(("months", "days", "microseconds"), oracle))
    if kind == "bytea":
        return bytes.fromhex(oracle)
    if kind == "xid8":
        return Decimal(oracle)
    return oracle


def comparable(array: pa.Array) -> list:
    """Python values that compare exactly: integers for dates/timestamps, bits for floats."""
    kind = array.type
    if pa.types.is_list(kind):
        inner = comparable(array.flatten())
        offsets = array.offsets.to_pylist()
        return [None if not array[i].is_valid else inner[offsets[i] - offsets[0]: offsets[i + 1] - offsets[0]]
                for i in range(len(array))]
    if pa.types.is_date32(kind):
        return array.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(kind):
        return array.cast(pa.int64()).to_pylist()
    if pa.types.is_floating(kind):
        return [None if v is None else "nan" if math.isnan(v) else struct.pack(">d", v).hex()
                for v in array.cast(pa.float64()).to_pylist()]
    return array.to_pylist()


def _variants(group: dict):
    for vector in group["vectors"]:
        for variant, text in vector["text"].items():
            yield vector, variant, text


def _ids(group: dict) -> str:
    return group["name"]


@pytest.mark.parametrize("group", GROUPS, ids=_ids)
def test_every_text_form_converts_to_the_servers_oracle(group):
    ct = column_type_of(group)
    good = [v for v in group["vectors"] if "error" not in v]
    for variant in group["vectors"][0]["text"] if group["vectors"] else []:
        raw = [v["text"][variant].encode() for v in good]
        # nulls between values: the conversion must keep them in place
        interleaved = [x for item in raw for x in (item, None)]
        converted = comparable(convert_text(ct, pa.array(interleaved, pa.binary())))
        expected = [x for v in good for x in (expected_value(ct, v["expected"]), None)]
        assert converted == expected, f"{group['name']} text ({variant})"


@pytest.mark.parametrize("group", GROUPS, ids=_ids)
def test_every_binary_form_converts_to_the_servers_oracle(group):
    ct = column_type_of(group)
    good = [v for v in group["vectors"] if "error" not in v]
    raw = [bytes.fromhex(v["binary"]) for v in good]
    converted = comparable(convert_binary(ct, pa.array([None] + raw, pa.binary())))
    expected = [None] + [expected_value(ct, v["expected"]) if "expected_binary" not in v
                         else v["expected_binary"] for v in good]
    assert converted == expected


@pytest.mark.parametrize("group", GROUPS, ids=_ids)
def test_the_same_row_from_text_and_binary_streams_gives_equal_arrow_values(group):
    ct = column_type_of(group)
    same = [v for v in group["vectors"] if "error" not in v and "expected_binary" not in v]
    if not same:
        pytest.skip("every value of this type is kept differently by documented policy")
    from_binary = convert_binary(ct, pa.array([bytes.fromhex(v["binary"]) for v in same], pa.binary()))
    for variant in same[0]["text"]:
        from_text = convert_text(ct, pa.array([v["text"][variant].encode() for v in same], pa.binary()))
        assert from_text.type == from_binary.type == ct.arrow_type
        assert comparable(from_text) == comparable(from_binary), variant


@pytest.mark.parametrize("group", [g for g in GROUPS if any("error" in v for v in g["vectors"])], ids=_ids)
def test_values_the_type_map_cannot_hold_raise_a_decode_error_that_says_why(group):
    ct = column_type_of(group)
    for vector in (v for v in group["vectors"] if "error" in v):
        for text in vector["text"].values():
            with pytest.raises(DecodeError, match=vector["error"].replace("(", r"\(").replace(")", r"\)")):
                convert_text(ct, pa.array([text.encode()], pa.binary()))
        with pytest.raises(DecodeError, match=vector["error"].replace("(", r"\(").replace(")", r"\)")) as info:
            convert_binary(ct, pa.array([None, bytes.fromhex(vector["binary"])], pa.binary()))
        assert info.value.context["row"] == 1
        assert info.value.context["type"] == ct.pg_name


@pytest.mark.parametrize("group", GROUPS, ids=_ids)
def test_scalar_conversions_agree_with_the_column_conversions(group):
    ct = column_type_of(group)
    for vector in (v for v in group["vectors"] if "error" not in v):
        text = vector["text"]["default"]
        scalar = pa.array([convert_text_value(ct, text)], ct.arrow_type)
        assert comparable(scalar) == comparable(convert_text(ct, pa.array([text.encode()])))
        raw = bytes.fromhex(vector["binary"])
        scalar = pa.array([convert_binary_value(ct, raw)], ct.arrow_type)
        assert comparable(scalar) == comparable(convert_binary(ct, pa.array([raw])))


def test_the_vectors_cover_every_converter_kind():
    kinds = set()

    def walk(ct):
        kinds.add(ct.kind)
        if ct.element is not None:
            walk(ct.element)

    for group in GROUPS:
        walk(column_type_of(group))
    from cdc_apply.pgoutput.values import _BINARY, _TEXT

    assert set(_TEXT) == set(_BINARY)
    assert set(_TEXT) <= kinds, set(_TEXT) - kinds
