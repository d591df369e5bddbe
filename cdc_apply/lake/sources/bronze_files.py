"""Bronze's newest seq per source and the age of the oldest unapplied change, read without a JVM
(``cdc-apply status`` on a local bronze path, and the apply job's lag of a local bronze): the same answers
as :mod:`~cdc_apply.lake.sources.bronze_tail`'s queries, from delta-rs (:mod:`cdc_apply.delta.files`).

The newest seqs come from the live files' statistics when every file that can hold a source's rows says
it alone: one source (equal ``source`` bounds) and no deletion vector (its ``maxValues`` may be a deleted
row's). Otherwise the rows are read, as Spark's query reads them. The first due change is read by one
scan over the behind sources' seq ranges; where its landing time is needed (GaussDB sources, or a Commit
that does not decode) and the row has no ``landed_at``, the time is its file's, as Spark's
``_metadata.file_modification_time``.
"""

from __future__ import annotations

from datetime import datetime

from cdc_apply.delta.files import LiveFile, file_rows, live_files, local_path, open_table, read_rows
from cdc_apply.delta.names import pg_literal
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.sources.bronze_tail import (
    COMMIT_TYPES,
    ages_of,
    behind_sources,
    due_at,
    newest_in_stats,
    windowed_due,
)


def newest_seqs(ref: TableRef, floors: dict[str, int]) -> dict[str, int]:
    """Bronze's newest seq for each source of ``floors`` that has rows at or past its floor."""
    table = open_table(ref) if floors else None
    if table is None:
        return {}
    newest = newest_in_stats(live_files(table, ["source", "seq"]), floors)
    return _query_newest(table, floors) if newest is None else newest


def _query_newest(table, floors: dict[str, int]) -> dict[str, int]:
    wanted = " OR ".join(f"(source = {pg_literal(s)} AND seq >= {int(f)})" for s, f in floors.items())
    rows = read_rows(table, ["source", "seq"], wanted)
    newest: dict[str, int] = {}
    for source, seq in zip(rows.column("source").to_pylist(), rows.column("seq").to_pylist()):
        newest[source] = max(seq, newest.get(source, seq))
    return newest


def unapplied_ages(ref: TableRef, applied: dict[str, int], newest: dict[str, int], now: datetime,
                   landed_only: frozenset[str] | set[str] = frozenset()) -> dict[str, float]:
    """:func:`cdc_apply.lake.sources.bronze_tail.unapplied_ages` without a JVM: one scan, only for sources behind."""
    behind = behind_sources(applied, newest)
    table = open_table(ref) if behind else None
    return _ages(table, applied, behind, now, landed_only)


def local_unapplied_ages(ref: TableRef, applied: dict[str, int], newest: dict[str, int], now: datetime,
                         landed_only: frozenset[str] | set[str] = frozenset()) -> dict[str, float] | None:
    """:func:`unapplied_ages` for the apply job: None where delta-rs cannot answer — no local path, no
    Delta table there, a table it cannot read — and the job asks Spark instead. On a local bronze it
    answers without a Spark job: ~0.01 s against ~0.7 s of Spark's query of the same rows (a new bronze
    snapshot at every lander commit, then the scan), which ran beside each batch on the same cores."""
    if local_path(ref) is None:
        return None
    behind = behind_sources(applied, newest)
    try:
        table = open_table(ref) if behind else None
        if behind and table is None:
            return None
        return _ages(table, applied, behind, now, landed_only)
    except Exception:  # noqa: BLE001 - a table feature delta-rs does not read, a file gone: Spark reads it
        return None


def _ages(table, applied: dict[str, int], behind: dict[str, tuple[int, int]], now: datetime,
          landed_only) -> dict[str, float]:
    landed_only = frozenset(landed_only)
    due = windowed_due(behind, lambda ranges: _first_due(table, ranges, landed_only)) if table is not None else {}
    return ages_of(applied, due, now)


def _first_due(table, behind: dict[str, tuple[int, int]], landed_only: frozenset[str]) -> dict[str, datetime | None]:
    commits = " OR ".join(f"(payload >= X'{ord(t):02X}' AND payload < X'{ord(t) + 1:02X}')" for t in COMMIT_TYPES)
    wanted = []
    for source, (after, upto) in behind.items():
        cond = f"source = {pg_literal(source)} AND seq > {int(after)} AND seq <= {int(upto)}"
        wanted.append(f"({cond})" if source in landed_only else f"({cond} AND ({commits}))")
    has_landed = "landed_at" in [f.name for f in table.schema().fields]
    columns = ["source", "seq", "payload"] + (["landed_at"] if has_landed else [])
    rows = read_rows(table, columns, " OR ".join(wanted)).to_pylist()
    first: dict[str, dict] = {}
    for row in rows:
        have = first.get(row["source"])
        if have is None or row["seq"] < have["seq"]:
            first[row["source"]] = row
    out = {}
    for source, row in first.items():
        landed = row.get("landed_at")
        if landed is None:
            due = due_at(row["payload"], None, source in landed_only)
            out[source] = due if due is not None else _file_time(table, source, row["seq"])
        else:
            out[source] = due_at(row["payload"], landed, source in landed_only)
    return out


def _file_time(table, source: str, seq: int) -> datetime | None:
    """When the file holding ``(source, seq)`` was added (its statistics narrow the files to look in)."""
    candidates = [f for f in live_files(table, ["source", "seq"]) if _may_contain(f, source, seq)]
    if len(candidates) == 1:
        return candidates[0].modified
    for file in candidates:
        rows = file_rows(table, file, ["source", "seq"])
        if any(s == source and q == seq for s, q in zip(rows.column("source").to_pylist(),
                                                          rows.column("seq").to_pylist())):
            return file.modified
    return None


def _may_contain(file: LiveFile, source: str, seq: int) -> bool:
    lows, highs = file.low, file.high
    if None not in (lows.get("source"), highs.get("source")) and not lows["source"] <= source <= highs["source"]:
        return False
    if None not in (lows.get("seq"), highs.get("seq")) and not int(lows["seq"]) <= seq <= int(highs["seq"]):
        return False
    return True
