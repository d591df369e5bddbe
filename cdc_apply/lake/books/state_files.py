"""The apply job's reads of its own state tables at local paths, by delta-rs instead of Spark queries.

Each Spark read of a state table when the job starts (whether it exists and its columns, the progress
rows, the schema history, the type cache, the quarantined sources) is a job of its own with its Delta
snapshot and planning: ~0.6 s of every run on a warm JVM, which each ``apply --once`` run pays again.
delta-rs reads the same rows of a local table in a few milliseconds (as ``cdc-apply status`` does:
:mod:`cdc_apply.lake.books.status_files`). Anything it cannot read — object storage, a catalog table,
a table feature it lacks — gives None, and the caller runs Spark's query.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable, Sequence

from cdc_apply.delta.files import local_path, open_table, read_rows
from cdc_apply.delta.refs import TableRef


def _answered(ref: TableRef, read):
    """``read(table)`` of the local Delta table at ``ref``; None where delta-rs cannot say (not a local
    path, no Delta table there, a table or read it cannot do): the caller asks Spark."""
    if local_path(ref) is None:
        return None
    try:
        table = open_table(ref)
        return None if table is None else read(table)
    except Exception:  # noqa: BLE001 - delta-rs cannot read it: the caller asks Spark
        return None


def local_rows(ref: TableRef, columns: Sequence[str], predicate: str | None = None) -> list[Any] | None:
    """The rows of ``columns`` of the local table at ``ref`` that ``predicate`` (SQL, read by both engines)
    keeps, as tuples with those field names, as Spark's collect gives them; None where delta-rs cannot say."""
    got = _answered(ref, lambda table: read_rows(table, list(columns), predicate))
    if got is None:
        return None
    # Field names known only at run time: namedtuple as a plain callable (mypy's special form wants literals).
    make_row_type: Callable[..., type] = namedtuple
    row = make_row_type("Row", columns)
    return [row(*values) for values in zip(*(got.column(c).to_pylist() for c in columns))]


def local_columns(ref: TableRef) -> frozenset[str] | None:
    """The column names of the local Delta table at ``ref``; None where delta-rs cannot say."""
    return _answered(ref, lambda table: frozenset(f.name for f in table.schema().fields))


def newest_rows_per_source(ref: TableRef, columns: Sequence[str]) -> list[Any] | None:
    """Each source's row of its highest ``apply_version`` (``columns`` of it), read as :func:`local_rows`
    reads: the keys of every row first, then only the rows of those versions (their files by statistics)."""
    keys = local_rows(ref, ("source", "apply_version"))
    if keys is None:
        return None
    newest: dict[str, int] = {}
    for key in keys:
        newest[key.source] = max(key.apply_version, newest.get(key.source, key.apply_version))
    if not newest:
        return []
    versions = ", ".join(str(int(v)) for v in sorted(set(newest.values())))
    rows = local_rows(ref, columns, f"apply_version IN ({versions})")
    if rows is None:
        return None
    out: dict[str, Any] = {}
    for row in rows:
        if row.apply_version == newest.get(row.source) and row.source not in out:
            out[row.source] = row
    return list(out.values())
