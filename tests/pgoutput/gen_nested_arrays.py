"""Capture multi-dimensional arrays from a real PostgreSQL into tests/pgoutput/data/nested_arrays.json.

A table of array columns is written through a logical replication slot and read back twice with
``pg_logical_slot_peek_binary_changes`` (pgoutput, ``binary 'false'`` and ``binary 'true'``): each
Insert's column values are stored as pgoutput sent them (array_out's text, array_send's bytes as hex).
The server also gives the oracle of each value: its shape (``array_length`` per dimension) and its
elements in row-major order (the value oracles of gen_value_vectors.py), or, where the value's
``array_ndims`` differs from the dimensions the column is configured with, the error the converter
must raise. Run: ``python tests/pgoutput/gen_nested_arrays.py`` (starts a throw-away server) or with
``--dsn 'host=... port=...'``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import struct
from pathlib import Path

HERE = Path(__file__).parent
DATA = HERE / "data" / "nested_arrays.json"
_spec = importlib.util.spec_from_file_location("gen_value_vectors", HERE / "gen_value_vectors.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)  # type: ignore[union-attr]

# column, SQL type, configured dimensions, element oracle (gen_value_vectors.ORACLES)
COLUMNS = [
    ("i2", "int4[]", 2, "json"),
    ("t2", "text[]", 2, "output"),
    ("n2", "numeric(10,2)[]", 2, "output"),
    ("ts2", "timestamptz[]", 2, "timestamp"),
    ("i3", "int4[]", 3, "json"),
    ("i1", "int4[]", 1, "json"),
]
ROWS = [
    "1, '{{1,2},{3,NULL}}', ARRAY[['a \"q\"', 'b,c'], ['back\\slash', NULL]], '{{1.50,-2.25},{NULL,0}}', "
    "ARRAY[['2024-01-02 03:04:05.5+00', 'infinity'], ['-infinity', NULL]]::timestamptz[], "
    "'{{{1,2}},{{3,4}}}', '{1,2}'",
    "2, '[0:1][-1:0]={{5,6},{7,8}}', '{}', NULL, '{{NULL}}', '{}', '[0:1]={7,8}'",
    "3, '{{NULL,NULL},{NULL,NULL}}', ARRAY[['', NULL, 'NULL', '{}', ' x ']], '{{100000}}', '{}', "
    "'[2:2][1:1][0:1]={{{9,NULL}}}', NULL",
    "4, '{1,2,3}', ARRAY[['{', '}'], ['\"', '\\']], '{{1},{2},{3}}', "
    "ARRAY[['1900-01-01 00:00:00+00'], ['0044-03-15 12:00:00+00 BC']]::timestamptz[], '{{1}}', '{{1,2}}'",
    "5, '{{{1}}}', '{{a}}', '{{0.01}}', NULL, '{{{NULL,NULL,NULL}}}', '{{{1}}}'",
]


def _messages(cur, slot: str, binary: bool) -> list[bytes]:
    cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                "'publication_names', 'nested_pub', 'binary', %s)", (slot, "true" if binary else "false"))
    return [bytes(row[0]) for row in cur.fetchall()]


def _insert_values(messages: list[bytes]) -> list[list[str | None]]:
    """Each Insert's column values as hex of what pgoutput sent ('t' or 'b' data; None for 'n')."""
    rows = []
    for msg in messages:
        if msg[:1] != b"I":
            continue
        (ncols,) = struct.unpack_from(">h", msg, 6)
        pos, values = 8, []
        for _ in range(ncols):
            form = msg[pos:pos + 1]
            pos += 1
            if form in (b"t", b"b"):
                (length,) = struct.unpack_from(">i", msg, pos)
                values.append(msg[pos + 4: pos + 4 + length].hex())
                pos += 4 + length
            else:
                values.append(None)
        rows.append(values)
    return rows


def capture(conn) -> dict:
    """The capture's JSON content, from ``conn`` (autocommit)."""
    cur = conn.cursor()
    columns = ", ".join(f"{name} {sql_type}" for name, sql_type, _, _ in COLUMNS)
    cur.execute("DROP SCHEMA IF EXISTS nested CASCADE; CREATE SCHEMA nested; "
                f"CREATE TABLE nested.t (id int PRIMARY KEY, {columns}); "
                "CREATE PUBLICATION nested_pub FOR TABLE nested.t")
    cur.execute("SELECT pg_create_logical_replication_slot('nested_slot', 'pgoutput')")
    try:
        for row in ROWS:
            cur.execute(f"INSERT INTO nested.t VALUES ({row})")
        for key, value in gen.BASE_SETTINGS.items():
            cur.execute("SELECT set_config(%s, %s, false)", (key, value))
        text_rows = _insert_values(_messages(cur, "nested_slot", binary=False))
        binary_rows = _insert_values(_messages(cur, "nested_slot", binary=True))
        out = []
        for index, (name, sql_type, dimensions, oracle) in enumerate(COLUMNS, start=1):
            element = gen.ORACLES[oracle].replace("{out}", _output_function(cur, sql_type)).replace("{v}", "e")
            flat = (f"(SELECT coalesce(jsonb_agg({element} ORDER BY o), '[]'::jsonb) "
                    f"FROM unnest({name}) WITH ORDINALITY u(e, o))")
            cur.execute(f"SELECT a.atttypid::int, a.atttypmod, array_ndims({name}), "
                        f"(SELECT jsonb_agg(array_length({name}, d) ORDER BY d) "
                        f" FROM generate_series(1, array_ndims({name})) d), "
                        f"{flat} "
                        f"FROM nested.t, pg_attribute a WHERE a.attrelid = 'nested.t'::regclass "
                        f"AND a.attname = %s ORDER BY id", (name,))
            found = cur.fetchall()
            values = []
            for row, (oid, typmod, ndims, shape, elements) in enumerate(found):
                value = {"text": bytes.fromhex(text_rows[row][index]).decode() if text_rows[row][index] else None,
                         "binary": binary_rows[row][index]}
                if ndims is not None and ndims != dimensions:
                    value["error"] = f"a {ndims}-dimensional array in a column of {dimensions} dimension"
                elif ndims is not None:
                    value["shape"], value["elements"] = shape, elements
                values.append(value)
            out.append({"column": name, "sql_type": sql_type, "type_oid": oid, "type_modifier": typmod,
                        "dimensions": dimensions, "values": values})
        cur.execute("SHOW server_version")
        version = cur.fetchone()[0]
    finally:
        cur.execute("SELECT pg_drop_replication_slot('nested_slot')")
        cur.execute("DROP PUBLICATION nested_pub; DROP SCHEMA nested CASCADE")
    return {"generated_by": "tests/pgoutput/gen_nested_arrays.py", "server_version": version,
            "settings": gen.BASE_SETTINGS, "rows": ROWS, "columns": out}


def _output_function(cur, sql_type: str) -> str:
    """The element type's output function (the "output" oracle calls it)."""
    cur.execute("SELECT e.typoutput::regproc::text FROM pg_type a JOIN pg_type e ON e.oid = a.typelem "
                "WHERE a.oid = %s::regtype", (sql_type,))
    return cur.fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="libpq connection string; default: a throw-away embedded server")
    args = parser.parse_args()
    server = None
    if args.dsn:
        import psycopg2

        conn = psycopg2.connect(args.dsn)
        conn.autocommit = True
    else:
        from cdc_apply.testing.postgres import start_postgres

        server = start_postgres()
        conn = server.connect()
    try:
        content = capture(conn)
        DATA.write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {DATA} ({sum(len(c['values']) for c in content['columns'])} values)")
    finally:
        conn.close()
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main()
