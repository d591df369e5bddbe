"""Several silver tables of one source as of one PostgreSQL commit LSN (docs/HISTORY.md).

Two ways to get there, with different precision:

* **history** (tables that keep a history table): the state after *any* applied commit. The
  frames show the newest applied commit at or below the LSN asked for.
* **time travel** (every table): Delta versions recorded at the end of each batch (the progress
  rows' ``tables``), so only batch ends: the frames show the newest batch end at or below the LSN.

One read is consistent: every table shows the same LSN. When one table has no usable history (none
kept, or kept only since a later LSN) the whole read falls back to the batch end, history tables
included, and says so (``exact`` False when a commit between that batch end and the LSN asked for
is not shown). Nothing newer than the last completed batch is shown, so a batch still being
applied never shows half.

Command line (prints each table, or writes it with ``--out``)::

    cdc-apply as-of --config conf/shop.toml --lsn 16/B374D848 --tables public.orders,public.lines
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Sequence

from cdc_apply.config import Config
from cdc_apply.config.choices import Retype
from cdc_apply.delta.ddl import table_properties
from cdc_apply.delta.names import quote_ident
from cdc_apply.delta.refs import TableRef, history_ref_for, silver_ref_for
from cdc_apply.errors import AsOfError
from cdc_apply.lake.books.bookkeeping import Bookkeeping
from cdc_apply.lake.history.lsn import lsn_text, lsn_value
from cdc_apply.lake.history.tables import PROP_COMPLETE_FROM
from cdc_apply.lake.history.versions import HISTORY_COLUMNS, HistoryColumns
from cdc_apply.lake.silver.soft_deletes import live_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables

AsOfMethod = Literal["auto", "history", "time travel"]   # asked for; a result shows "history" or "time travel"
METHODS: tuple[AsOfMethod, ...] = ("auto", "history", "time travel")


@dataclass
class AsOf:
    """Silver tables of one source as of one commit LSN; ``frames[name]`` (or ``as_of[name]``) is a DataFrame."""

    source: str
    requested_lsn: int
    lsn: int | None        # the commit LSN the frames show (None: nothing was applied at or below the LSN asked)
    exact: bool            # True: the frames show the newest applied commit at or below requested_lsn
    method: AsOfMethod     # "history" or "time travel"
    frames: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)   # time travel: table -> Delta version read (None: empty then)

    def __getitem__(self, name: str):
        return self.frames[name]

    @property
    def lsn_text(self) -> str | None:
        return lsn_text(self.lsn)


def read_as_of(spark: SparkSession, config: Config, lsn: int | str, tables: Sequence[str] | None = None,
               source: str | None = None, method: AsOfMethod = "auto") -> AsOf:
    """DataFrames of ``tables`` (qualified names, e.g. ``"public.orders"``; default every table of the
    source) as of the newest applied commit at or below ``lsn`` (a BIGINT or ``"X/Y"``).

    ``method``: ``"auto"`` (history when every table keeps a usable one, else time travel to the newest
    batch end), ``"history"`` (an :class:`AsOfError` when a table has none) or ``"time travel"``.
    ``source`` is needed only when the pipeline applies several sources. Frames have the silver columns
    that existed at the commit they show (:class:`ColumnsAt`), named as silver names them now.
    """
    from pyspark.sql import functions as F

    from cdc_apply.delta.engine import spark_tables

    engine = spark_tables(spark)   # the as-of entry point: the engine chosen here
    if method not in METHODS:
        raise AsOfError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    try:
        wanted = lsn_value(lsn)
    except (ValueError, TypeError):
        raise AsOfError(f"not an LSN: {lsn!r} (a number, or PostgreSQL's X/Y text)") from None
    books = Bookkeeping(config)
    if not engine.exists(books.ref("progress")):
        raise AsOfError("nothing was applied yet (no progress table)", state=config.state.path or config.state.schema)
    progress = books.ref("progress").read(spark)
    source = _source(progress, source)
    relations = _relations(books.load_history(engine).get(source), tables, config, source)
    mine = progress.where(F.col("source") == source)
    newest = mine.agg(F.max("applied_commit_lsn")).first()[0]
    cap = min(wanted, newest) if newest is not None else None
    applied = _newest_commit(spark, books, source, cap)
    usable = {}
    if method != "time travel":
        for name, rel in relations.items():
            ref = _history_of(engine, config, source, rel)
            if ref is not None and applied is not None and _complete_from(spark, ref) <= applied:
                usable[name] = ref
    if method == "history" and len(usable) < len(relations):
        missing = sorted(set(relations) - set(usable))
        raise AsOfError(f"no history table complete at that LSN for {', '.join(missing)}", lsn=lsn_text(wanted))
    if method != "time travel" and len(usable) == len(relations):
        frames = {name: _from_history(spark, ref, config, applied, ColumnsAt(relations[name], config, applied))
                  for name, ref in usable.items()}
        return AsOf(source, wanted, applied, True, "history", frames)
    # Every table by time travel to the same batch end: one kind of state, each table as it was then.
    end, version = _batch_end(mine, wanted)
    result = AsOf(source, wanted, end, end == applied, "time travel")
    for name, rel in relations.items():
        ref = silver_ref_for(config, source, rel.versions)
        if not engine.exists(ref):
            raise AsOfError("the table has no silver table", table=name, source=source)
        delta_version = _silver_version(engine, mine, rel.relation_id, ref, version, end)
        result.versions[name] = delta_version
        frame = _time_travel(spark, ref, delta_version, name)
        # A soft table's marked rows are rows the source lacked then, as in its history table.
        result.frames[name] = ColumnsAt(rel, config, end).of_silver(live_rows(frame, config.silver.metadata_prefix))
    return result


def as_of_views(spark: SparkSession, config: Config, lsn: int | str, tables: Sequence[str] | None = None,
                source: str | None = None, method: AsOfMethod = "auto", prefix: str = "") -> AsOf:
    """:func:`read_as_of`, each frame registered as a temporary view for SQL: ``<prefix><relation name>``
    (``<prefix><namespace>__<name>`` when two tables share a relation name)."""
    result = read_as_of(spark, config, lsn, tables, source, method)
    short = [name.split(".", 1)[-1] for name in result.frames]
    for name, frame in result.frames.items():
        view = name.split(".", 1)[-1] if short.count(name.split(".", 1)[-1]) == 1 else name.replace(".", "__", 1)
        frame.createOrReplaceTempView(prefix + view)
    return result


# -- the parts -----------------------------------------------------------------------------------
def _source(progress, source: str | None) -> str:
    sources = sorted(r.source for r in progress.select("source").distinct().collect())
    if source is not None:
        if source not in sources:
            raise AsOfError(f"no source {source!r} was applied (known: {', '.join(sources) or 'none'})")
        return source
    if len(sources) != 1:
        raise AsOfError(f"the pipeline applies {len(sources)} sources ({', '.join(sources)}): name one "
                        "(LSNs of different sources cannot be compared)")
    return sources[0]


def _relations(history, tables, config: Config, source: str) -> dict:
    """Qualified name (current) -> RelationHistory, for the tables asked for (default: every applied one)."""
    known = {} if history is None else {r.latest.qualified_name: r for r in history.relations.values()}
    if tables is None:
        return {name: rel for name, rel in sorted(known.items()) if config.table_selected(name)}
    out = {}
    for name in tables:
        rel = known.get(name) or next((r for r in known.values() if r.versions[0].qualified_name == name), None)
        if rel is None:
            raise AsOfError("no relation of that name was applied", table=name, source=source)
        out[rel.latest.qualified_name] = rel
    return out


def _newest_commit(spark: SparkSession, books: Bookkeeping, source: str, cap: int | None) -> int | None:
    """The newest applied commit (of a transaction that changed something) at or below ``cap``."""
    from pyspark.sql import functions as F

    if cap is None:
        return None
    log = books.ref("transactions").read(spark)
    return log.where((F.col("source") == source) & (F.col("commit_lsn") <= cap)).agg(F.max("commit_lsn")).first()[0]


def _history_of(engine: SparkTables, config: Config, source: str, rel) -> TableRef | None:
    """The relation's history table, when the configuration keeps one (a history no longer kept stops
    at the batch it was turned off: it cannot answer later LSNs)."""
    if config.history_for(rel.latest.qualified_name) is None:
        return None
    ref = history_ref_for(config, source, rel.versions)
    return ref if engine.exists(ref) else None


def _complete_from(spark: SparkSession, ref: TableRef) -> int:
    value = table_properties(spark, ref).get(PROP_COMPLETE_FROM)
    return int(value) if value is not None else 2 ** 63  # never written: not usable


class ColumnsAt:
    """Which of a table's columns existed at one commit LSN, named as the table names them now.

    A column exists from the relation version that added it: the version in effect at ``lsn`` is the
    last one that took effect at or before it (a relation version takes effect with the first change
    made under it, at that transaction's commit LSN; PostgreSQL describes a table only with a change).
    Columns are told apart by their lineage across versions (:mod:`cdc_apply.planning.schema`), so a
    column renamed since is the same column under its new name."""

    def __init__(self, rel, config: Config, lsn: int | None) -> None:
        from cdc_apply.planning.tables import initial_columns, transition

        def same(oid: int, typmod: int, column: str) -> str:
            return "STRING"   # names and lineage only: a type change renames and drops nothing

        self.steps = [initial_columns(rel.versions[0], same)]
        for old, new in zip(rel.versions, rel.versions[1:]):
            self.steps.append(transition(self.steps[-1], old, new, same, config.silver.drop_columns, Retype.REWRITE)[0])
        at = 0
        for index, version in enumerate(rel.versions):
            if lsn is not None and version.lsn <= lsn:
                at = index
        self.lineages = set(rel.versions[at].lineage)
        self.current = {c.lineage: c.name for c in self.steps[-1]}

    def shown(self, names: list[str]) -> list[tuple[str, str]]:
        """``(column, name shown)`` of the table's ``names`` (a frame of the table as it was after some
        relation version) that existed at the LSN, in their order; metadata columns stay."""
        step = min(reversed(self.steps), key=lambda cols: len(set(names) - {c.name for c in cols}))
        lineage = {c.name: c.lineage for c in step}
        kept = [(n, self.current.get(lineage[n], n) if n in lineage else n) for n in names
                if n not in lineage or lineage[n] in self.lineages]
        if len({shown for _, shown in kept}) < len(kept):   # a name taken since by another column
            return [(n, n) for n, _ in kept]
        return kept

    def of_silver(self, frame):
        """``frame`` (silver as of a Delta version) with the columns that existed at the LSN, named as now."""
        from pyspark.sql import functions as F

        return frame.select(*[F.col(quote_ident(n)).alias(shown) for n, shown in self.shown(frame.columns)])



def _from_history(spark: SparkSession, ref: TableRef, config: Config, lsn: int | None, at: ColumnsAt):
    """The history table's versions valid at ``lsn``, one row per copy, with the silver columns that
    existed at ``lsn``. A column dropped with ``drop_columns = "drop"`` left the history table too."""
    from pyspark.sql import functions as F

    h = HistoryColumns(config.silver.metadata_prefix)
    df = ref.read(spark)
    own = {config.silver.metadata_prefix + c for c in HISTORY_COLUMNS}
    columns = [F.col(quote_ident(c)).alias(shown) for c, shown in at.shown([c for c in df.columns if c not in own])]
    if lsn is None:
        return df.select(*columns).limit(0)
    valid = (F.col(h.valid_from_lsn) <= lsn) & (F.col(h.valid_to_lsn).isNull() | (F.col(h.valid_to_lsn) > lsn))
    copies = F.explode(F.array_repeat(F.lit(1), F.col(h.copies).cast("int")))
    return df.where(valid).select(*columns, copies.alias("_copy")).drop("_copy")


def _batch_end(progress, lsn: int) -> tuple[int | None, int]:
    """(applied commit LSN, apply version) of the newest batch end at or below ``lsn`` ((None, 0): none)."""
    from pyspark.sql import functions as F

    row = (progress.where(F.col("applied_commit_lsn").isNotNull() & (F.col("applied_commit_lsn") <= lsn))
           .orderBy(F.desc("apply_version")).select("applied_commit_lsn", "apply_version").first())
    return (None, 0) if row is None else (int(row.applied_commit_lsn), int(row.apply_version))


def _silver_version(engine: SparkTables, progress, relation_id: int, ref: TableRef, version: int,
                    end: int | None) -> int | None:
    """The silver table's Delta version at the end of apply version ``version``: the newest the progress
    rows record for it up to then; for batches applied before progress recorded versions, the newest
    data commit whose ``userMetadata`` says it applied nothing past ``end``."""
    from pyspark.sql import functions as F

    if end is None:
        return None
    recorded = (progress.where(F.col("apply_version") <= version).select(F.explode("tables").alias("t"))
                .where(F.col("t.relation_id") == relation_id).agg(F.max("t.silver_version")).first()[0])
    if recorded is not None:
        return int(recorded)
    from cdc_apply.lake.books.commit_tag import decode_tag
    from cdc_apply.lake.books.ledger import tag_commit_lsn

    best = None
    for row in engine.delta_table(ref).history().select("version", "userMetadata").collect():
        lsn = tag_commit_lsn(decode_tag(row.userMetadata) or {})
        if lsn is not None and lsn <= end:
            best = max(best or -1, int(row.version))
    return best


def _time_travel(spark: SparkSession, ref: TableRef, version: int | None, name: str):
    if version is None:  # no change of the table was applied by then
        return ref.read(spark).limit(0)
    try:
        reader = spark.read.format("delta").option("versionAsOf", version)
        df = ref.load(reader)
        df.schema  # noqa: B018 - resolves the version now, so a vacuumed one fails here
        return df
    except Exception as exc:  # noqa: BLE001 - Delta's own message says which files are gone
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise AsOfError(f"Delta version {version} of {ref} cannot be read ({first[:300]}); it may have been "
                        "vacuumed: keep a history table for reads this far back", table=name) from None
