"""`cdc_apply.verify` compares every column type silver holds: a table per type kind, captured from a real
PostgreSQL (the initial snapshot's rows copied as COPY BINARY, later rows streamed) by the real lander and
apply job, verifies equal; then one value per type damaged in silver is named as `values differ` on its key.
Both pgoutput formats: text, and binary (``source.binary``). Array columns of 2 and 3 dimensions
(``array_dimensions``) included: an element, a NULL at any depth, a sub-array's length or content."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.lake.pg_lake import PgLake
from tests.verify.test_verify_spark import verify_while_applying

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

TYPES = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE TYPE pair AS (a int, b text)",
]
# table -> (columns, rows); each row's first value is its key. Rows go in twice: keys as written in the
# snapshot, keys + 100 streamed after it.
TABLES: dict[str, tuple[str, list[str]]] = {
    "t_float": ("f4 float4, f8 float8", [
        "1, 0.5, 0", "2, 0.5, 'NaN'", "3, 0.5, 0.1", "4, 1.5, 1", "5, '-0', '-0'", "6, 'NaN', 'Infinity'",
        "7, 'Infinity', '-Infinity'", "8, 1e-45, 5e-324", "9, 3.4028235e38, 1.7976931348623157e308",
        "10, -1.25, 2.2250738585072009e-308", "11, NULL, NULL"]),
    "t_interval": ("iv interval", [
        "1, '1 mon'", "2, '30 days'", "3, '-1 year 2 days 00:00:03.5'", "4, '1 day 00:00:00.000001'",
        "5, 'infinity'", "6, '-infinity'", "7, NULL"]),
    "t_time": ("t time, tz timetz", [
        "1, '10:00', '10:00+05:30'", "2, '24:00:00', '10:00:00+05:30'", "3, '00:00:00.5', '23:59:59.999999-03:30'",
        "4, '12:34:56.789', '12:00+00'", "5, NULL, '01:02:03-12:00:15'", "6, '01:00', NULL"]),
    "t_array": ("ai int[], at text[], af float8[], an numeric(10,2)[], ad date[], aiv interval[], ae mood[]", [
        "1, '{1,NULL,3}', '{a,\"b c\",NULL,\"NULL\"}', '{0.5,NaN,-0}', '{1.50,2}', '{2020-01-01,infinity}', "
        "'{\"1 mon\",\"30 days\"}', '{sad,happy}'",
        "2, '{}', '{}', '{}', '{}', '{}', '{}', '{}'",
        "3, '[0:1]={7,8}', '{\"\",\"x,y\"}', '{1e300,-Infinity}', '{NULL}', '{NULL}', '{NULL}', '{NULL,ok}'",
        "4, NULL, NULL, NULL, NULL, NULL, NULL, NULL"]),
    # Columns of 2 and 3 dimensions (ND_DIMENSIONS); lower bounds other than 1 are dropped by silver.
    "t_array_nd": ("a2 int[], t2 text[], a3 int[], t3 text[]", [
        "1, '{{1,2},{3,NULL}}', '{{a,\"b c\"},{NULL,\"NULL\"}}', '{{{1,2},{3,4}},{{5,NULL},{7,8}}}', "
        "'{{{a}},{{NULL}}}'",
        "2, '{}', '{}', '{}', '{}'",
        "3, '[0:1][2:3]={{7,8},{9,10}}', '{{\"x,y\",\"\"}}', '{{{NULL}}}', '{{{\"{}\",b},{c,d}}}'",
        "4, NULL, NULL, NULL, NULL",
        "5, '{{1,2,3},{4,5,6}}', '{{a,b},{c,d}}', '{{{1},{2}},{{3},{4}}}', '{{{a,b}}}'",
        "6, '{{1,2}}', '{{x}}', '{{{1,2},{3,4}},{{5,NULL},{7,8}}}', '{{{a}}}'"]),
    "t_user": ("e mood, c pair", ["1, 'sad', '(1,x)'", "2, 'happy', '(2,\"y z\")'", "3, NULL, '(,)'", "4, 'ok', NULL"]),
    "t_net": ("i inet, c cidr, m macaddr, m8 macaddr8", [
        "1, '10.0.0.1', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05'",
        "2, '::ffff:1.2.3.4/120', '2001:db8::/32', 'AA:BB:CC:DD:EE:FF', 'aa:bb:cc:dd:ee:ff:00:11'",
        "3, '192.168.1.5/24', '192.168.1.0/24', NULL, NULL"]),
    "t_geo": ("p point, b box, ci circle, l line, s lseg, pa path, po polygon", [
        "1, '(1,2)', '(1,1),(0,0)', '<(1,2),3>', '{1,2,3}', '[(0,0),(1,1)]', '((0,0),(1,1),(2,0))', "
        "'((0,0),(1,1),(2,0))'",
        "2, '(0.1,-2.5e-7)', '(3,4),(1,2)', '<(0,0),0.5>', '{1,-1,0}', '[(1,2),(3,4)]', '[(0,0),(1,1)]', "
        "'((1,1),(2,2),(3,1))'"]),
    "t_misc": ("mo money, b bit(4), vb varbit, r4 int4range, rt tstzrange, rn numrange, l pg_lsn, ch \"char\", "
               "x8 xid8, o oid, tv tsvector, jp jsonpath, rc regclass", [
        "1, 12.34, '1010', '1', '[1,5)', '[2024-01-01 10:00+00,2024-01-02 00:00+05)', '(1.5,2.25]', '16/B374D848', "
        "'a', '123', 42, 'a fat cat', '$.a[*] ? (@ > 1)', 'pg_class'",
        "2, -0.05, '0000', '', 'empty', '(,)', '[1,1]', '0/0', '', '18446744073709551615', 4294967295, '', '$', NULL",
        "3, NULL, NULL, '101', '[-3,)', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
        "4, 1, '1111', '0', '(1,2)', '[,2024-01-01 00:00+00)', '[0,0]', 'FFFFFFFF/FFFFFFFF', 'z', '0', 0, 'b:2', "
        "'strict $', 'pg_type'"]),
}
# (table, column, key, Spark SQL for the damaged value): one value per type, each in a row of its own, in
# snapshot rows (key < 100) and streamed rows (key > 100).
DAMAGE = [
    ("t_float", "f8", 1, "CAST('-0.0' AS DOUBLE)"),                    # -0.0 where the source has 0
    ("t_float", "f8", 102, "CAST(1 AS DOUBLE)"),                       # a number where the source has NaN
    ("t_float", "f8", 3, "CAST('0.10000000000000002' AS DOUBLE)"),     # 0.1's last bit
    ("t_float", "f4", 104, "CAST('1.5000001' AS FLOAT)"),              # a float4's last bit
    ("t_interval", "iv", 1, "named_struct('months', 0, 'days', 30, 'microseconds', 0L)"),   # 30 days, not 1 month
    ("t_interval", "iv", 104, "named_struct('months', 0, 'days', 1, 'microseconds', 2L)"),
    ("t_time", "t", 1, "'10:00:00.000001'"),
    ("t_time", "tz", 102, "'10:00:00.000000+05:00'"),                  # the offset only
    ("t_array", "ai", 1, "array(1, CAST(NULL AS INT), 4)"),            # an element
    ("t_array", "at", 101, "array('a', 'b c', 'NULL', 'NULL')"),       # a NULL element, now the text NULL
    ("t_array", "af", 3, "array(CAST(1e300 AS DOUBLE), CAST('Infinity' AS DOUBLE))"),
    ("t_array", "ae", 103, "array(CAST(NULL AS STRING), 'happy')"),
    ("t_array_nd", "a2", 1, "array(array(9, 2), array(3, CAST(NULL AS INT)))"),     # an inner element
    ("t_array_nd", "t2", 101, "array(array('a', 'b c'), array('NULL', 'NULL'))"),    # a NULL element, now text
    ("t_array_nd", "a3", 3, "array(array(array(0)))"),                              # a NULL at depth 3, now 0
    ("t_array_nd", "a3", 6, "array(array(array(1, 2), array(3, 4)), array(array(5, CAST(NULL AS INT)), "
                            "array(CAST(NULL AS INT), 8)))"),                        # an element, now NULL
    ("t_array_nd", "a2", 5, "array(array(1, 2, 3), array(4, 5))"),                  # a sub-array's length
    ("t_array_nd", "a2", 105, "array(array(1, 2), array(3, 4), array(5, 6))"),      # the same elements reshaped
    ("t_array_nd", "t3", 103, "array(array(array('{}', 'b'), array('d', 'c')))"),   # a sub-array's content
    ("t_array_nd", "a3", 102, "array(array(CAST(array() AS ARRAY<INT>)))"),         # {} as [[[]]]
    ("t_user", "e", 1, "'happy'"),                                     # an enum label
    ("t_user", "c", 102, "'(2,\"y  z\")'"),
    ("t_net", "i", 1, "'10.0.0.2'"),
    ("t_net", "c", 102, "'2001:db8::/48'"),
    ("t_net", "m", 101, "'08:00:2b:01:02:04'"),
    ("t_net", "m8", 2, "'aa:bb:cc:dd:ee:ff:00:12'"),
    ("t_geo", "p", 1, "'(1,2.0000001)'"),
    ("t_geo", "po", 102, "'((1,1),(2,2),(3,2))'"),
    ("t_misc", "mo", 1, "CAST(12.35 AS DECIMAL(19,2))"),
    ("t_misc", "b", 102, "'0001'"),
    ("t_misc", "r4", 101, "'[1,6)'"),
    ("t_misc", "l", 2, "'0/1'"),
    ("t_misc", "ch", 104, "'y'"),
    ("t_misc", "x8", 4, "CAST(1 AS DECIMAL(20,0))"),
]


ND_DIMENSIONS = {"tables": {"public.t_array_nd": {"array_dimensions": {"a2": 2, "t2": 2, "a3": 3, "t3": 3}}}}


assert len({(table, key) for table, _, key, _ in DAMAGE}) == len(DAMAGE), "one damaged value per row"


def statements(key_offset: int) -> list[str]:
    out = []
    for table, (_, rows) in TABLES.items():
        for row in rows:
            key, rest = row.split(",", 1)
            out.append(f"INSERT INTO {table} VALUES ({int(key) + key_offset},{rest})")
    return out


# The text form in make test; the binary form (the same tables through send functions) in make system.
@pytest.fixture(scope="module", params=["text", pytest.param("binary", marks=pytest.mark.system)])
def lake(request, postgres, spark, tmp_path_factory):
    form = request.param
    setup = TYPES + [f"CREATE TABLE {t} (id int PRIMARY KEY, {columns})" for t, (columns, _) in TABLES.items()]
    setup += statements(0) + ["ANALYZE"]
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp(f"types_{form}"), f"verify_types_{form}", setup,
                  ND_DIMENSIONS)
    if form == "binary":
        lake.lander_config = replace(lake.lander_config, source=replace(lake.lander_config.source, binary=True))
    lake.form = form
    lake.land_and_apply()                  # the snapshot
    lake.run(*statements(100))             # streamed
    lake.land_and_apply()
    yield lake
    lake.close()


def run_verify(lake):
    """Verify while the lander and the apply job run (the source is quiet): they reach verify's point."""
    return verify_while_applying(lake, [], 0, steady=False, samples=50, record=False)


