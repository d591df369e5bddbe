"""Verify's per-type value texts: every type the type map has is compared or named with why (pure), and the
PostgreSQL side renders what silver holds — floats as Java's ``%a`` text, intervals, times and times with
zone as the decoder stores them from both pgoutput formats (against a real PostgreSQL)."""

from __future__ import annotations

import math
import random
import struct

import pytest

from cdc_apply.pgoutput.types import MAX_ARRAY_DIMENSIONS, resolve_column_type, with_dimensions
from cdc_apply.pgoutput.values import convert_binary_value, convert_text_value
from cdc_apply.verification.encoding import ColumnEncoding, NotCompared, encode_column
from cdc_apply.verification.value_text import SourceFormat, value_text

BUILTINS = sorted(set(range(16, 6200)) & ({oid for oid in range(16, 6200)
                                           if resolve_column_type(oid, -1).pg_name != f"unknown({oid})"}))


def silver_type(column_type) -> str:
    """Spark's simple string of the type the map gives the column (``STRUCT<a: INT>`` -> ``struct<a:int>``)."""
    return column_type.spark_ddl.lower().replace(": ", ":").replace(", ", ",")


def java_hex(value: float) -> str:
    """``Double.toHexString``: what Spark's ``format_string('%a', c)`` prints."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    bits = struct.unpack(">Q", struct.pack(">d", value))[0]
    sign = "-" if bits >> 63 else ""
    exponent, fraction = (bits >> 52) & 0x7FF, f"{bits & ((1 << 52) - 1):013x}".rstrip("0") or "0"
    if exponent:
        return f"{sign}0x1.{fraction}p{exponent - 1023}"
    return f"{sign}0x0.{fraction}p{0 if value == 0 else -1022}"


def test_every_built_in_type_is_compared_from_a_text_stream_but_reg_types_which_say_why():
    refused = {}
    for oid in BUILTINS:
        column_type = resolve_column_type(oid, -1)
        got = encode_column("c", column_type, silver_type(column_type))
        if isinstance(got, NotCompared):
            refused[column_type.pg_name] = got.why
    assert refused and all(name.lstrip("_").startswith("reg") or name.startswith("reg") for name in refused), refused
    assert "regclass" in refused and "regclass[]" in refused
    assert "OID" in refused["regclass"] and refused["regclass[]"].startswith("an array of regclass: ")


def test_every_built_in_type_is_compared_from_a_binary_stream_by_its_send_function():
    for oid in BUILTINS:
        column_type = resolve_column_type(oid, -1)
        got = encode_column("c", column_type, silver_type(column_type), SourceFormat(True, "pg_catalog.some_send"))
        assert isinstance(got, ColumnEncoding), (column_type.pg_name, got)
    box = encode_column("b", resolve_column_type(603, -1), "string", SourceFormat(True, "pg_catalog.box_send"))
    assert isinstance(box, ColumnEncoding) and box.pg == "'\\x' || encode(pg_catalog.box_send(\"b\"), 'hex')"


def test_a_user_type_from_a_binary_stream_is_its_label_when_it_sends_text_and_its_send_bytes_otherwise():
    mood = resolve_column_type(16999, -1, {16999: ("public", "mood")})
    label = encode_column("m", mood, "string", SourceFormat(True, "pg_catalog.enum_send"))
    record = encode_column("m", mood, "string", SourceFormat(True, "pg_catalog.record_send"))
    assert isinstance(label, ColumnEncoding) and "concat(\"m\")" in label.pg
    assert isinstance(record, ColumnEncoding) and "record_send(\"m\")" in record.pg
    unnamed = encode_column("m", mood, "string", SourceFormat(True, None))
    assert isinstance(unnamed, NotCompared) and "send function" in unnamed.why


def test_a_silver_type_other_than_the_map_s_is_named_with_what_silver_holds():
    got = encode_column("f", resolve_column_type(701, -1), "string")
    assert isinstance(got, NotCompared) and got.text() == "f (silver holds string, not what float8 maps to (double))"
    nested = encode_column("a", resolve_column_type(1007, -1), "array<array<int>>")
    assert isinstance(nested, NotCompared) and nested.why.startswith("an array of int4: silver holds array<int>")


def test_an_array_s_text_counts_its_elements_and_writes_each_as_a_column_is_written():
    pg, spark = value_text(resolve_column_type(1022, -1), '"a"', "`a`", "array<double>")
    assert "cardinality(\"a\")" in pg and "WITH ORDINALITY AS u(e, o)" in pg and "ORDER BY u.o" in pg
    assert "size(`a`)" in spark and "transform(`a`, verify_e -> " in spark and "format_string('%a', verify_e)" in spark


def test_an_array_of_more_dimensions_nests_a_transform_per_level_with_a_variable_of_its_own():
    grid = with_dimensions(resolve_column_type(1007, -1), 3)
    pg, spark = value_text(grid, '"g"', "`g`", "array<array<array<int>>>")
    assert "array_ndims(\"g\") <> 3" in pg and "mod(u.o - 1, array_length(\"g\", 2) * array_length(\"g\", 3))" in pg
    assert "transform(`g`, verify_a3 -> " in spark and "transform(verify_a3, verify_a2 -> " in spark
    assert "transform(verify_a2, verify_e -> " in spark and spark.count("transform(") == 3
    flat = encode_column("g", grid, "array<array<int>>")
    assert isinstance(flat, NotCompared) and flat.why == "silver holds array<array<int>>, not an array of 3 dimensions"


def test_every_built_in_array_type_of_every_dimensions_is_compared_but_reg_types():
    for oid in BUILTINS:
        column_type = resolve_column_type(oid, -1)
        if column_type.kind != "array":
            continue
        for dimensions in range(2, MAX_ARRAY_DIMENSIONS + 1):
            nested = with_dimensions(column_type, dimensions)
            got = encode_column("c", nested, silver_type(nested))
            assert isinstance(got, ColumnEncoding) or column_type.pg_name.startswith("reg"), (nested.pg_name, got)


def array_text(value, dimensions: int) -> str | None:
    """The canonical text of a nested list of ``dimensions`` levels of strings (an element's own text),
    written from its grammar: ``<count>:``, then each element as ``N`` or ``V<length>:<text>``, each sub-array
    as its own text (``N`` for a NULL one)."""
    if value is None:
        return None
    if dimensions == 1:
        return f"{len(value)}:" + "".join("N" if e is None else f"V{len(e)}:{e}" for e in value)
    return f"{len(value)}:" + "".join(array_text(s, dimensions - 1) or "N" for s in value)


def random_array(rng: random.Random, dimensions: int, element) -> tuple[list, list[int]]:
    """A rectangular nested list of ``dimensions`` levels, elements by ``element(rng)``, and its shape."""
    shape = [rng.randint(1, 3) for _ in range(dimensions)]

    def level(depth: int):
        if depth == dimensions:
            return element(rng)
        return [level(depth + 1) for _ in range(shape[depth])]

    return level(0), shape


ODD_TEXTS = ["a", "", "NULL", "b c", "x,y", '"q"', "back\\slash", "{}", "é€😀", "1:V2"]


def array_literal(value, shape: list[int], lower: list[int]) -> str:
    """array_out's text of a nested list with lower bounds ``lower`` (``[l:u]...=`` when any is not 1)."""
    def text(v) -> str:
        if isinstance(v, list):
            return "{" + ",".join(text(e) for e in v) + "}"
        if v is None:
            return "NULL"
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

    bounds = "".join(f"[{lo}:{lo + n - 1}]" for lo, n in zip(lower, shape))
    return (bounds + "=" if any(lo != 1 for lo in lower) else "") + text(value)


@pytest.mark.postgres
@pytest.mark.parametrize("oid, element", [(1007, lambda rng: rng.choice([None, str(rng.randint(-9, 99))])),
                                          (1009, lambda rng: rng.choice([None] + ODD_TEXTS))], ids=["int4", "text"])
def test_postgresql_writes_an_array_of_every_dimensions_as_its_grammar_says_positions_not_subscripts(
        postgres, oid, element):
    rng = random.Random(oid)
    cases = []
    for dimensions in range(1, MAX_ARRAY_DIMENSIONS + 1):
        for _ in range(40):
            value, shape = random_array(rng, dimensions, element)
            lower = [rng.choice([1, 1, 0, -2, 5]) for _ in shape]
            cases.append((dimensions, array_literal(value, shape, lower), array_text(value, dimensions)))
        cases.append((dimensions, "{}", "0:"))          # an empty array fits any column
        cases.append((dimensions, None, None))
    cases += [(2, "{1}" if oid == 1007 else "{a}", "D1"), (1, "{{1}}" if oid == 1007 else "{{a}}", "D2")]
    column_type = resolve_column_type(oid, -1)
    for dimensions in sorted({d for d, _, _ in cases}):
        pg, _ = value_text(with_dimensions(column_type, dimensions), "v", "`v`", silver_type(
            with_dimensions(column_type, dimensions)))
        mine = [(literal, text) for d, literal, text in cases if d == dimensions]
        rows = postgres.execute(f"SELECT i, {pg} FROM (SELECT i, v::{column_type.pg_name} AS v "
                                f"FROM unnest(%s::text[]) WITH ORDINALITY AS t(v, i)) s ORDER BY i",
                                ([literal for literal, _ in mine],))
        assert [r[1] for r in rows] == [text for _, text in mine], dimensions


FLOATS = [0.0, -0.0, 1.0, -1.0, 0.1, 0.5, 1.5, 2.0, 1e300, -1e-300, 5e-324, 2.2250738585072014e-308,
          2.225073858507201e-308, 1.7976931348623157e308, math.inf, -math.inf, math.nan, 123456.789, 3.0e-310]


@pytest.mark.postgres
def test_postgresql_prints_every_float8_as_java_s_hex_text(postgres):
    rng = random.Random(7)
    values = FLOATS + [struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))[0] for _ in range(3000)]
    pg, _ = value_text(resolve_column_type(701, -1), "v", "`v`", "double")
    # As text: psycopg2 would send -0.0 as a numeric literal, which is 0.
    rows = postgres.execute(f"SELECT i, {pg} FROM unnest(%s::text[]::float8[]) WITH ORDINALITY AS t(v, i) ORDER BY i",
                            ([repr(v) for v in values],))
    assert [r[1] for r in rows] == [java_hex(v) for v in values]


