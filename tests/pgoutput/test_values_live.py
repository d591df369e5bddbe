"""Live checks against the embedded PostgreSQL 18: the vectors still match the server, and a real
pgoutput stream's text and binary tuples convert to equal values."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from value_vectors import load_groups  # noqa: E402  (tests/pgoutput is on sys.path)

from cdc_apply.pgoutput.types import resolve_column_type
from cdc_apply.pgoutput.values import convert_binary, convert_text

pytestmark = pytest.mark.postgres

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("gen_value_vectors", HERE / "gen_value_vectors.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

LIVE_CASES = ["int4", "float8", "numeric_10_2", "money", "bytea", "inet", "date", "timestamptz", "interval",
              "text_array", "date_array"]


def _stored_group(name: str) -> dict:
    for group in load_groups():
        if group["name"] == name:
            return group
    raise KeyError(name)


def test_the_generator_still_matches_the_server(postgres):
    specs = {spec["name"]: spec for specs in gen.CASES.values() for spec in specs}
    conn = postgres.connect(autocommit=False)
    try:
        conn.cursor().execute("DROP SCHEMA IF EXISTS vec CASCADE; CREATE SCHEMA vec")
        conn.commit()
        for name in LIVE_CASES:
            assert gen.generate_case(conn, specs[name]) == _stored_group(name), name
        conn.cursor().execute("DROP SCHEMA vec CASCADE")
        conn.commit()
    finally:
        conn.close()


# -- a real pgoutput stream ------------------------------------------------------------------------
COLUMNS = """id int PRIMARY KEY, i4 int4, i8 int8, n numeric(10,2), nu numeric, f4 float4, f8 float8,
    ts timestamp, tz timestamptz, d date, t time, ttz timetz, iv interval, tx text, bp char(4), b bytea,
    u uuid, ip inet, net cidr, mac macaddr, bits varbit, m money, j jsonb, js json, ch "char",
    ta text[], ia int4[], dom live_types.pos, mood live_types.mood, moods live_types.mood[],
    darr live_types.ints, dnum live_types.price"""
ROWS = [
    "1, 1, 9223372036854775807, 1.50, 'NaN', 'NaN', '-Infinity', '2024-01-02 03:04:05.123456', "
    "'1900-01-01 00:00:00+00', '0044-03-15 BC', '24:00:00', '12:00:00+05:30', '-1 days +00:00:01.5', "
    "'héllo', 'ab', '\\x00ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '::ffff:1.2.3.4', '10.0.0.0/8', "
    "'08:00:2b:01:02:03', B'101', '-1234.56', '{\"b\": [1, 2.50]}', '{\"x\": 1}', 'x', "
    "ARRAY['a b', NULL, 'NULL', 'q\"', ''], '[0:1]={7,NULL}', 5, 'happy', '{sad,NULL}', '{1,2}', 9.99",
    "2, NULL, -1, -0.01, 1e30, 1.5, 0.1, 'infinity', '-infinity', 'infinity', '00:00', '00:00:00-03:30', "
    "'178956970 years', '', 'abcd', '\\x', '00000000-0000-0000-0000-000000000000', '2001:db8::1/64', '::/0', "
    "'ff:ff:ff:ff:ff:ff', B'', '92233720368547758.07', 'null', '[]', '', '{}', '{}', 1, 'sad', '{}', '{}', 'NaN'",
]


def _cstring(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(b"\x00", pos)
    return buf[pos:end].decode(), end + 1


def _parse(messages: list[bytes]):
    """Relation columns, Type messages and Insert tuples of a non-streamed pgoutput stream."""
    columns, types, rows = [], {}, []
    for msg in messages:
        kind = msg[:1]
        if kind == b"Y":
            (oid,) = struct.unpack_from(">I", msg, 1)
            namespace, pos = _cstring(msg, 5)
            types[oid] = (namespace, _cstring(msg, pos)[0])
        elif kind == b"R":
            pos = 5
            _, pos = _cstring(msg, pos)
            _, pos = _cstring(msg, pos)
            (natts,) = struct.unpack_from(">h", msg, pos + 1)
            pos += 3
            columns = []
            for _ in range(natts):
                name, pos = _cstring(msg, pos + 1)
                oid, typmod = struct.unpack_from(">Ii", msg, pos)
                columns.append((name, oid, typmod))
                pos += 8
        elif kind == b"I":
            (ncols,) = struct.unpack_from(">h", msg, 6)
            pos, values = 8, []
            for _ in range(ncols):
                form = msg[pos:pos + 1]
                pos += 1
                if form in (b"t", b"b"):
                    (length,) = struct.unpack_from(">i", msg, pos)
                    values.append((form, msg[pos + 4: pos + 4 + length]))
                    pos += 4 + length
                else:
                    values.append((form, None))
            rows.append(values)
    return columns, types, rows


def _stream(cur, slot: str, binary: bool) -> list[bytes]:
    cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '4', "
                "'publication_names', 'live_types_pub', 'binary', %s)", (slot, "true" if binary else "false"))
    return [bytes(row[0]) for row in cur.fetchall()]


def test_a_real_pgoutput_stream_converts_text_and_binary_tuples_to_equal_values(postgres):
    conn = postgres.connect()
    cur = conn.cursor()
    cur.execute("DROP SCHEMA IF EXISTS live_types CASCADE; CREATE SCHEMA live_types; "
                "CREATE DOMAIN live_types.pos AS int4 CHECK (VALUE > 0); "
                "CREATE DOMAIN live_types.ints AS int4[]; CREATE DOMAIN live_types.price AS numeric(10,2); "
                "CREATE TYPE live_types.mood AS ENUM ('happy', 'sad'); "
                f"CREATE TABLE live_types.t ({COLUMNS}); "
                "CREATE PUBLICATION live_types_pub FOR TABLE live_types.t")
    cur.execute("SELECT pg_create_logical_replication_slot('live_types_slot', 'pgoutput')")
    try:
        for row in ROWS:
            cur.execute(f"INSERT INTO live_types.t VALUES ({row})")
        # A walsender prints text under its own settings: use ones that exercise offsets and float digits.
        cur.execute("SET TimeZone = 'Asia/Kolkata'; SET extra_float_digits = 1")
        columns, types, text_rows = _parse(_stream(cur, "live_types_slot", binary=False))
        _, _, binary_rows = _parse(_stream(cur, "live_types_slot", binary=True))
    finally:
        cur.execute("SELECT pg_drop_replication_slot('live_types_slot')")
        cur.execute("DROP PUBLICATION live_types_pub; DROP SCHEMA live_types CASCADE")
        conn.close()

    # Type messages name a domain's base type ("" for pg_catalog), and enums by their own name.
    named = {columns[i][0]: types[columns[i][1]] for i in range(len(columns)) if columns[i][1] in types}
    assert named == {"dom": ("", "int4"), "darr": ("", "_int4"), "dnum": ("", "numeric"),
                     "mood": ("live_types", "mood"), "moods": ("live_types", "_mood")}
    assert len(text_rows) == len(binary_rows) == len(ROWS)
    for index, (name, oid, typmod) in enumerate(columns):
        column = resolve_column_type(oid, typmod, types)
        text_forms = [row[index] for row in text_rows]
        binary_forms = [row[index] for row in binary_rows]
        assert {form for form, _ in text_forms} <= {b"t", b"n"}, name
        assert {form for form, _ in binary_forms} <= {b"b", b"n"}, name
        from_text = convert_text(column, pa.array([raw for _, raw in text_forms], pa.binary()))
        from_binary = convert_binary(column, pa.array([raw for _, raw in binary_forms], pa.binary()))
        assert from_text.type == from_binary.type == column.arrow_type, name
        assert _bits(from_text) == _bits(from_binary), name


def _bits(array: pa.Array) -> list:
    """Equality that treats NaN as itself and tells -0.0 from 0.0."""
    if pa.types.is_floating(array.type):
        return [None if v is None else struct.pack(">d", v).hex() for v in array.cast(pa.float64()).to_pylist()]
    if pa.types.is_date32(array.type):
        return array.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(array.type):
        return array.cast(pa.int64()).to_pylist()
    if pa.types.is_list(array.type) and pa.types.is_date32(array.type.value_type):
        return _bits(array.cast(pa.list_(pa.int32())))
    return array.to_pylist()
