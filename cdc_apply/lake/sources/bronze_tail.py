"""Bronze's newest seq per source — the lag in each batch's progress — followed through the Delta log;
and how old the oldest change past the applied point is (:func:`unapplied_ages`).

A query for ``max(seq)`` per source costs a running job up to a dozen small Spark jobs a batch
(Delta's file filtering, the scan, the aggregate's stages), on the same two cores as the batch it
reports on. The files bronze adds already say the same in their statistics: a file whose
``source`` bounds are one source (what the lander and any single-source writer produce) holds that
source's rows up to its ``maxValues.seq``. The first answer comes from the live files' statistics
(one query over the snapshot's state, a row a file: ~0.2 s against ~1 s for a scan of a 10M-row
bronze's ``source`` and ``seq`` here, warm), and after it the tail is followed by reading the commits
added since (``DeltaLog.getChanges``: the commit files only, no Spark job). A compaction
(``dataChange = false``) changes no rows and is passed over; a commit that removes rows (bronze was
rewritten or cleaned up), a file without those statistics (or with deleted rows: a deletion vector), a
gap in the log or no JVM to ask (Spark Connect) falls back to the query of the rows, which is always right.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Iterable

from cdc_apply.delta.files import LiveFile
from cdc_apply.delta.log import log_changes
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import CdcApplyError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import decode_message

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables

# The messages that make a transaction's changes due in silver (Rollback Prepared and Stream Abort make
# none due), as Spark shows a payload's first byte (``hex``).
COMMIT_TYPES = tuple(kind.TYPE for kind in (m.Commit, m.StreamCommit, m.CommitPrepared))
_COMMIT_HEX = tuple(f"{ord(kind):02X}" for kind in COMMIT_TYPES)


# Seqs past the applied one that the lag's first query reads (unapplied_ages).
FIRST_DUE_WINDOW = 100_000


class BronzeTail:
    """The newest seq of each source in one bronze table (one per job; calls may come from any thread)."""

    def __init__(self, tables: SparkTables, ref: TableRef) -> None:
        self.tables = tables
        self.spark = tables.spark
        self.ref = ref
        self.queries = 0                  # how often the tail was answered afresh (for tests and diagnostics)
        self.scans = 0                    # of those, how often by a scan of bronze's rows
        self._version: int | None = None  # the bronze version ``_newest`` describes
        self._newest: dict[str, int] = {}
        self._asked: set[str] = set()      # sources the last query covered
        self._lock = threading.Lock()

    def newest(self, floors: dict[str, int]) -> dict[str, int]:
        """Bronze's newest seq for each source of ``floors`` that has rows at or past its floor."""
        with self._lock:
            # A source the query did not cover is known from the commits only if they added its rows
            # (seq grows per source, so its newest rows are in them).
            unknown = set(floors) - self._asked - set(self._newest)
            if self._version is None or unknown or not self._follow():
                self._query(floors)
            return {s: seq for s, seq in self._newest.items() if s in floors and seq >= floors[s]}

    def _follow(self) -> bool:
        """Read the commits after ``_version``; False when only the query can answer."""
        log = self.tables.delta_log(self.ref)
        if log is None:
            return False
        assert self._version is not None  # newest() follows only from a version it has read
        try:
            commits = log_changes(self.spark, log, self._version + 1)
        except Exception:  # noqa: BLE001 - commits cleaned up past our version: ask the table
            return False
        newest, version = dict(self._newest), self._version
        for version, actions in commits:
            for action in actions:
                found = _added(action)
                if found is False:
                    return False
                if found is not None:
                    source, seq = found
                    newest[source] = max(seq, newest.get(source, seq))
        self._newest, self._version = newest, version
        return True

    def _query(self, floors: dict[str, int]) -> None:
        from pyspark.sql import functions as F

        self.queries += 1
        # The JVM's cached snapshot may be a little behind: the commits after it are followed next time.
        version = self.tables.version(self.ref)
        newest = None if version is None else newest_in_files(self.tables, self.ref, version, floors)
        if newest is None:
            self.scans += 1
            df = self.ref.read(self.spark) if version is None else _read_version(self.spark, self.ref, version)
            since = None
            for source, floor in floors.items():
                cond = (F.col("source") == source) & (F.col("seq") >= floor)
                since = cond if since is None else since | cond
            rows = df.where(since).groupBy("source").agg(F.max("seq").alias("m")).collect()
            newest = {r.source: int(r.m) for r in rows}
        self._newest, self._asked = newest, set(floors)
        # Without a version the query cannot be followed: ask again next time.
        self._version = version