def test_every_type_kind_verifies_equal_and_one_damaged_value_per_type_is_named_on_its_key(lake):
    clean = run_verify(lake)
    tables = {t.table: t for t in clean.tables}
    assert set(tables) == {f"public.{t}" for t in TABLES}
    assert [t.line() for t in clean.tables if t.status != "equal"] == []
    not_compared = {name: t.unhashed_columns for name, t in tables.items() if t.unhashed_columns}
    if lake.form == "text":   # every column is compared but the regclass one, named with why
        assert not_compared == {"public.t_misc": ["rc"]}
        assert "not compared: rc (regclass holds an object's OID" in tables["public.t_misc"].line()
    else:                     # binary pgoutput: regclass too, by its send form
        assert not_compared == {}

    silver = lake.config.silver.path
    for table, column, key, value in DAMAGE:
        lake.spark.sql(f"UPDATE delta.`{silver}/public/{table}` SET `{column}` = {value} WHERE id = {key}")
    damaged = {t.table: t for t in run_verify(lake).tables}
    for table in TABLES:
        found = sorted((s.key, s.what) for s in damaged[f"public.{table}"].samples)
        expected = sorted(((str(key),), "changed") for t, _, key, _ in DAMAGE if t == table)
        assert found == expected, damaged[f"public.{table}"].line()


