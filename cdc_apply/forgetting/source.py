"""PostgreSQL's side of a forget: the point, whether the source still holds a key, and each key value rendered
as the lake holds it (output text, send bytes, verify's canonical text).

Everything is read in one exported snapshot (:class:`~cdc_apply.verification.source.SourceSnapshot`), so "the
source does not hold the key" is true at the snapshot's consistent point ``C``: every change to the key
committed below ``C`` is in the stream the lander lands, and the forget waits for it to be landed and applied
before it removes anything.
"""

from __future__ import annotations

from typing import Sequence

from cdc_apply.delta.names import pg_ident
from cdc_apply.errors import ForgetError
from cdc_apply.forgetting.keys import ForgetKey
from cdc_apply.verification.encoding import ColumnEncoding, encode_column
from cdc_apply.verification.source import SourceColumn, SourceSnapshot, SourceTable
from cdc_apply.verification.value_text import SourceFormat


def key_encodings(shape: SourceTable, key_columns: Sequence[str], silver_types: dict[str, str],
                  binary: bool) -> list[ColumnEncoding]:
    """Verify's encoding of each key column (the Spark side finds silver's rows with it); a
    :class:`ForgetError` for a key column silver lacks or verify cannot compare."""
    out = []
    for name in key_columns:
        column = _column(shape, name)
        if name not in silver_types:
            raise ForgetError(f"silver has no key column {name}", table=shape.qualified_name)
        got = encode_column(name, column.type, silver_types[name], SourceFormat(binary, column.send))
        if not isinstance(got, ColumnEncoding):
            raise ForgetError(f"key column {name} cannot be matched in silver ({got.why})", table=shape.qualified_name)
        out.append(got)
    return out


def render_keys(snap: SourceSnapshot, shape: SourceTable, encodings: Sequence[ColumnEncoding],
                given: Sequence[tuple[str, ...]]) -> list[ForgetKey]:
    """Each given key as PostgreSQL renders it: a value its column's type refuses is a ForgetError naming it."""
    parts = []
    for encoding in encodings:
        column = _column(shape, encoding.name)
        value = f"%s::{column.sql_type}"
        send = f"{column.send}({value})" if column.send else "NULL::bytea"
        parts.append((f"({value})::text", send,
                      f"(SELECT {encoding.pg} FROM (SELECT {value} AS {pg_ident(encoding.name)}) AS k)"))
    sql = "SELECT " + ", ".join(", ".join(p) for p in parts)
    out = []
    for values in given:
        params = [v for v in values for _ in range(3)]
        try:
            row = snap.values(sql, params)[0]
        except ForgetError:
            raise
        except Exception as exc:   # the type's input function refused the value
            raise ForgetError(f"key ({', '.join(values)}) is not a value of the key's types: {exc}",
                              table=shape.qualified_name) from None
        texts, sends, canonical = row[0::3], row[1::3], row[2::3]
        out.append(ForgetKey(tuple(values), tuple(texts), tuple(bytes(s) if s is not None else b"" for s in sends),
                             tuple(canonical)))
    return out


def keys_held(snap: SourceSnapshot, shape: SourceTable, key_columns: Sequence[str],
              given: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The given keys the source's table holds at the point (its whole table: a row the publication's row
    filter leaves out is still the person's data)."""
    match = " AND ".join(f"{pg_ident(c)} = %s::{_column(shape, c).sql_type}" for c in key_columns)
    held = []
    for values in given:
        if snap.values(f"SELECT EXISTS (SELECT 1 FROM {shape.sql} WHERE {match})", list(values))[0][0]:
            held.append(values)
    return held


def _column(shape: SourceTable, name: str) -> SourceColumn:
    try:
        return shape.column(name)
    except StopIteration:
        raise ForgetError(f"the source's table has no column {name}", table=shape.qualified_name) from None