def newest_in_files(tables: SparkTables, ref: TableRef, version: int, floors: dict[str, int]) -> dict[str, int] | None:
    """:func:`newest_in_stats` of bronze's live files at ``version``, their statistics read by one query over
    the snapshot's state (only the files that may hold a row at or past a floor come to the driver); None
    where only the rows can answer, or no JVM can be asked."""
    from pyspark.sql import functions as F

    files = tables.files_with_stats(ref, version)
    if files is None:
        return None
    low, high = F.col("stats.minValues"), F.col("stats.maxValues")
    rows = (files.where(high["seq"].isNull() | low["source"].isNull() | high["source"].isNull()
                        | (high["seq"] >= min(floors.values(), default=0)))
            .select("path", "modificationTime", F.col("stats.numRecords").alias("records"),
                    low["source"].alias("low"), high["source"].alias("high"), high["seq"].alias("seq"),
                    F.col("deletionVector").isNotNull().alias("deleted")).collect())
    return newest_in_stats((LiveFile(r.path, datetime.fromtimestamp(r.modificationTime / 1000, timezone.utc),
                                     r.records, {"source": r.low}, {"source": r.high, "seq": r.seq}, r.deleted)
                            for r in rows), floors)


def newest_in_stats(files: Iterable[LiveFile], floors: dict[str, int]) -> dict[str, int] | None:
    """Bronze's newest seq per source of ``floors`` (those with a seq at or past their floor) from its live
    files' statistics, when every file that may hold such a row says it alone: one source (equal
    ``source`` bounds) and no deletion vector (its ``maxValues`` may be a deleted row's); None when only
    the rows can answer."""
    newest: dict[str, int] = {}
    for file in files:
        if file.records == 0 or not _may_hold(file, floors):   # a file of no rows holds none of them
            continue
        if file.deleted_rows or file.records is None or not _one_source(file) or file.high.get("seq") is None:
            return None
        source, seq = file.low["source"], int(file.high["seq"])
        newest[source] = max(seq, newest.get(source, seq))
    return {s: seq for s, seq in newest.items() if s in floors and seq >= floors[s]}


def _one_source(file: LiveFile) -> bool:
    # Delta keeps a 32-character prefix of strings; a longer name's bounds differ, so equal bounds are the name.
    low, high = file.low.get("source"), file.high.get("source")
    return low is not None and low == high


def _may_hold(file: LiveFile, floors: dict[str, int]) -> bool:
    """False when the file's statistics show it holds no row of a source at or past its floor."""
    low, high = file.low.get("source"), file.high.get("source")
    if low is None or high is None or file.high.get("seq") is None:
        return True
    return any(low <= s <= high and int(file.high["seq"]) >= floor for s, floor in floors.items())


def newest_seqs(tables: SparkTables, ref: TableRef, floors: dict[str, int]) -> dict[str, int]:
    """One query for bronze's newest seq per source (see :class:`BronzeTail` for a job that follows it)."""
    if not floors or not tables.exists(ref):
        return {}
    return BronzeTail(tables, ref).newest(floors)


def _added(action: dict):
    """``(source, max seq)`` of an added file; None for an action that changes no rows; False when
    the action cannot be followed (a removed file, a file without single-source statistics)."""
    changed = action.get("remove") or action.get("add")
    if changed is not None and changed.get("dataChange") is False:
        return None   # a compaction (OPTIMIZE) rewrote rows bronze already had
    if "remove" in action:
        return False
    add = action.get("add")
    if add is None:
        return None
    try:
        stats = json.loads(add.get("stats") or "{}")
        if int(stats["numRecords"]) == 0:
            return None
        low, high = stats["minValues"], stats["maxValues"]
        source = high["source"]
        # Delta keeps a 32-character prefix of strings; a longer value's bounds differ (the maximum gets
        # a tie-breaking character), so equal bounds are the whole value.
        if low["source"] != source:
            return False
        return source, int(high["seq"])
    except (KeyError, TypeError, ValueError):
        return False


def _read_version(spark: SparkSession, ref: TableRef, version: int):
    reader = spark.read.format("delta").option("versionAsOf", version)
    return ref.load(reader)


