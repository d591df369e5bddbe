"""Scenario `types`: every type the type map covers, with edge values, inserted table by table.

Each table has a one-column primary key, so ``values.json`` can name every value by
(table, key, column). The workload session runs with TimeZone UTC; inputs with other
offsets are converted on input, so the ``::text`` forms show ``+00`` (or the offset of the
decoding session's TimeZone in the ``v1_kolkata`` capture).

The embedded PostgreSQL is built without libxml, so the ``xml`` column exists (its type
shows in the Relation message) but holds only NULLs: any xml input needs libxml.
"""

from __future__ import annotations

from ..harness import TYPES_CONFIGS, Scenario, Workload

SCHEMA = r"""
CREATE SCHEMA app;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'très "bien"', 'with space');
CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
CREATE DOMAIN short_text AS text CHECK (length(VALUE) <= 20);
CREATE DOMAIN app.tiny_posint AS posint CHECK (VALUE < 100);
CREATE DOMAIN app.code8 AS varchar(8);
CREATE TYPE app.pair AS (a int4, b text, c numeric(5,2));

CREATE TABLE types_scalar (id int4 PRIMARY KEY, c_bool bool, c_int2 int2, c_int4 int4, c_int8 int8,
    c_oid oid, c_float4 float4, c_float8 float8);
CREATE TABLE types_numeric (id int4 PRIMARY KEY, c_num_10_2 numeric(10,2), c_num_38_10 numeric(38,10),
    c_num_38_0 numeric(38,0), c_num_50_10 numeric(50,10), c_num numeric);
CREATE TABLE types_numeric_scale (id int4 PRIMARY KEY, c_neg_scale numeric(5,-2), c_scale_gt_prec numeric(3,5));
CREATE TABLE types_text (id int4 PRIMARY KEY, c_text text, c_varchar varchar(10), c_varchar_nolimit varchar,
    c_bpchar char(5), c_bpchar1 char, c_name name, c_char "char");
CREATE TABLE types_bytea (id int4 PRIMARY KEY, c_bytea bytea);
CREATE TABLE types_datetime (id int4 PRIMARY KEY, c_date date, c_time time, c_time3 time(3), c_timetz timetz,
    c_ts timestamp, c_ts0 timestamp(0), c_tstz timestamptz, c_tstz3 timestamptz(3), c_interval interval,
    c_interval_hm interval hour to minute, c_interval3 interval(3));
CREATE TABLE types_misc (id int4 PRIMARY KEY, c_uuid uuid, c_json json, c_jsonb jsonb, c_xml xml, c_inet inet,
    c_cidr cidr, c_macaddr macaddr, c_macaddr8 macaddr8, c_money money, c_bit8 bit(8), c_varbit16 varbit(16),
    c_varbit varbit, c_bit1 bit);
CREATE TABLE types_array (id int4 PRIMARY KEY, a_int4 int4[], a_int8 int8[], a_text text[], a_varchar varchar(5)[],
    a_numeric numeric[], a_float8 float8[], a_date date[], a_tstz timestamptz[], a_bool bool[], a_bytea bytea[],
    a_uuid uuid[], a_jsonb jsonb[], a_interval interval[], a_inet inet[]);
CREATE TABLE types_array_multi (id int4 PRIMARY KEY, a_int4_2d int4[][], a_text_2d text[][]);
CREATE TABLE app.user_types (id int4 PRIMARY KEY, c_mood mood, c_posint posint, c_short short_text,
    c_tiny app.tiny_posint, c_code app.code8, c_pair app.pair, c_moods mood[], c_pairs app.pair[],
    c_posints posint[]);
CREATE TABLE "Mixed Case Tbl" ("Id" int4 PRIMARY KEY, "weird col" text, "ünï_col" int4);
"""

SCALAR = r"""
INSERT INTO types_scalar VALUES
 (1, true, 0, 0, 0, 0, 0, 0),
 (2, false, -32768, -2147483648, -9223372036854775808, 0, '-0', '-0'),
 (3, true, 32767, 2147483647, 9223372036854775807, 4294967295, 'NaN', 'NaN'),
 (4, false, 1, 1, 1, 1, 'Infinity', 'Infinity'),
 (5, true, -1, -1, -1, 2147483648, '-Infinity', '-Infinity'),
 (6, true, 12345, 123456789, 1234567890123456789, 12345, '3.4028235e38', '1.7976931348623157e308'),
 (7, false, -2, -3, -4, 5, '1.4e-45', '5e-324'),
 (8, true, 2, 3, 4, 6, '1.17549435e-38', '2.2250738585072014e-308'),
 (9, false, 3, 4, 5, 7, '0.1', '0.1'),
 (10, true, 4, 5, 6, 8, '3.14159265', pi()),
 (11, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (12, true, 5, 6, 7, 9, '-3.4028235e38', '-1e-300')
"""

