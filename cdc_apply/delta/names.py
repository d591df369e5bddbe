"""Names in SQL text and in paths, safe whatever they hold.

Names come from the source database (namespaces, relations, columns) and from bronze (source names),
so whoever can create a table on a published database chooses them. Every path built from one goes
through :func:`path_segment` and :func:`check_under_root`; every SQL string literal through
:func:`quote_literal` (Spark SQL) or :func:`pg_literal` (PostgreSQL, delta-rs predicates) and every
identifier through :func:`quote_ident` (Spark SQL) or :func:`pg_ident` (PostgreSQL): the one quoting
module.
"""

from __future__ import annotations

from typing import Sequence

from cdc_apply.errors import PathError


def quote_ident(name: str) -> str:
    """A Spark SQL identifier in backticks (backticks inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def quote_literal(text: str) -> str:
    """A Spark SQL string literal that reads back as ``text``.

    Spark's parser treats a backslash inside a literal as an escape (``spark.sql.parser.escapedStringLiterals``
    is off by default), so backslashes are doubled before quotes are escaped; every other character,
    line breaks and NUL included, stands for itself.
    """
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def pg_ident(name: str) -> str:
    """A PostgreSQL identifier in double quotes (double quotes inside doubled): also how pgoutput's
    ``publication_names`` option is split."""
    return '"' + name.replace('"', '""') + '"'


def pg_literal(text: str) -> str:
    """A standard SQL string literal (quotes inside doubled): PostgreSQL's, with ``standard_conforming_strings``
    on as it is by default, its replication commands', and delta-rs's (DataFusion's) predicates'."""
    return "'" + text.replace("'", "''") + "'"


def sql_literal(value, ddl: str | None = None) -> str:
    """A Python value (as Spark's ``collect`` gives one) as Spark SQL text, cast to ``ddl`` when given:
    what ``F.lit(value).cast(ddl)`` means, for statements that must be text (Spark Connect's MERGE,
    DELETE and UPDATE). A naive ``datetime`` is this process's local time, as pyspark takes it; a
    ``TIMESTAMP_NTZ`` keeps it as it is. Raises ``TypeError`` for a value of another kind (a list, a map)."""
    import datetime as dt
    import math
    from decimal import Decimal

    if value is None:
        text = "NULL"
    elif isinstance(value, bool):
        text = "TRUE" if value else "FALSE"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = repr(value) + "D" if math.isfinite(value) else quote_literal(repr(value))
    elif isinstance(value, Decimal):
        text = quote_literal(str(value))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        text = "X'" + bytes(value).hex() + "'"
    elif isinstance(value, dt.datetime):
        ntz = (ddl or "").strip().lower() == "timestamp_ntz"
        text = quote_literal((value if ntz or value.tzinfo else value.astimezone()).isoformat())
    elif isinstance(value, (dt.date, dt.time)):
        text = quote_literal(value.isoformat())
    elif isinstance(value, str):
        text = quote_literal(value)
    else:
        raise TypeError(f"no SQL literal for a {type(value).__name__}")
    return f"CAST({text} AS {ddl})" if ddl else text


def path_segment(name: str) -> str:
    """A namespace, relation or source name as exactly one path segment.

    ``%`` and ``/`` are percent-encoded (so ordinary names keep the paths existing lakes have), and so is
    NUL. Hadoop's ``Path`` resolves ``.`` and ``..`` and drops an empty segment, so a name of dots only
    has every dot encoded (``..`` is ``%2E%2E``) and the empty name becomes a lone ``%`` (every other
    ``%`` in a segment starts an encoded byte, so no other name maps to it).
    """
    if not name:
        return "%"
    if not name.strip("."):
        return "%2E" * len(name)
    return name.replace("%", "%25").replace("/", "%2F").replace("\x00", "%00")


def check_under_root(root: str, path: str, relation: str) -> None:
    """Raise :class:`PathError` unless ``path`` is ``root`` followed by segments that resolve to themselves."""
    below = path[len(root) + 1:].split("/") if path.startswith(root + "/") else None
    if below is None or any(part in ("", ".", "..") or "\x00" in part for part in below):
        raise PathError("the table would be written outside its root", relation=relation, root=root, path=path)


def child_path(root: str, names: Sequence[str], relation: str) -> str:
    """``root`` followed by one :func:`path_segment` per name, checked to stay under ``root``."""
    root = root.rstrip("/")
    path = "/".join([root, *(path_segment(n) for n in names)])
    check_under_root(root, path, relation)
    return path
