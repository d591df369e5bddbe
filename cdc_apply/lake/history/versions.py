"""One batch of a table's changes as history versions, and the MERGE that writes them.

A *version* of a row is its state after one source transaction, valid from that transaction's
commit LSN until the commit LSN of the next transaction that changed it (or the TRUNCATE that
emptied the table). Changes are grouped by commit LSN: several changes of one key in one
transaction give one version (the state others could see), none when the transaction inserted and
deleted it.

The batch's events of every touched key are put in commit order after a *prior* event: the key's
open version in the history table (``_kind`` ``P``). One pass of windows, partitioned by key and by
*epoch* (how many of the batch's truncates of the table come before the event), then gives each
transaction's state of the key (a column the change does not carry keeps the last value carried
before it in the epoch: unchanged TOAST), which transactions open a version (every one, or with
``track_columns`` only those changing a tracked column or re-creating the row), and where each
version ends. The MERGE updates the prior version (its close, and the values an untracked change
set in place) and inserts the new ones; open versions of keys the batch does not touch are closed
at the first truncate after them.

Tables without a key keep one version per distinct row value and copy count (``copies``): the
batch's +1/-1 steps per value (a removal that finds no copy changes nothing, as in PostgreSQL's
apply worker), grouped by commit LSN; a transaction that changes the count opens a version.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Sequence

from cdc_apply.delta.names import quote_ident, sql_literal
from cdc_apply.errors import ApplyError
from cdc_apply.lake.silver.merge import null_safe_equal
from cdc_apply.lake.silver.merge_sql import truncate_closes_sql
from cdc_apply.pgoutput.snapshot import SNAPSHOT_XID
from cdc_apply.planning import columns as cc
from cdc_apply.planning.table_plan import TableWork

if TYPE_CHECKING:
    from pyspark.sql import Column

    from cdc_apply.delta.engine import SparkTables

EVENT_META = cc.EVENT_META


HISTORY_COLUMNS = ("valid_from_lsn", "valid_to_lsn", "valid_from_ts", "valid_to_ts", "operation", "closed_by",
                   "copies", "is_current")
HISTORY_TYPES = ("BIGINT", "BIGINT", "TIMESTAMP", "TIMESTAMP", "STRING", "STRING", "BIGINT", "BOOLEAN")


class HistoryColumns:
    """The history table's own column names: ``metadata_prefix`` + one of :data:`HISTORY_COLUMNS`."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        for name in HISTORY_COLUMNS:
            setattr(self, name, prefix + name)

    valid_from_lsn: str
    valid_to_lsn: str
    valid_from_ts: str
    valid_to_ts: str
    operation: str
    closed_by: str
    copies: str
    is_current: str

    def ddl(self) -> list[tuple[str, str]]:
        return [(self.prefix + name, ddl) for name, ddl in zip(HISTORY_COLUMNS, HISTORY_TYPES)]