NUMERIC = r"""
INSERT INTO types_numeric VALUES
 (1, 0, 0, 0, 0, 0),
 (2, 12345678.91, 9999999999999999999999999999.9999999999, 99999999999999999999999999999999999999,
     1234567890123456789012345678901234567890.0123456789, 1.500),
 (3, -12345678.91, -0.0000000001, -1, -9999999999999999999999999999999999999999.9999999999, -0.000001),
 (4, 'NaN', 'NaN', 'NaN', 'NaN', 'NaN'),
 (5, 0.005, 0.00000000005, 0.5, 0.00000000005, 'Infinity'),
 (6, -0.005, 1.5, -0.5, 1, '-Infinity'),
 (7, 1, 1, 1, 1, 1e100),
 (8, 2, 2, 2, 2, 1e-100),
 (9, 3, 3, 3, 3, 123456789012345678901234567890.123456789012345678901234567890),
 (10, NULL, NULL, NULL, NULL, NULL),
 (11, -0.00, -0, -0, -0.0, -0.0),
 (12, 99999999.99, 10000000000, 12345678901234567890, 100.1000000000, 0.10)
;
INSERT INTO types_numeric_scale VALUES (1, 12345, 0.00123), (2, -99949, -0.00999), (3, 50, 0), (4, NULL, NULL)
"""

TEXT = r"""
INSERT INTO types_text VALUES
 (1, 'plain', 'plain', 'plain', 'ab', 'x', 'pg_class', 'a'),
 (2, '', '', '', '', '', '', ''),
 (3, '  trailing spaces  ', 'trail  ', ' lead', 'a  ', ' ', 'with space', ' '),
 (4, 'ünïcödé 日本語 ✓ 🎉', '日本語テキスト十文字', 'émoji 🎉', 'ü', 'ü', 'ünï', 'é'),
 (5, E'quote \' double " backslash \\ tab \t newline \n cr \r end', E'a\\b', E'line1\nline2', '"q"', '\',
     'Name"With"Quotes', '"'),
 (6, 'NULL', 'null', 'NULL', 'NULL', 'N', 'NULL', 'N'),
 (7, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (8, repeat('abc', 100), '0123456789', repeat('x', 1000), 'abcde', 'z', repeat('n', 70), 'z'),
 (9, '{a,b}', '(1,2)', '[]', '{}', '{', 'a,b', ',')
"""

BYTEA = r"""
INSERT INTO types_bytea VALUES (1, ''), (2, '\x00'), (3, '\x00ff10'), (4, 'abc'::bytea), (5, NULL),
 (6, (SELECT decode(string_agg(lpad(to_hex(i), 2, '0'), '' ORDER BY i), 'hex') FROM generate_series(0, 255) i)),
 (7, convert_to('ünï', 'UTF8'))
"""