def unapplied_ages(spark: SparkSession, ref: TableRef, applied: dict[str, int], newest: dict[str, int], now: datetime,
                   landed_only: frozenset[str] | set[str] = frozenset()) -> dict[str, float]:
    """Per source of ``applied``: the seconds since its oldest change in bronze that is not yet in silver
    became due — 0 when bronze holds nothing past the applied seq (caught up), or only transactions not
    committed yet (an open head, a prepared transaction, aborts).

    A change is due when its transaction commits: the age is ``now`` minus the commit timestamp of the
    first Commit, Stream Commit or Commit Prepared in ``(applied, newest]`` (the source's clock, as the
    time since the last applied commit is; a commit stamped after ``now`` counts 0). Sources in
    ``landed_only`` (formats whose bronze rows are not pgoutput messages: GaussDB) count from when
    their first row past the applied seq was landed. One query, and only for sources behind: a caught-up
    source costs nothing, and the query reads bronze's files past the applied seqs only."""
    behind = behind_sources(applied, newest)
    landed_only = frozenset(landed_only)
    if not behind:
        return ages_of(applied, {}, now)
    return ages_of(applied, windowed_due(behind, lambda ranges: _first_due(spark, ref, ranges, landed_only)), now)


def windowed_due(behind: dict[str, tuple[int, int]], first_due) -> dict[str, datetime | None]:
    """``first_due(ranges)`` (per source, the due time of its first due change in ``(after, upto]``) over the
    behind sources' ranges: the first due change nearly always lies among the first messages past the
    applied seq, so the read covers the next FIRST_DUE_WINDOW seqs (the files holding the others are
    skipped by their seq statistics), and only a source with nothing due there asks the rest of its
    range — a job behind by a thousand lander files read them all at every batch."""
    near = {s: (after, min(upto, after + FIRST_DUE_WINDOW)) for s, (after, upto) in behind.items()}
    due = first_due(near)
    rest = {s: (near[s][1], upto) for s, (_, upto) in behind.items() if s not in due and upto > near[s][1]}
    if rest:
        due.update(first_due(rest))
    return due


def behind_sources(applied: dict[str, int], newest: dict[str, int]) -> dict[str, tuple[int, int]]:
    """The sources bronze holds messages of past the applied seq: ``(applied seq, newest seq)``."""
    return {s: (a, newest[s]) for s, a in applied.items() if newest.get(s, a) > a}


def ages_of(applied: dict[str, int], due: dict[str, datetime | None], now: datetime) -> dict[str, float]:
    """Per source of ``applied``: seconds since its first unapplied change became ``due`` (0 without one;
    a time after ``now`` counts 0)."""
    ages = {s: 0.0 for s in applied}
    for source, at in due.items():
        if at is not None:
            ages[source] = max((now - at).total_seconds(), 0.0)
    return ages


def _first_due(spark: SparkSession, ref: TableRef, behind: dict[str, tuple[int, int]],
               landed_only: frozenset[str]) -> dict[str, datetime | None]:
    from pyspark.sql import functions as F

    df = ref.read(spark)
    commit = F.hex(F.substring(F.col("payload"), 1, 1)).isin(*_COMMIT_HEX)
    wanted = None
    for source, (after, upto) in behind.items():
        cond = (F.col("source") == source) & (F.col("seq") > after) & (F.col("seq") <= upto)
        if source not in landed_only:
            cond = cond & commit
        wanted = cond if wanted is None else wanted | cond
    # ``landed_at`` is optional in the bronze contract; the file's own time says when it was landed too.
    landed = F.col("_metadata.file_modification_time")
    if "landed_at" in df.columns:
        landed = F.coalesce(F.col("landed_at"), landed)
    rows = (df.where(wanted).groupBy("source")
            .agg(F.min_by(F.struct(F.col("payload"), landed.alias("landed")), F.col("seq")).alias("first"))
            .collect())
    return {r.source: due_at(r.first.payload, r.first.landed, r.source in landed_only) for r in rows}


def due_at(payload, landed: datetime | None, landed_only: bool) -> datetime | None:
    """When a source's first unapplied row made changes due: its Commit's timestamp, or when it was landed."""
    if not landed_only:
        try:
            commit = decode_message(bytes(payload))
            # Only the commit kinds (COMMIT_TYPES) are asked for where a Commit says when changes came.
            assert isinstance(commit, (m.Commit, m.StreamCommit, m.CommitPrepared))
            return m.pg_timestamp_to_datetime(commit.commit_ts)
        except CdcApplyError:   # a malformed commit stops its batch; until then, its landing says when it came
            pass
    return as_utc(landed)


def as_utc(ts: datetime | None) -> datetime | None:
    """A timestamp Spark collected (naive, in the driver process's local time) as an aware UTC one."""
    if ts is None:
        return None
    return ts.astimezone(timezone.utc)