@dataclass(frozen=True)
class Truncates:
    """The batch's truncates of one table, in commit order: (commit LSN, seq, commit timestamp, cause,
    range) — the cause ``'truncate'``, or ``'snapshot'`` for a lander's snapshot (which empties the table
    at its LSN before its rows: docs/SNAPSHOTS.md); the range ``None`` (every row), or for a key-range
    chunk ``(silver column index, low, high)``: only rows whose column lies in ``[low, high)``.

    Each method takes the row's value of a range's column as ``key(column index)`` (events and open
    versions name it differently); without ranges it is never called."""

    points: tuple[tuple, ...] = ()
    ddls: tuple[str, ...] = ()   # Spark type of each silver column (a range's bounds are cast to it)

    def _applies(self, point, key):
        from pyspark.sql import functions as F

        rng = point[4] if len(point) > 4 else None
        if rng is None:
            return F.lit(True)
        column, low, high = rng
        value, ddl = key(column), self.ddls[column]
        cond = F.lit(True)
        if low is not None:
            cond = cond & (value >= F.lit(low).cast(ddl))
        if high is not None:
            cond = cond & (value < F.lit(high).cast(ddl))
        return F.coalesce(cond, F.lit(False))

    def applies_sql(self, point, key) -> str:
        """:meth:`_applies` as SQL text (``key(column index)``: the column's SQL), for a MERGE's clause."""
        rng = point[4] if len(point) > 4 else None
        if rng is None:
            return "TRUE"
        column, low, high = rng
        value, ddl = key(column), self.ddls[column]
        parts = ([f"{value} >= {sql_literal(low, ddl)}"] if low is not None else []) + \
                ([f"{value} < {sql_literal(high, ddl)}"] if high is not None else [])
        return f"coalesce({' AND '.join(parts) or 'TRUE'}, FALSE)"

    def epoch(self, key=None, lsn_col: str = cc.COMMIT_LSN, seq_col: str = cc.SEQ):
        """How many truncates of the row come before an event (at ``(lsn, seq)``) in commit order."""
        from pyspark.sql import functions as F

        terms = [(((F.col(lsn_col) > p[0]) | ((F.col(lsn_col) == p[0]) & (F.col(seq_col) > p[1])))
                  & self._applies(p, key)).cast("int") for p in self.points]
        return reduce(lambda a, b: a + b, terms, F.lit(0))

    def epoch_of_version(self, from_col: str, key=None):
        """Epoch of a version that began at commit LSN ``from_col``: its row's truncates at or before that commit."""
        from pyspark.sql import functions as F

        terms = [((F.col(from_col) >= p[0]) & self._applies(p, key)).cast("int") for p in self.points]
        return reduce(lambda a, b: a + b, terms, F.lit(0))

    def at(self, epoch_col: str, key=None):
        """(LSN, timestamp, cause) of the row's truncate that ends epoch ``epoch_col`` (null for its last epoch)."""
        from pyspark.sql import functions as F

        if not self.points:
            return F.lit(None).cast("bigint"), F.lit(None).cast("timestamp"), F.lit(None).cast("string")
        points = F.array(*[F.struct(F.lit(p[0]).cast("bigint").alias("lsn"), F.lit(p[2]).cast("timestamp").alias("ts"),
                                    F.lit(p[3]).alias("cause"), self._applies(p, key).alias("on"))
                           for p in self.points])
        mine = F.filter(points, lambda p: p["on"])
        index = F.col(epoch_col) + 1
        inside = F.col(epoch_col) < F.size(mine)
        hit = F.element_at(mine, F.when(inside, index).otherwise(F.lit(1)))
        return F.when(inside, hit["lsn"]), F.when(inside, hit["ts"]), F.when(inside, hit["cause"])


def _event_key(work: TableWork):
    """A key-range chunk's column among the key columns ``k_<p>`` of key events."""
    from pyspark.sql import functions as F

    def key(column: int):
        if column not in work.key_index:
            raise ApplyError(f"a snapshot chunk of {work.qualified_name} is a range of column "
                             f"{work.columns[column].name!r}, which is not a column of the key its history is kept "
                             "by", table=work.qualified_name)
        return F.col(cc.key(work.key_index.index(column)))

    return key


def _event_meta(work: TableWork) -> dict[str, str]:
    """Decoded metadata column -> silver column, for the ones silver keeps."""
    return {src: col for col, src in work.meta}


def _prior_events(open_rows, work: TableWork, h: HistoryColumns, truncates: Truncates):
    """The open versions as ``P`` events shaped like :func:`cdc_apply.lake.silver.merge.key_events`' rows."""
    from pyspark.sql import functions as F

    meta = _event_meta(work)
    cols = [F.lit(-1).cast("bigint").alias(cc.SEQ)]
    for src in EVENT_META:
        dtype = {cc.COMMIT_LSN: "bigint", cc.COMMIT_TS: "timestamp", cc.XID: "bigint"}.get(src, "string")
        cols.append((F.col(quote_ident(meta[src])) if src in meta else F.lit(None)).cast(dtype).alias(src))
    for i, c in enumerate(work.columns):
        cols += [F.col(quote_ident(c.name)).alias(cc.value(i)), F.lit(True).alias(cc.carried(i)),
                 F.lit(True).alias(cc.present(i))]
    cols += [F.lit("P").alias(cc.KIND), F.lit(0).alias("_sub"), F.lit(False).alias("_move")]
    cols += [F.col(quote_ident(work.columns[i].name)).alias(cc.key(p)) for p, i in enumerate(work.key_index)]
    cols += [F.lit(None).cast(work.columns[i].spark_ddl).alias(f"_src_k_{p}") for p, i in enumerate(work.key_index)]
    cols += [F.lit(-1).cast("bigint").alias("_grp"), F.col(h.valid_from_lsn).alias("_vf_lsn"),
             F.col(h.valid_from_ts).alias("_vf_ts"), F.col(h.operation).alias("_vop"),
             truncates.epoch_of_version(h.valid_from_lsn, lambda i: F.col(quote_ident(work.columns[i].name)))
             .alias("_epoch")]
    return open_rows.select(*cols)


