"""Table states and value oracles, read with the same settings as the decoding sessions.

Every value is the text of the type's output function (what pgoutput sends in text mode)
and, for ``values.json``, the bytes of its send function (what binary mode sends), so
tests compare decoded values against what the server itself says.
"""

from __future__ import annotations

import json
from typing import Any

from psycopg2 import sql as pgsql

_TABLES = """
SELECT c.oid::int8, n.nspname, c.relname, c.relreplident
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'
ORDER BY n.nspname, c.relname
"""

_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid::int8, a.atttypmod,
       t.typsend::regproc::text
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

# Columns of the primary key (indisprimary) or of the replica identity index (indisreplident),
# in index order.
_INDEX_COLUMNS = """
SELECT a.attname
FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s AND i.{flag}
ORDER BY k.ord
"""


def _rows(conn: Any, query: Any, params: Any = None) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(query, params)
        return cur.fetchall()


def _index_columns(conn: Any, oid: int, flag: str) -> list[str] | None:
    names = [r[0] for r in _rows(conn, _INDEX_COLUMNS.format(flag=flag), (oid,))]
    return names or None


def _row_sort_key(row: list[str | None]) -> list[tuple[bool, str]]:
    return [(value is None, value or "") for value in row]


def list_tables(conn: Any) -> list[tuple[int, str, str, str]]:
    """``(oid, schema, name, relreplident)`` of every permanent user table, by name."""
    return _rows(conn, _TABLES)


def table_columns(conn: Any, oid: int) -> list[dict[str, Any]]:
    """Live columns in attnum order: name, format_type, type oid, typmod and send function."""
    return [{"name": name, "type": typ, "type_oid": typoid, "typmod": typmod, "send": send}
            for name, typ, typoid, typmod, send in _rows(conn, _COLUMNS, (oid,))]


def _output_text(column: str) -> Any:
    """The column's type output function text (what pgoutput sends in text mode), or NULL.

    Not ``col::text``: that cast differs from the output function for bool ('true' vs 't'),
    bpchar (trailing spaces trimmed) and inet ('/32' added). ``format('%s', x)`` calls the
    output function; ``num_nulls`` tests the datum, so a composite of NULLs stays non-NULL.
    """
    ident = pgsql.Identifier(column)
    return pgsql.SQL("CASE WHEN num_nulls({0}) = 1 THEN NULL ELSE format('%s', {0}) END").format(ident)


def _select_text(schema: str, table: str, columns: list[str], extra: list[Any] | None = None) -> Any:
    fields = [_output_text(c) for c in columns] + (extra or [])
    return pgsql.SQL("SELECT {} FROM {}.{}").format(
        pgsql.SQL(", ").join(fields), pgsql.Identifier(schema), pgsql.Identifier(table))


def table_state(conn: Any) -> dict[str, Any]:
    """The ``tables`` part of a checkpoint: columns, keys and sorted output-text rows per table."""
    state: dict[str, Any] = {}
    for oid, schema, name, replident in list_tables(conn):
        columns = table_columns(conn, oid)
        names = [c["name"] for c in columns]
        rows = [list(r) for r in _rows(conn, _select_text(schema, name, names))]
        state[f"{schema}.{name}"] = {
            "oid": oid,
            "replica_identity": replident,
            "columns": [{k: c[k] for k in ("name", "type", "type_oid", "typmod")} for c in columns],
            "key": _index_columns(conn, oid, "indisprimary"),
            "identity_index": _index_columns(conn, oid, "indisreplident"),
            "rows": sorted(rows, key=_row_sort_key),
        }
    return state


def value_oracle(conn: Any, other_tz_conn: Any | None = None, other_tz: str = "") -> list[dict[str, Any]]:
    """One entry per (table, row, column) of every table: type, output text and send bytes.

    Every table must have a one-column primary key; entries are ordered by table, key
    value (as text, numerically when it is an integer) and column position. When
    ``other_tz_conn`` is given, values whose text differs under that session's TimeZone
    also carry ``text_<other_tz>``.
    """
    entries: list[dict[str, Any]] = []
    tz_field = "text_" + other_tz.replace("/", "_").lower()
    for oid, schema, name, _ in list_tables(conn):
        key = _index_columns(conn, oid, "indisprimary")
        if not key or len(key) != 1:
            raise ValueError(f"{schema}.{name} needs a one-column primary key for values.json")
        for column in table_columns(conn, oid):
            ident = pgsql.Identifier(column["name"])
            send = pgsql.SQL("encode({}({}), 'hex')").format(pgsql.SQL(column["send"]), ident)
            query = _select_text(schema, name, [key[0], column["name"]], [send])
            other = dict((k, v) for k, v in _rows(other_tz_conn, _select_text(
                schema, name, [key[0], column["name"]]))) if other_tz_conn is not None else {}
            for key_text, text, send_hex in sorted(_rows(conn, query), key=lambda r: _key_order(r[0])):
                entry = {"table": f"{schema}.{name}", "key": key_text, "column": column["name"],
                         "type": column["type"], "type_oid": column["type_oid"],
                         "typmod": column["typmod"], "send_function": column["send"],
                         "text": text, "send_hex": send_hex}
                if other_tz_conn is not None and other.get(key_text) != text:
                    entry[tz_field] = other.get(key_text)
                entries.append(entry)
    return entries


def _key_order(text: str) -> tuple[int, str]:
    try:
        return (int(text), "")
    except ValueError:
        return (0, text)


def dumps(obj: Any, indent: int = 0) -> str:
    """JSON with one line per innermost list or object: short, stable, diff-friendly."""
    if _is_flat(obj):
        return json.dumps(obj, ensure_ascii=False)
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 1).lstrip()}"
                 for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    items = [inner + dumps(v, indent + 1).lstrip() for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + pad + "]"


def _is_flat(obj: Any) -> bool:
    if isinstance(obj, dict):
        return all(not isinstance(v, (dict, list)) for v in obj.values())
    if isinstance(obj, list):
        return all(not isinstance(v, (dict, list)) for v in obj)
    return True