DATETIME = r"""
INSERT INTO types_datetime VALUES
 (1, '2000-01-01', '00:00:00', '00:00:00', '00:00:00+00', '2000-01-01 00:00:00', '2000-01-01 00:00:00',
     '2000-01-01 00:00:00+00', '2000-01-01 00:00:00+00', '0', '0', '0'),
 (2, '1999-12-31', '23:59:59.999999', '23:59:59.999', '23:59:59.999999+14:00', '1999-12-31 23:59:59.999999',
     '1999-12-31 23:59:59.5', '1999-12-31 23:59:59.999999+00', '1999-12-31 23:59:59.9999+00',
     '1 year 2 mons 3 days 04:05:06.789012', '4 hours 5 minutes 6 seconds', '1.23456 seconds'),
 (3, '4713-01-01 BC', '24:00:00', '12:34:56.789', '12:34:56+05:30', '4713-01-01 00:00:00 BC',
     '0001-01-01 00:00:00 BC', '4713-01-01 00:00:00+00 BC', '0001-12-31 23:59:59.123+00 BC',
     '-1 years -2 mons +3 days -04:05:06', '-36 hours', '-0.001 seconds'),
 (4, '5874897-12-31', '12:00', '00:00:00.0005', '00:00:00-12:45', '294276-12-31 23:59:59.999999',
     '294276-12-31 23:59:59', '294276-12-31 23:59:59.999999+00', '2024-02-29 12:00:00.123456+05:30',
     '178000000 years', '1 day', '1 mon'),
 (5, 'infinity', '01:02:03', '01:02:03', '01:02:03.456789-03:30', 'infinity', 'infinity', 'infinity', 'infinity',
     'infinity', 'infinity', 'infinity'),
 (6, '-infinity', '23:00', '23:00', '23:00:00+00', '-infinity', '-infinity', '-infinity', '-infinity',
     '-infinity', '-infinity', '-infinity'),
 (7, '1970-01-01', '13:14:15', '13:14:15', '13:14:15-00', '1970-01-01 00:00:00', '1970-01-01 00:00:00',
     '1970-01-01 00:00:00+00', '1970-01-01 00:00:00+00', '1 mon -1 days +00:00:00.000001', '-1 day', '1 year'),
 (8, '2024-02-29', '06:00', '06:00', '06:00:00+01:02:03', '2024-02-29 23:59:59', '2024-02-29 23:59:59',
     '1900-01-01 00:00:00+00', '0001-01-01 00:00:00+00', '3 days 25:00:00', '100 hours 59 minutes', '-1 mon'),
 (9, '0001-01-01 BC', '00:00:00.000001', '00:00:00.001', '00:00:00.000001+15:59', '2000-01-01 00:00:00.000001',
     '2000-01-01 00:00:00', '2024-06-15 12:00:00+05:30', '2024-06-15 12:00:00-09:45',
     '-1 mons +1 day -00:00:00.000001', '-1 hours -1 minutes', '1 day 00:00:00.001'),
 (10, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (11, '2038-01-19', '03:14:07', '03:14:07', '03:14:07+00', '2038-01-19 03:14:08', '2038-01-19 03:14:08',
     '2038-01-19 03:14:08+00', '1969-12-31 23:59:59.999999+00', '-178000000 years', '23:59', '6 mons 14 days')
"""

MISC = r"""
INSERT INTO types_misc VALUES
 (1, '00000000-0000-0000-0000-000000000000', 'null', 'null', NULL, '0.0.0.0', '0.0.0.0/0',
     '00:00:00:00:00:00', '00:00:00:00:00:00:00:00', '0', B'00000000', B'', B'', B'0'),
 (2, 'ffffffff-ffff-ffff-ffff-ffffffffffff', '{"b": 1,  "a": [1, 2.50], "b": 2}',
     '{"b": 1,  "a": [1, 2.50], "b": 2}', NULL, '192.168.1.5/24',
     '192.168.1.0/24', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', '-92233720368547758.08', B'10101010',
     B'1010101010101010', repeat('1', 100)::varbit, B'1'),
 (3, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '"str \"quoted\" \\ \u00e9"', '"str \"quoted\" \\ \u00e9"',
     NULL, '::1', '2001:db8::/32', 'AA-BB-CC-DD-EE-FF', '08:00:2b:01:02:03', '92233720368547758.07',
     B'11110000', B'101', repeat('01', 100)::varbit, B'0'),
 (4, 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '[1, "two", {"three": 3.0}, null, true]',
     '{"nested": {"deep": [1, {"x": null}]}, "num": 1e3, "big": 12345678901234567890, "f": 1.50}',
     NULL, '2001:db8::1/64', '10.0.0.0/8', 'aabb.ccdd.eeff',
     '0800.2b01.0203.0405', '1234.56', B'00000001', B'1111111111111111', B'1', B'1'),
 (5, '{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a12}', '{}', '{}', NULL, '10.0.0.1/32',
     '192.168.1.1', '01:02:03:04:05:06', '01:02:03:04:05:06:07:08', '-0.01', B'11111111', B'0', B'0', B'1'),
 (6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (7, 'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13', '"é \ud83c\udf89"', '["é", "\ud83c\udf89", "tab\tand\nnl"]',
     NULL, '::ffff:1.2.3.4', '::ffff:1.2.3.0/120', '00:00:5e:00:53:01', '00:00:5e:00:53:01:02:03', '0.99',
     B'01010101', B'1100', B'10', B'0')
"""