def keyed_versions(events, open_rows, work: TableWork, h: HistoryColumns, truncates: Truncates,
                   tracked: Sequence[int] | None):
    """The versions a batch's key events make (``_prior``: the row updates the key's open version).

    ``events``: :func:`cdc_apply.lake.silver.merge.key_events` rows (move-ins' unchanged TOAST filled);
    ``open_rows``: the history table's open versions of the keys the events touch; ``tracked``:
    silver column indexes whose changes open a version (None: every column).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    n, nk = len(work.columns), len(work.key_index)
    ev = events.select("*", F.col(cc.COMMIT_LSN).alias("_grp"), F.lit(None).cast("bigint").alias("_vf_lsn"),
                       F.lit(None).cast("timestamp").alias("_vf_ts"), F.lit(None).cast("string").alias("_vop"),
                       truncates.epoch(_event_key(work)).alias("_epoch"))
    prior = _prior_events(open_rows, work, h, truncates)
    stream = ev.unionByName(prior.select(*ev.columns))
    part = [F.col(cc.key(p)) for p in range(nk)] + [F.col("_epoch")]
    w_all = Window.partitionBy(*part).orderBy("_grp", cc.SEQ, "_sub")
    w = w_all.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    stream = stream.select("*", F.lag(cc.KIND).over(w_all).alias("_pk"))
    after_reset = (F.col(cc.KIND) != "D") & (F.col("_pk").isNull() | (F.col("_pk") == "D"))
    cols = [F.col(c) for c in ("_grp", "_epoch", cc.KIND, "_vf_lsn", "_vf_ts", "_vop", *EVENT_META)]
    cols += [F.col(cc.key(p)) for p in range(nk)]
    for i in range(n):
        cols += [F.last(F.when(F.col(cc.carried(i)), F.struct(F.col(cc.value(i)).alias("v"))), ignorenulls=True)
                 .over(w).alias(f"r_{i}"), F.col(cc.present(i))]
    cols += [F.lead("_grp").over(w_all).alias("_ng0"),
             F.last(F.when(F.col(cc.KIND) == "D", F.struct(F.col("_grp").alias("g"), F.col("_move").alias("mv"))),
                    ignorenulls=True).over(w).alias("_rk"),
             F.last(F.when(after_reset, F.col(cc.KIND)), ignorenulls=True).over(w).alias("_ck")]
    groups = stream.select(*cols).where(F.col("_ng0").isNull() | (F.col("_ng0") != F.col("_grp")))
    complete = reduce(lambda a, b: a & b, [F.col(f"r_{i}").isNotNull() | ~F.col(cc.present(i)) for i in range(n)],
                      F.lit(True))
    reset = F.coalesce(F.col("_rk.g") == F.col("_grp"), F.lit(False))
    groups = groups.select(
        *[c for c in groups.columns if not c.startswith("r_") and not c.startswith("p_") and c != "_ng0"],
        *[F.col(f"r_{i}.v").alias(cc.final(i)) for i in range(n)],
        ((F.col(cc.KIND) == "P") | ((F.col(cc.KIND) != "D") & complete)).alias("_present"),
        reset.alias("_reset"),
        F.when(reset, F.when(F.col("_rk.mv"), F.lit("move")).otherwise(F.lit("delete"))).alias("_cause"))
    g = Window.partitionBy(*part).orderBy("_grp")
    prev_present = F.lag("_present").over(g)
    if tracked is None:
        changed = F.lit(True)
    else:
        changed = reduce(lambda a, b: a | b,
                         [~F.col(cc.final(i)).eqNullSafe(F.lag(cc.final(i)).over(g)) for i in tracked],
                         F.lit(False))
    opened = F.when(F.col(cc.KIND) == "P", F.col("_vop")).when(
        F.coalesce(prev_present, F.lit(False)) & ~F.col("_reset"), F.lit("update")).when(
        F.col("_ck") == "M", F.lit("move")).when(F.col(cc.XID) == SNAPSHOT_XID, F.lit("snapshot")).otherwise(
        F.lit("insert"))
    starts = F.col("_present") & (prev_present.isNull() | ~prev_present | F.col("_reset") | changed)
    groups = groups.select("*", starts.alias("_starts"), opened.alias("_opened"))
    start = F.struct((F.col(cc.KIND) == "P").alias("prior"), F.coalesce("_vf_lsn", "_grp").alias("lsn"),
                     F.coalesce("_vf_ts", cc.COMMIT_TS).alias("ts"), F.col("_opened").alias("op"))
    g_to_here = g.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    marked = groups.select(
        "*", F.lead("_grp").over(g).alias("_ng"), F.lead(cc.COMMIT_TS).over(g).alias("_nts"),
        F.lead("_present").over(g).alias("_np"), F.lead("_starts").over(g).alias("_ns"),
        F.lead("_cause").over(g).alias("_nc"),
        F.last(F.when(F.col("_starts"), start), ignorenulls=True).over(g_to_here).alias("_start"))
    ends = marked.where(F.col("_present") & (F.col("_ng").isNull() | ~F.col("_np") | F.col("_ns")))
    cut_lsn, cut_ts, cut_cause = truncates.at("_epoch", _event_key(work))
    has_next = F.col("_ng").isNotNull()
    closed_by = F.when(has_next, F.coalesce(F.col("_nc"), F.when(F.col("_np"), F.lit("update"))
                                            .otherwise(F.lit("delete")))).otherwise(cut_cause)
    valid_to = F.when(has_next, F.col("_ng")).otherwise(cut_lsn)
    meta = {src: col for col, src in work.meta}
    out = [F.col(cc.final(i)).alias(c.name) for i, c in enumerate(work.columns)]
    out += [F.col(src).alias(col) for src, col in meta.items()]
    out += [F.col("_start.lsn").alias(h.valid_from_lsn), valid_to.alias(h.valid_to_lsn),
            F.col("_start.ts").alias(h.valid_from_ts), F.when(has_next, F.col("_nts")).otherwise(cut_ts)
            .alias(h.valid_to_ts), F.col("_start.op").alias(h.operation), closed_by.alias(h.closed_by),
            F.lit(1).cast("bigint").alias(h.copies), valid_to.isNull().alias(h.is_current),
            F.col("_start.prior").alias("_prior")]
    return ends.select(*out)


def keyless_versions(projected, history, work: TableWork, h: HistoryColumns, truncates: Truncates,
                     small: bool = True):
    """Versions of a table without a key: one per distinct row value and copy count.

    ``projected``: :func:`cdc_apply.lake.silver.merge.project` rows of the batch (truncates not cut off);
    ``history``: the history table (its open versions of the values the batch touches are read);
    ``small``: few changes (their values are broadcast to find the open versions).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    n = len(work.columns)
    if projected.where((F.col(cc.OP) == "U") & F.col(cc.OLD_KIND).isNull()).limit(1).count():
        raise ApplyError("an update without its old row on a table without a key: cannot tell which row changed; "
                         "set REPLICA IDENTITY FULL or configure the key", table=work.qualified_name)
    values = [cc.final(i) for i in range(n)]
    filled = [F.when(F.col(cc.carried(i)), F.col(cc.value(i))).when(F.col(cc.present(i)), F.col(cc.old(i)))
              for i in range(n)]
    common = [F.col(cc.COMMIT_LSN).alias("_grp"), cc.SEQ, *EVENT_META, F.col(cc.OP).alias(cc.KIND),
              F.lit(None).cast("bigint").alias("_vf_lsn"), F.lit(None).cast("timestamp").alias("_vf_ts"),
              F.lit(None).cast("string").alias("_vop"), truncates.epoch().alias("_epoch")]
    adds = projected.where(F.col(cc.OP).isin("I", "U")).select(
        *[v.alias(cc.final(i)) for i, v in enumerate(filled)], F.lit(1).cast("bigint").alias("_d"),
        F.lit(1).alias("_step"), *common)
    subs = projected.where(F.col(cc.OP).isin("U", "D")).select(
        *[F.col(cc.old(i)).alias(cc.final(i)) for i in range(n)], F.lit(-1).cast("bigint").alias("_d"),
        F.lit(0).alias("_step"), *common)
    meta = _event_meta(work)
    open_rows = open_versions_of(history, adds.unionByName(subs), work, h, keyed=False, small=small)
    prior = open_rows.select(
        *[F.col(quote_ident(c.name)).alias(cc.final(i)) for i, c in enumerate(work.columns)],
        F.col(h.copies).alias("_d"), F.lit(0).alias("_step"), F.lit(-1).cast("bigint").alias("_grp"),
        F.lit(-1).cast("bigint").alias(cc.SEQ),
        *[(F.col(quote_ident(meta[src])) if src in meta else F.lit(None)).cast(
            {cc.COMMIT_LSN: "bigint", cc.COMMIT_TS: "timestamp", cc.XID: "bigint"}.get(src, "string")).alias(src)
          for src in EVENT_META],
        F.lit("P").alias(cc.KIND), F.col(h.valid_from_lsn).alias("_vf_lsn"), F.col(h.valid_from_ts).alias("_vf_ts"),
        F.col(h.operation).alias("_vop"), truncates.epoch_of_version(h.valid_from_lsn).alias("_epoch"))
    steps = adds.unionByName(subs).unionByName(prior.select(*adds.columns))
    part = [F.col(v) for v in values] + [F.col("_epoch")]
    w_all = Window.partitionBy(*part).orderBy("_grp", cc.SEQ, "_step")
    w = w_all.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    steps = steps.select("*", F.sum("_d").over(w).alias("_s"))
    # A removal that finds no copy left changes nothing: the count is the running sum lifted by its lowest dip.
    steps = steps.select("*", (F.col("_s") - F.least(F.min("_s").over(w), F.lit(0))).alias("_count"),
                         F.lead("_grp").over(w_all).alias("_ng0"))
    groups = steps.where(F.col("_ng0").isNull() | (F.col("_ng0") != F.col("_grp")))
    g = Window.partitionBy(*part).orderBy("_grp")
    changes = (groups.select("*", F.coalesce(F.lag("_count").over(g), F.lit(0)).alias("_pc"))
               .where(F.col("_count") != F.col("_pc")))
    kinds = F.create_map(*[F.lit(x) for kv in (("I", "insert"), ("U", "update"), ("D", "delete")) for x in kv])
    marked = changes.select("*", F.lead("_grp").over(g).alias("_ng"), F.lead(cc.COMMIT_TS).over(g).alias("_nts"),
                            F.lead(cc.KIND).over(g).alias("_nk"))
    versions = marked.where(F.col("_count") > 0)
    cut_lsn, cut_ts, cut_cause = truncates.at("_epoch")
    has_next = F.col("_ng").isNotNull()
    valid_to = F.when(has_next, F.col("_ng")).otherwise(cut_lsn)
    prior_flag = F.col(cc.KIND) == "P"
    opened = F.when((F.col(cc.KIND) == "I") & (F.col(cc.XID) == SNAPSHOT_XID), F.lit("snapshot")).otherwise(
        kinds[F.col(cc.KIND)])
    out = [F.col(cc.final(i)).alias(c.name) for i, c in enumerate(work.columns)]
    out += [F.col(src).alias(col) for src, col in meta.items()]
    out += [F.when(prior_flag, F.col("_vf_lsn")).otherwise(F.col("_grp")).alias(h.valid_from_lsn),
            valid_to.alias(h.valid_to_lsn),
            F.when(prior_flag, F.col("_vf_ts")).otherwise(F.col(cc.COMMIT_TS)).alias(h.valid_from_ts),
            F.when(has_next, F.col("_nts")).otherwise(cut_ts).alias(h.valid_to_ts),
            F.when(prior_flag, F.col("_vop")).otherwise(opened).alias(h.operation),
            F.when(has_next, kinds[F.col("_nk")]).otherwise(cut_cause).alias(h.closed_by),
            F.col("_count").alias(h.copies), valid_to.isNull().alias(h.is_current), prior_flag.alias("_prior")]
    # A value whose count the batch left as it was keeps its open version untouched.
    return versions.select(*out).where(~F.col("_prior") | F.col(h.valid_to_lsn).isNotNull())


