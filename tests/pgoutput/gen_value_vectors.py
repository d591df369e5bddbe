"""Generate the golden value vectors in tests/pgoutput/data/values_*.json from a real PostgreSQL.

For every case the server itself produces what pgoutput would send and what the value is:

* ``type_oid`` / ``type_modifier``: pg_attribute of a table column, as in a Relation message;
  ``user_type``: (namespace, name) of the base type, as a Type message carries it;
* ``text``: the type's output function (pg_type.typoutput, which pgoutput calls for 't'
  values) under DateStyle ISO, IntervalStyle postgres, extra_float_digits 3, bytea_output
  hex, TimeZone UTC — and under the extra settings a case lists (time zones, interval
  styles, float digits, bytea escape);
* ``binary``: the type's send function (pg_type.typsend, which pgoutput calls for 'b'), hex;
* ``expected``: an oracle computed by the server (days since 1970 by date subtraction,
  microseconds by extract(epoch ...), IEEE bits by float8send, money as numeric, ...).

``error`` marks values the type map cannot hold by policy (the converter must raise a
DecodeError containing it); ``expected_binary`` marks the documented cases where the binary
form is kept differently from the text form. Values the server refuses are listed under
``rejected`` with its message. Run: ``python tests/pgoutput/gen_value_vectors.py`` (starts a
throw-away server) or with ``--dsn 'host=... port=...'``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
BASE_SETTINGS = {"DateStyle": "ISO, MDY", "IntervalStyle": "postgres", "extra_float_digits": "3",
                 "bytea_output": "hex", "TimeZone": "UTC"}
ZONES = {"tz_kolkata": {"TimeZone": "Asia/Kolkata"}, "tz_st_johns": {"TimeZone": "America/St_Johns"},
         "tz_los_angeles": {"TimeZone": "America/Los_Angeles"}}
INTERVAL_STYLES = {"iso_8601": {"IntervalStyle": "iso_8601"}, "sql_standard": {"IntervalStyle": "sql_standard"},
                   "postgres_verbose": {"IntervalStyle": "postgres_verbose"}}
SHORTEST_FLOATS = {"efd1": {"extra_float_digits": "1"}}
BYTEA_ESCAPE = {"escape": {"bytea_output": "escape"}}

SETUP = """
DROP SCHEMA IF EXISTS vec CASCADE;
CREATE SCHEMA vec;
CREATE TYPE vec.mood AS ENUM ('happy', 'sad', 'très content', 'with space', 'NULL', 'a,b"c');
CREATE TYPE vec.pair AS (a int, b text);
CREATE DOMAIN vec.dint AS int4 CHECK (VALUE > 0);
CREATE DOMAIN vec.dnum AS numeric(10,2);
CREATE DOMAIN vec.dtext AS text;
CREATE DOMAIN vec.dts AS timestamptz;
CREATE DOMAIN vec.darr AS int4[];
CREATE DOMAIN vec.dmood AS vec.mood;
"""

# SQL oracles; {v} is the value. Each yields jsonb.
ORACLES = {
    "json": "to_jsonb({v})",
    "bigint": "to_jsonb({v}::text::bigint)",
    "float4": "to_jsonb(encode(float4send({v}), 'hex'))",
    "float8": "to_jsonb(encode(float8send({v}), 'hex'))",
    "output": "to_jsonb({out}({v})::text)",
    "money": "to_jsonb({v}::numeric::text)",
    "bytea": "to_jsonb(encode({v}, 'hex'))",
    "date": "CASE WHEN isfinite({v}) THEN to_jsonb({v} - date '1970-01-01') ELSE to_jsonb({v}::text) END",
    "timestamp": "CASE WHEN isfinite({v}) THEN to_jsonb(trunc(extract(epoch FROM {v}) * 1000000)::text) "
                 "ELSE to_jsonb({v}::text) END",
    "time": "to_jsonb((extract(epoch FROM {v}) * 1000000)::bigint)",
    "timetz": "jsonb_build_array((extract(epoch FROM {v}::time) * 1000000)::bigint, "
              "extract(timezone FROM {v})::int)",
    "interval": "CASE WHEN isfinite({v}) THEN jsonb_build_array("
                "(extract(year FROM {v}) * 12 + extract(month FROM {v}))::int, extract(day FROM {v})::int, "
                "(extract(hour FROM {v}) * 3600000000 + extract(minute FROM {v}) * 60000000 "
                "+ extract(microseconds FROM {v}))::bigint) ELSE to_jsonb({v}::text) END",
}
NUMERIC_NAN = {"error": 'numeric type option to "string"'}
MULTI = {"error": "a 2-dimensional array in a column of 1 dimension"}
TOO_LATE = {"note": "clamped to the last finite int64 microsecond (docs/TYPES.md)"}


def case(name: str, sql_type: str, oracle: str, values: list, *, variants: dict | None = None,
         options: dict | None = None, binary: str | None = None) -> dict:
    return {"name": name, "sql_type": sql_type, "oracle": oracle, "values": values, "variants": variants or {},
            "options": options or {}, "binary_policy": binary}


def hex_elements(send: str) -> str:
    """Policy oracle for arrays of types kept as '\\x' + hex of their send form."""
    return (f"(SELECT jsonb_agg(CASE WHEN e IS NULL THEN NULL ELSE '\\x' || encode({send}(e), 'hex') END "
            "ORDER BY o) FROM unnest({v}) WITH ORDINALITY u(e, o))")


def array_oracle(element: str) -> str:
    inner = ORACLES[element].replace("{v}", "e")
    return f"(SELECT coalesce(jsonb_agg({inner} ORDER BY o), '[]'::jsonb) FROM unnest({{v}}) WITH ORDINALITY u(e, o))"


TIMESTAMPS = ["'2024-01-02 03:04:05.123456'", "'1970-01-01 00:00:00'", "'1969-12-31 23:59:59.999999'",
              "'2000-02-29 12:00:00.5'", "'0001-01-01 00:00:00'", "'0001-12-31 23:59:59.999999 BC'",
              "'4713-01-01 00:00:00 BC'", "'9999-12-31 23:59:59.999999'", "'10000-01-01 00:00:00'",
              "'200000-06-15 12:30:00.000001'", "'1900-01-01 00:00:00'", "'1800-07-04 12:00:00'",
              "'infinity'", "'-infinity'", ("'294276-12-31 23:59:59.999999'", TOO_LATE)]
INTERVALS = ["'0'", "'1 year 2 mons 3 days 04:05:06.789'", "'-1 year -2 mons'", "'1 day -00:00:01'",
             "'-1 days +00:00:01'", "'1 mon -1 sec'", "'-0.000001 sec'", "'100000 hours'", "'3 days'",
             "'-3 days'", "'5 days -1 hour'", "'1 year -3 days'", "'-1 year -2 mons -3 days -04:05:06.5'",
             "'178956970 years 7 mons 2147483646 days 2562047788:00:54.775807'",
             "interval '-178956970 years -8 mons' + interval '-2147483647 days' "
             "+ interval '-2562047788 hours' - interval '54.775808 sec'",
             "'infinity'", "'-infinity'", "'12 mons'", "'-1.5 sec'"]
INETS = ["'1.2.3.4'", "'1.2.3.4/24'", "'0.0.0.0/0'", "'255.255.255.255'", "'10.1.2.3/8'", "'::1'", "'::'",
         "'::/0'", "'2001:db8::1/64'", "'fe80::1:0:0:0:1'", "'::ffff:1.2.3.4'", "'::1.2.3.4'", "'::0.0.1.2'",
         "'1::'", "'1:0:0:1::'", "'2001:db8:0:0:1:0:0:1'", "'::ffff:1.2.3.4/120'", "'1:2:3:4:5:6:7:8'",
         "'0:0:1::'", "'::ffff:0:1.2.3.4'", "'::1:0:0:0'", "'ffff::ffff:1.2.3.4'", "'0:0:0:0:0:ffff:0:0'"]

CASES: dict[str, list[dict]] = {
    "numbers": [
        case("bool", "bool", "json", ["true", "false"]),
        case("int2", "int2", "json", ["0", "1", "-1", "32767", "-32768"]),
        case("int4", "int4", "json", ["0", "42", "-42", "2147483647", "-2147483648"]),
        case("int8", "int8", "json", ["0", "1234567890123", "9223372036854775807", "-9223372036854775808"]),
        case("oid", "oid", "bigint", ["0", "16384", "4294967295"]),
        case("xid", "xid", "bigint", ["'0'", "'4294967295'"]),
        case("float4", "float4", "float4",
             ["0", "'-0'", "1.5", "'NaN'", "'Infinity'", "'-Infinity'", "'3.4028235e38'", "'1.4e-45'",
              "'1.17549435e-38'", "0.1", "'1e30'", "123456.79", "'-2.5e-10'", "16777217"],
             variants=SHORTEST_FLOATS),
        case("float8", "float8", "float8",
             ["0", "'-0'", "0.1", "1.0/3", "'NaN'", "'Infinity'", "'-Infinity'", "'1.7976931348623157e308'",
              "'5e-324'", "'2.2250738585072014e-308'", "1e15", "1e16", "1e22", "123456789012345678",
              "'-1.5e-7'", "100", "'0.30000000000000004'"], variants=SHORTEST_FLOATS),
        case("numeric", "numeric", "output",
             ["0", "0.00", "1.50", "-1.5", "'NaN'", "'Infinity'", "'-Infinity'", "1e100", "0.000001234",
              "123456789012345678901234567890.123456789", "-0.0000000001", "10000", "9999.9999",
              "'1e-100'", "-12345678901234567890"]),
        case("numeric_10_2", "numeric(10,2)", "output",
             ["0", "1.5", "-99999999.99", "99999999.99", "0.01", "-0.01", "12.345", ("'NaN'", NUMERIC_NAN),
              "'Infinity'"]),
        case("numeric_10_2_as_string", "numeric(10,2)", "output", ["1.5", "'NaN'", "-0.01"],
             options={"numeric": "string"}),
        case("numeric_18_4", "numeric(18,4)", "output",
             ["99999999999999.9999", "-99999999999999.9999", "-0.0001", "1", "12345.6789", "0"]),
        case("numeric_38_10", "numeric(38,10)", "output",
             ["9999999999999999999999999999.9999999999", "-1.0000000001", "0", "1e20"]),
        case("numeric_19_0", "numeric(19,0)", "output", ["9999999999999999999", "-1", "0"]),
        case("numeric_39_2", "numeric(39,2)", "output", ["1234567890123456789012345678901234567.89", "'NaN'"]),
        case("numeric_3_neg2", "numeric(3,-2)", "output", ["123.45", "99900", "-12345", "0"]),
        case("numeric_2_5", "numeric(2,5)", "output", ["0.00099", "-0.00001", "0"]),
        case("money", "money", "money",
             ["0", "1.5", "-1234.56", "'92233720368547758.07'", "'-92233720368547758.08'", "0.01", "-0.01",
              "1000000"]),
        case("xid8", "xid8", "output", ["'0'", "'18446744073709551615'", "'4294967296'"]),
    ],
    "strings": [
        case("text", "text", "output",
             ["''", "'hello'", "'héllo wörld ✓ 😀'", "E'tab\\tnew\\nline'", "'quote\"s and \\\\ back'", "'NULL'",
              "repeat('long ', 300)", "E'\\x01ctrl'"]),
        case("varchar_10", "varchar(10)", "output", ["'abc'", "''", "'ten chars!'"]),
        case("bpchar_5", "char(5)", "output", ["'ab'", "''", "'abcde'", "'é'"]),
        case("name", "name", "output", ["'pg_class'", "'a name with spaces'"]),
        case("char", '"char"', "output", ["'a'", "''", "chr(200)", "E'\\x01'", "'\\'"]),
        case("bytea", "bytea", "bytea",
             ["'\\x'", "'\\x00'", "'\\x000102ff'", "'abc'", "decode(repeat('00ff5c27', 64), 'hex')",
              "'\\\\'::bytea", "E'\\\\x5c'::bytea"], variants=BYTEA_ESCAPE),
        case("uuid", "uuid", "output",
             ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'",
              "'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF'"]),
        case("json", "json", "output", ["'{\"a\": [1, 2.50, null]}'", "'\"str\"'", "'null'", "'{\"é\":\"😀\"}'"]),
        case("jsonb", "jsonb", "output",
             ["'{\"b\": 1, \"a\": [1, 2.50, null]}'", "'\"str\"'", "'null'", "'{\"é\":\"😀\"}'", "'1e3'"]),
        case("jsonpath", "jsonpath", "output", ["'$.a[*] ? (@ > 1)'"]),
        case("inet", "inet", "output", INETS),
        case("cidr", "cidr", "output",
             ["'10.0.0.0/8'", "'1.2.3.4/32'", "'::/0'", "'2001:db8::/32'", "'::ffff:1.2.3.0/120'", "'0.0.0.0/0'",
              "'128.0.0.0/1'", "'::1/128'", "'fe80::/10'"]),
        case("macaddr", "macaddr", "output", ["'08:00:2b:01:02:03'", "'FF-FF-FF-FF-FF-FF'"]),
        case("macaddr8", "macaddr8", "output", ["'08:00:2b:01:02:03:04:05'", "'08:00:2b:01:02:03'"]),
        case("bit_8", "bit(8)", "output", ["B'10101010'", "B'00000000'", "B'11111111'"]),
        case("varbit", "varbit", "output", ["B''", "B'1'", "B'101'", "B'10000000000000001'"]),
        case("pg_lsn", "pg_lsn", "output", ["'0/0'", "'16/B374D848'", "'FFFFFFFF/FFFFFFFF'", "'0/1'"]),
        case("tid", "tid", "output", ["'(0,1)'", "'(4294967295,65535)'"]),
        case("point", "point", "output", ["'(1,2)'", "'(-1.5,1e300)'"], binary="hex"),
        case("int4range", "int4range", "output", ["'[1,5)'", "'empty'"], binary="hex"),
        case("tsvector", "tsvector", "output", ["'a fat cat'"], binary="hex"),
    ],
    "datetime": [
        case("date", "date", "date",
             ["'2024-01-02'", "'1970-01-01'", "'1969-12-31'", "'0001-01-01'", "'0001-12-31 BC'",
              "'0044-03-15 BC'", "'4714-11-24 BC'", "'5874897-12-31'", "'infinity'", "'-infinity'",
              "'2000-02-29'", "'9999-12-31'", "'10000-01-01'", "'1582-10-10'"]),
        case("time", "time", "time",
             ["'00:00'", "'23:59:59.999999'", "'24:00:00'", "'12:34:56.5'", "'01:02:03.000001'"]),
        case("time_0", "time(0)", "time", ["'12:34:56.7'", "'00:00:00'"]),
        case("timetz", "timetz", "timetz",
             ["'12:00:00+05:30'", "'00:00:00-08'", "'23:59:59.999999+15:59'", "'12:00:00+05:30:15'",
              "'24:00:00+00'", "'06:07:08.09-03:30'"]),
        case("timestamp", "timestamp", "timestamp", TIMESTAMPS),
        case("timestamp_3", "timestamp(3)", "timestamp", ["'2024-01-02 03:04:05.123456'", "'2024-01-02 03:04:05'"]),
        case("timestamptz", "timestamptz", "timestamp",
             [v.replace("'294276-12-31 23:59:59.999999'", "'294276-12-31 23:59:59.999999+00'")
              if isinstance(v, str) else (v[0][:-1] + "+00'", v[1]) for v in TIMESTAMPS]
             + ["'2024-07-01 12:00:00+00'", "'1883-11-18 12:00:00+00'", "'2024-03-10 10:00:00+00'"],
             variants=ZONES),
        case("interval", "interval", "interval", INTERVALS, variants=INTERVAL_STYLES),
    ],
    "arrays": [
        case("int4_array", "int4[]", array_oracle("json"),
             ["'{}'", "'{1,2,3}'", "'{1,NULL,3}'", "'{NULL}'", "'[0:2]={1,2,3}'", "'[-5:-4]={7,8}'",
              ("'{{1,2},{3,4}}'", MULTI)]),
        case("int8_array", "int8[]", array_oracle("json"), ["'{9223372036854775807,-1}'"]),
        case("text_array", "text[]", array_oracle("output").replace("{out}", "textout"),
             ["'{}'", "ARRAY['a b', 'NULL', NULL, 'x\"y', 'c\\d', '', 'a', '{}', 'a,b', ' lead', 'trail ', 'é', "
              "'null', E'tab\\t', 'NuLl']", "'{plain,words}'", "ARRAY['']", "ARRAY[NULL]::text[]"]),
        case("numeric_array", "numeric(10,2)[]", array_oracle("output").replace("{out}", "numeric_out"),
             ["'{1.5,-2.25,NULL}'", ("'{1,NaN}'", NUMERIC_NAN)]),
        case("numeric_unconstrained_array", "numeric[]", array_oracle("output").replace("{out}", "numeric_out"),
             ["'{1.5,NaN,-Infinity,1e30}'"]),
        case("float8_array", "float8[]", array_oracle("float8"), ["'{NaN,Infinity,-Infinity,-0,0.1}'"]),
        case("bool_array", "bool[]", array_oracle("json"), ["'{t,f,NULL}'"]),
        case("date_array", "date[]", array_oracle("date"), ["'{2024-01-02,infinity,\"0044-03-15 BC\",NULL}'"]),
        case("timestamptz_array", "timestamptz[]", array_oracle("timestamp"),
             ["ARRAY['2024-01-02 03:04:05.5+00', '-infinity', '1900-01-01 00:00:00+00']::timestamptz[]"],
             variants=ZONES),
        case("interval_array", "interval[]", array_oracle("interval"),
             ["ARRAY['1 day -00:00:01', '-1 year', 'infinity']::interval[]"], variants=INTERVAL_STYLES),
        case("bytea_array", "bytea[]", array_oracle("bytea"), ["ARRAY['\\x01'::bytea, NULL, '\\x'::bytea, 'a\\\\b']"],
             variants=BYTEA_ESCAPE),
        case("uuid_array", "uuid[]", array_oracle("output").replace("{out}", "uuid_out"),
             ["'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}'"]),
        case("inet_array", "inet[]", array_oracle("output").replace("{out}", "inet_out"),
             ["'{1.2.3.4/24,::1,::ffff:1.2.3.4}'"]),
        case("json_array", "json[]", array_oracle("output").replace("{out}", "json_out"),
             ["ARRAY['{\"a\": \"b,c\"}', '[1, 2]', 'null']::json[]"]),
        case("jsonb_array", "jsonb[]", array_oracle("output").replace("{out}", "jsonb_out"),
             ["ARRAY['{\"a\": \"b\\\\c\"}', '[]']::jsonb[]"]),
        case("money_array", "money[]", array_oracle("money"), ["'{-1.50,\"$1,000.00\"}'"]),
        case("bpchar_array", "char(3)[]", array_oracle("output").replace("{out}", "bpcharout"), ["'{a,bc,NULL}'"]),
        case("char_array", '"char"[]', array_oracle("output").replace("{out}", "charout"), ["ARRAY['a', '\\', '\"']::\"char\"[]"]),
        case("varbit_array", "varbit[]", array_oracle("output").replace("{out}", "varbit_out"), ["'{1,0101,\"\"}'"]),
        case("time_array", "time[]", array_oracle("time"), ["'{00:00,24:00:00,12:00:00.25}'"]),
        case("timetz_array", "timetz[]", array_oracle("timetz"), ["'{00:00+01,\"12:00:00.5-03:30\"}'"]),
        case("point_array", "point[]", array_oracle("output").replace("{out}", "point_out"), ["'{\"(1,2)\"}'"],
             binary=hex_elements("point_send")),
        case("box_array", "box[]", array_oracle("output").replace("{out}", "box_out"),
             ["ARRAY['((1,1),(0,0))'::box, NULL, '((3,3),(2,2))'::box]"], binary=hex_elements("box_send")),
    ],
    "user": [
        case("domain_int4", "vec.dint", "json", ["1", "2147483647"]),
        case("domain_numeric_10_2", "vec.dnum", "output", ["1.5", "'NaN'", "-99999999.99"]),
        case("domain_text", "vec.dtext", "output", ["'héllo'"]),
        case("domain_timestamptz", "vec.dts", "timestamp", ["'2024-01-02 03:04:05+00'", "'infinity'"]),
        case("domain_int4_array", "vec.darr", array_oracle("json"), ["'{1,NULL,3}'"]),
        case("enum", "vec.mood", "output", ["'happy'", "'très content'", "'with space'", "'NULL'", "'a,b\"c'"]),
        case("domain_enum", "vec.dmood", "output", ["'sad'"]),
        case("enum_array", "vec.mood[]", array_oracle("output").replace("{out}", "enum_out"),
             ["'{happy,NULL,\"très content\",\"with space\",\"NULL\",\"a,b\\\"c\"}'"]),
        case("composite", "vec.pair", "output", ["ROW(1, 'x')", "ROW(NULL, 'a\"b')", "ROW(NULL, NULL)"],
             binary="hex"),
    ],
}


def _type_info(cur, table: str) -> dict[str, Any]:
    cur.execute("SELECT a.atttypid::int, a.atttypmod, t.typoutput::regproc::text, t.typsend::regproc::text, "
                "format_type(getbase.oid, NULL) FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "CROSS JOIN LATERAL (WITH RECURSIVE b(oid, base) AS (SELECT t.oid, t.typbasetype UNION ALL "
                "SELECT d.oid, d.typbasetype FROM pg_type d JOIN b ON d.oid = b.base) "
                "SELECT oid FROM b WHERE base = 0) getbase "
                "WHERE a.attrelid = %s::regclass AND a.attname = 'v'", (table,))
    oid, typmod, output, send, base = cur.fetchone()
    # Output and send functions take the base type (enum_out does not accept a domain over an enum).
    info = {"type_oid": oid, "type_modifier": typmod, "typoutput": output, "typsend": send, "user_type": None,
            "base_sql": base}
    if oid >= 10000:  # pgoutput sends a Type message, naming getBaseType(oid)
        cur.execute("WITH RECURSIVE b(oid, base) AS (SELECT oid, typbasetype FROM pg_type WHERE oid = %s "
                    "UNION ALL SELECT t.oid, t.typbasetype FROM pg_type t JOIN b ON t.oid = b.base) "
                    "SELECT CASE WHEN n.nspname = 'pg_catalog' THEN '' ELSE n.nspname END, t.typname "
                    "FROM b JOIN pg_type t ON t.oid = b.oid JOIN pg_namespace n ON n.oid = t.typnamespace "
                    "WHERE b.base = 0", (oid,))
        info["user_type"] = list(cur.fetchone())
    return info


def generate_case(conn, spec: dict) -> dict:
    """Run one case against ``conn`` (autocommit off) and return its JSON group."""
    table = "vec.v_" + spec["name"]
    cur = conn.cursor()
    cur.execute(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (o int, v {spec['sql_type']})")
    conn.commit()
    accepted, rejected = [], []
    for entry in spec["values"]:
        sql, extra = (entry, {}) if isinstance(entry, str) else entry
        try:
            cur.execute(f"INSERT INTO {table} VALUES (%s, {sql})", (len(accepted),))
            conn.commit()
            accepted.append((sql, extra))
        except Exception as exc:  # the server refuses the value: record what it said
            conn.rollback()
            rejected.append({"sql": sql, "server_error": str(exc).splitlines()[0]})
    info = _type_info(cur, table)
    out_fn, send_fn = info["typoutput"], info["typsend"]

    def column(expr: str, settings: dict[str, str]) -> list:
        for key, value in {**BASE_SETTINGS, **settings}.items():
            cur.execute("SELECT set_config(%s, %s, true)", (key, value))
        cur.execute(f"SELECT ({expr})::text FROM {table} t ORDER BY o")
        rows = [r[0] for r in cur.fetchall()]
        conn.rollback()
        return rows

    value = f"t.v::{info.pop('base_sql')}"
    texts = {"default": column(f"{out_fn}({value})::text", {})}
    for name, settings in spec["variants"].items():
        texts[name] = column(f"{out_fn}({value})::text", settings)
    binaries = column(f"encode({send_fn}({value}), 'hex')", {})
    oracle = ORACLES.get(spec["oracle"], spec["oracle"]).replace("{out}", out_fn).replace("{v}", f"({value})")
    expected = column(oracle, {})
    if spec["binary_policy"] not in (None, "hex"):
        binary_expected = column(spec["binary_policy"].replace("{v}", f"({value})"), {})
    vectors = []
    for i, (sql, extra) in enumerate(accepted):
        vector = {"sql": sql, "text": {k: v[i] for k, v in texts.items()}, "binary": binaries[i],
                  "expected": json.loads(expected[i]) if expected[i] is not None else None}
        if "error" in extra:
            vector["error"] = extra["error"]
        elif "note" in extra:
            vector["note"] = extra["note"]
        elif spec["binary_policy"] == "hex":
            vector["expected_binary"] = "\\x" + binaries[i]
        elif spec["binary_policy"] is not None:
            vector["expected_binary"] = json.loads(binary_expected[i])
        vectors.append(vector)
    cur.execute(f"DROP TABLE {table}")
    conn.commit()
    return {"name": spec["name"], "sql_type": spec["sql_type"], **info, "options": spec["options"],
            "vectors": vectors, "rejected": rejected}


def generate(conn) -> dict[str, dict]:
    """Every vector file's content, keyed by file stem (values_<family>)."""
    cur = conn.cursor()
    cur.execute(SETUP)
    cur.execute("SHOW server_version")
    version = cur.fetchone()[0]
    conn.commit()
    files = {}
    for family, specs in CASES.items():
        files[f"values_{family}"] = {
            "generated_by": "tests/pgoutput/gen_value_vectors.py", "server_version": version,
            "settings": BASE_SETTINGS, "groups": [generate_case(conn, spec) for spec in specs]}
    cur.execute("DROP SCHEMA vec CASCADE")
    conn.commit()
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="libpq connection string; default: a throw-away embedded server")
    args = parser.parse_args()
    server = None
    if args.dsn:
        import psycopg2

        conn = psycopg2.connect(args.dsn)
    else:
        from cdc_apply.testing.postgres import start_postgres

        server = start_postgres()
        conn = server.connect(autocommit=False)
    try:
        DATA.mkdir(exist_ok=True)
        for stem, content in generate(conn).items():
            path = DATA / f"{stem}.json"
            path.write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"wrote {path} ({sum(len(g['vectors']) for g in content['groups'])} vectors)")
    finally:
        conn.close()
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main()