def test_spark_writes_a_nested_array_as_its_grammar_says_ragged_and_null_sub_arrays_included(spark):
    from cdc_apply.pgoutput.types import resolve_column_type, with_dimensions
    from cdc_apply.verification.value_text import value_text
    from tests.verify.test_verify_value_text import ODD_TEXTS, array_text

    rng = random.Random(73)

    def ragged(depth: int):   # silver may hold what PostgreSQL cannot: sub-arrays of other lengths, NULL ones
        if depth == 0:
            return rng.choice([None] + ODD_TEXTS)
        return None if rng.random() < 0.1 else [ragged(depth - 1) for _ in range(rng.randint(0, 3))]

    column_type = with_dimensions(resolve_column_type(1009, -1), 3)
    values = [ragged(3) for _ in range(200)] + [[], [[]], [[[]]], [[None]], [None]]
    _, text = value_text(column_type, "v", "`v`", "array<array<array<string>>>")
    frame = spark.createDataFrame(list(enumerate(values)), "i int, v array<array<array<string>>>")
    got = {r.i: r.t for r in frame.selectExpr("i", f"{text} AS t").collect()}
    assert [got[i] for i in range(len(values))] == [array_text(v, 3) for v in values]
    assert len({array_text(v, 3) for v in values}) == len({repr(v) for v in values})   # different values, texts