def merge_versions(tables: SparkTables, target, versions, work: TableWork, h: HistoryColumns, truncates: Truncates,
                   keyed: bool) -> None:
    """One MERGE into the history table ``target`` (a TableRef): the prior versions' updates, the new
    versions, and — when the batch truncates the table — the close of every other open version."""

    if keyed:
        match = [f"t.{quote_ident(work.columns[i].name)} = s.{quote_ident(work.columns[i].name)}"
                 for i in work.key_index]
    else:
        match = [f"t.{quote_ident(c.name)} <=> s.{quote_ident(c.name)}" for c in work.columns]
    condition = " AND ".join([f"t.{quote_ident(h.is_current)}", "s._prior", *match])
    names = [c.name for c in work.columns] + [col for col, _ in work.meta]
    everything = names + [h.valid_from_lsn, h.valid_to_lsn, h.valid_from_ts, h.valid_to_ts, h.operation,
                          h.closed_by, h.copies, h.is_current]
    closing = [h.valid_to_lsn, h.valid_to_ts, h.closed_by, h.is_current]
    updated = (names if keyed else []) + closing
    builder = (tables.delta_table(target).alias("t").merge(versions.alias("s"), condition)
               .whenMatchedUpdate(set={quote_ident(c): tables.column(f"s.{quote_ident(c)}") for c in updated})
               .whenNotMatchedInsert(condition="NOT s._prior",
                                     values={quote_ident(c): tables.column(f"s.{quote_ident(c)}") for c in everything}))
    if truncates.points:
        closes, assignments = tables.in_form(lambda: truncate_closes_sql(truncates, work, h),
                                             lambda: _truncate_closes(truncates, work, h))
        builder = builder.whenNotMatchedBySourceUpdate(condition=closes, set=assignments)
    builder.execute()