@pytest.mark.postgres
def test_postgresql_prints_a_float4_as_java_prints_it_widened(postgres):
    rng = random.Random(8)
    singles = [struct.unpack(">f", rng.getrandbits(32).to_bytes(4, "big"))[0] for _ in range(2000)]
    values = [0.0, -0.0, 1.5, 1.401298464324817e-45, 3.4028234663852886e38, math.nan] + singles
    pg, _ = value_text(resolve_column_type(700, -1), "v", "`v`", "float")
    rows = postgres.execute(f"SELECT i, {pg} FROM unnest(%s::text[]::float4[]) WITH ORDINALITY AS t(v, i) ORDER BY i",
                            ([repr(v) for v in values],))
    assert [r[1] for r in rows] == [java_hex(v) for v in values]


TIMES = {
    1083: ["00:00:00", "24:00:00", "10:00:00.5", "23:59:59.999999", "12:34:56.000001"],
    1266: ["10:00+05:30", "23:59:59.999999-03:30", "01:02:03-12:00:15", "00:00:00.1+00", "24:00:00-15:59"],
    1186: ["1 mon", "30 days", "-1 year 2 days 00:00:03.5", "1 day 00:00:00.000001", "infinity", "-infinity",
           "-178000000 years", "2 hours -3 minutes"],
}


@pytest.mark.postgres
@pytest.mark.parametrize("oid", sorted(TIMES))
def test_postgresql_renders_times_and_intervals_as_the_decoder_stores_them_from_text_and_binary(postgres, oid):
    column_type = resolve_column_type(oid, -1)
    pg, _ = value_text(column_type, "v::" + column_type.pg_name, "`v`", silver_type(column_type))
    send = {1083: "time_send", 1266: "timetz_send", 1186: "interval_send"}[oid]
    rows = postgres.execute(f"SELECT v::{column_type.pg_name}::text, {send}(v::{column_type.pg_name}), {pg} "
                          f"FROM unnest(%s::text[]) AS t(v)", (TIMES[oid],))
    for text, binary, rendered in rows:
        for stored in (convert_text_value(column_type, text), convert_binary_value(column_type, bytes(binary))):
            if isinstance(stored, dict):   # an interval's struct
                stored = f"{stored['months']}:{stored['days']}:{stored['microseconds']}"
            assert rendered == stored, (text, rendered, stored)