ARRAYS = r"""
INSERT INTO types_array VALUES
 (1, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}'),
 (2, '{1,2,3}', '{-9223372036854775808,9223372036854775807}', '{a,b,c}', '{ab,cde}', '{1.5,2.25,-3}',
     '{0.1,-2.5,1e300}', '{2000-01-01,1999-12-31}', '{"2024-01-01 00:00:00+00","2024-06-15 12:00:00+05:30"}',
     '{t,f}', ARRAY['\x00ff'::bytea, 'abc'::bytea], '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}',
     ARRAY['{"a": 1}'::jsonb, '[1, 2]'::jsonb], '{"1 day","-1 mons +00:00:01"}', '{192.168.0.1/24,::1}'),
 (3, '{1,NULL,3}', '{NULL,2}', '{a,NULL,c}', '{NULL,x}', '{NULL,1}', '{NULL,0}', '{NULL,2000-01-01}',
     '{NULL,"2000-01-01 00:00:00+00"}', '{t,NULL,f}', ARRAY[NULL, '\x'::bytea], '{NULL}',
     ARRAY[NULL, 'null'::jsonb], '{NULL,"00:00:01"}', '{NULL,10.0.0.1}'),
 (4, '{-2147483648,0,2147483647}', '{0}',
     ARRAY['a,b', 'say "hi"', '{braces}', 'back\slash', ' lead and trail ', 'NULL', NULL, '', 'ünï 🎉',
           E'new\nline', 'tab	tab', 'semi;colon'],
     ARRAY['a,b', '"', '\', 'NULL', ' '], '{1.5,NaN,-0.001,Infinity,-Infinity,1e-20}',
     '{NaN,Infinity,-Infinity,-0,1.7976931348623157e308,5e-324}',
     '{2000-01-01,infinity,-infinity,"4713-01-01 BC","5874897-12-31"}',
     '{"2024-01-01 00:00:00+05:30",infinity,-infinity,"0044-03-15 12:00:00+00 BC"}', '{t,f,NULL}',
     ARRAY['\x00'::bytea, '', NULL, '\x5c22'], '{ffffffff-ffff-ffff-ffff-ffffffffffff,NULL}',
     ARRAY['{"a": "b,c"}'::jsonb, '"str"'::jsonb, 'null'::jsonb, NULL, '{"k": "say \"hi\""}'::jsonb],
     '{infinity,-infinity,"1 year 2 mons 3 days 04:05:06.789"}', '{2001:db8::1/64,0.0.0.0/0}'),
 (5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (6, '{NULL}', '{NULL}', '{""}', '{""}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}',
     '{NULL}', '{NULL}', '{NULL}')
;
INSERT INTO types_array_multi VALUES
 (1, '{{1,2},{3,4}}', '{{a,b},{"c,d",NULL}}'),
 (2, '{{{1,2}},{{3,4}}}', '{}'),
 (3, '[0:1][1:2]={{1,2},{3,4}}', '[-2:-1]={x,y}'),
 (4, '[-2:0]={1,2,3}', '{{"{",NULL},{"",NULL}}'),
 (5, '{}', NULL),
 (6, '{{NULL,NULL},{NULL,NULL}}', '{{"a b","c\\d"}}')
"""

USER_TYPES = r"""
INSERT INTO app.user_types VALUES
 (1, 'happy', 1, 'hello', 5, 'abc', ROW(1, 'x', 1.5), '{sad,happy}',
     ARRAY[ROW(1, 'a', 1)::app.pair, ROW(2, NULL, NULL)::app.pair], '{1,2}'),
 (2, 'très "bien"', 2147483647, '', 99, 'abcdefgh', ROW(NULL, 'a,b "c" \ d', -999.99),
     '{"with space","très \"bien\""}', '{}', '{}'),
 (3, 'with space', 42, 'twenty chars exactly', 1, '', ROW(NULL, NULL, NULL), '{NULL,ok}',
     ARRAY[NULL::app.pair], '{NULL}'),
 (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (5, 'sad', 7, 'ünï', 7, 'ünï', ROW(0, '', 0), '{}', ARRAY[ROW(0, '', 0)::app.pair], '{7}')
;
INSERT INTO "Mixed Case Tbl" VALUES (1, 'x', 1), (2, NULL, -1)
"""

STEPS = (("scalar", SCALAR), ("numeric", NUMERIC), ("text", TEXT), ("bytea", BYTEA),
         ("datetime", DATETIME), ("misc", MISC), ("arrays", ARRAYS), ("user_types", USER_TYPES))


def run(w: Workload) -> None:
    """Create every table in one transaction, then fill them one transaction per group."""
    w.script(SCHEMA)
    w.checkpoint("schema")
    for name, script in STEPS:
        w.log(f"    insert {name}")
        w.script(script)  # one simple-query round trip: one implicit transaction
        w.checkpoint(name)


SCENARIO = Scenario("types", "every mapped type with edge values, enum/domain/composite user types, "
                    "arrays incl. multi-dimensional; insert only", run, configs=TYPES_CONFIGS, values=True)