def _truncate_closes(truncates: Truncates, work: TableWork, h: HistoryColumns) -> tuple[Column, dict]:
    """:func:`~cdc_apply.lake.silver.merge_sql.truncate_closes_sql` as Columns (a point's values need no SQL
    literal then)."""
    from pyspark.sql import functions as F

    frm = F.col(f"t.{quote_ident(h.valid_from_lsn)}")
    target_key = lambda i: F.col(f"t.{quote_ident(work.columns[i].name)}")  # noqa: E731
    # Each point wraps the ones after it: the innermost (first) otherwise is NULL.
    lsn: Column | None = None
    ts: Column | None = None
    cause: Column | None = None
    closes = F.lit(False)
    for point in reversed(truncates.points):
        point_lsn, _, point_ts, point_cause = point[:4]
        hit = (frm < point_lsn) & truncates._applies(point, target_key)
        lsn = F.when(hit, F.lit(point_lsn).cast("bigint")).otherwise(lsn)
        ts = F.when(hit, F.lit(point_ts).cast("timestamp")).otherwise(ts)
        cause = F.when(hit, F.lit(point_cause)).otherwise(cause)
        closes = closes | hit
    return (F.col(f"t.{quote_ident(h.is_current)}") & closes,
            {quote_ident(h.valid_to_lsn): lsn, quote_ident(h.valid_to_ts): ts,
             quote_ident(h.closed_by): cause, quote_ident(h.is_current): F.lit(False)})


def open_versions_of(history_df, keys_df, work: TableWork, h: HistoryColumns, keyed: bool, small: bool):
    """The history table's open versions whose key (or, without a key, whole value) ``keys_df`` holds
    (columns ``k_<p>``, or ``v_<i>``)."""
    from pyspark.sql import functions as F

    current = history_df.where(F.col(quote_ident(h.is_current)))
    if keyed:
        names = [work.columns[i].name for i in work.key_index]
        probe = [F.col(cc.key(p)) for p in range(len(names))]
    else:
        names = [c.name for c in work.columns]
        probe = [F.col(cc.final(i)) for i in range(len(names))]
    keys = keys_df.select(*[p.alias(f"_hk_{j}") for j, p in enumerate(probe)]).distinct()
    keys = F.broadcast(keys) if small else keys
    cond = null_safe_equal([F.col(quote_ident(name)) for name in names], [F.col(f"_hk_{j}") for j in range(len(names))])
    return current.join(keys, cond, "left_semi")
