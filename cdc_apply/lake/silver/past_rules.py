"""Column rules that reach the past: a ``mask_columns`` or ``exclude_columns`` rule added to a table that
already has rows masks the values the table holds, or drops the column, before the batch's writes.

Each table (silver, then its history table) gets one UPDATE of every row: a masked STRING column is masked
in place, a masked column of another type is masked into a STRING column ``<column>__masking`` that then
takes its place (added before, the old column dropped and the new one renamed after), and an excluded
column is set to NULL and then dropped (column mapping's DROP COLUMN, which rewrites no file: the UPDATE
already rewrote them without the values). The UPDATE runs with deletion vectors off, so the table's current
files hold no clear value; older Delta versions, and the change data feed's pre-images of the UPDATE, still
do until VACUUM removes their files.

What a table's values reflect is the table property :data:`PROP_APPLIED` (lineage → rule), and the same
text in the ``userMetadata`` of the UPDATE that applied it (:mod:`cdc_apply.lake.books.commit_tag`): a
crash after the UPDATE and before the property finds the UPDATE's tag on the re-run and does not mask
again (a hash of a hash would differ from the hash). The other steps are guarded by the table's schema.
A rule removed later does not unmask: its lineage stays recorded, so adding it again does not mask twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Mapping

from cdc_apply.config.columns import Mask
from cdc_apply.delta.ddl import USER_METADATA, set_properties, table_properties
from cdc_apply.delta.names import quote_ident
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.books.commit_tag import decode_tag, encode_tag
from cdc_apply.planning.masks import mask_sql
from cdc_apply.planning.tables import ColumnRules, evolve

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables
    from cdc_apply.planning.tables import DropColumns, Retype  # the configuration's words, as evolve takes them

PROP_APPLIED = "cdc_apply.masks_applied"
PART = "column rules applied to the rows already written"
TAG_KEY = "masks_applied"
EXCLUDE: Literal["exclude"] = "exclude"
TEMP_SUFFIX = "__masking"
UPDATE_DVS = "spark.databricks.delta.update.deletionVectors.persistent"
RETENTION = "delta.deletedFileRetentionDuration"
DEFAULT_RETENTION = "interval 1 week"   # Delta's default for delta.deletedFileRetentionDuration
TAG_PROBE = 64   # recent commits searched for an UPDATE whose property commit a crash cut off
# A legacy table's column already masked (no property: created before masks were recorded): every value
# looks like what the mask writes.
LOOKS_MASKED = {"sha256": "{c} RLIKE '^[0-9a-f]{{64}}$'", "redact": "{c} = 'REDACTED'"}

Rule = Mask | Literal["exclude"]
Rules = dict[int, Rule]     # lineage -> its rule, as the configuration gives them now
Applied = Mapping[int, str]  # lineage -> rule, as a table records them (read back from its property or tag)


def rules_applied(rules: ColumnRules) -> Rules:
    """The rules as recorded on a table: each lineage's mask, or :data:`EXCLUDE`."""
    applied: Rules = {lin: EXCLUDE for lin in rules.excluded}
    applied.update(dict(rules.masked))
    return applied


def encode_applied(applied: Applied) -> str:
    return json.dumps({str(lin): rule for lin, rule in sorted(applied.items())}, separators=(",", ":"))


def decode_applied(text: str | None) -> dict[int, str] | None:
    if not text:
        return None
    try:
        body = json.loads(text)
        return {int(lin): str(rule) for lin, rule in body.items()}
    except (ValueError, AttributeError, TypeError):
        return None


def created_properties(rules: ColumnRules) -> dict[str, str]:
    """What a table created under ``rules`` records: its rows are masked from the start."""
    return {PROP_APPLIED: encode_applied(rules_applied(rules))} if rules.excluded or rules.masked else {}


@dataclass
class PastResult:
    """What :func:`apply_past_rules` did to one table."""

    masked: dict[str, tuple[str, int]] = field(default_factory=dict)   # column -> (mask, rows with a value)
    dropped: list[str] = field(default_factory=list)
    retention: str = DEFAULT_RETENTION


def apply_past_rules(tables: SparkTables, ref: TableRef, rules: ColumnRules, names: dict[int, str], salt: str,
                     tag: dict, fault: Callable[[str], None]) -> PastResult | None:
    """Bring the rows ``ref`` holds under ``rules`` (lineages; ``names``: lineage → the table's column name);
    ``tag``: what the commits' ``userMetadata`` says besides; ``fault(point)`` lets tests crash between steps.
    Returns what it did, or None when the table's values already reflect every rule."""
    wanted = rules_applied(rules)
    if not wanted:
        return None
    props = table_properties(tables.spark, ref)
    recorded = decode_applied(props.get(PROP_APPLIED))
    if recorded is not None and set(wanted) <= set(recorded) and not _unfinished(tables, ref, recorded, names):
        return None
    schema = {f.name: f.dataType.simpleString() for f in tables.read(ref).schema.fields}
    applied = dict(recorded or {})
    if any(lin not in applied for lin in wanted):
        applied.update(_newest_tagged(tables, ref) or {})   # an UPDATE whose property commit a crash cut off
    pending = {lin: rule for lin, rule in wanted.items() if lin not in applied}
    present = {lin: rule for lin, rule in pending.items() if names.get(lin) in schema}
    if recorded is None and present and not applied:
        present = _clear_in_legacy(tables, ref, present, names, schema)
    result = PastResult(retention=props.get(RETENTION, DEFAULT_RETENTION))
    after = {**applied, **pending}
    metadata = encode_tag({**tag, TAG_KEY: encode_applied(after)})
    if present:
        result.masked = _update(tables, ref, present, names, schema, salt, metadata)
        fault("updated")
    result.dropped = _finish(tables, ref, wanted, after, names, fault)
    if recorded != after:
        tables.spark.conf.set(USER_METADATA, metadata)
        try:
            set_properties(tables.spark, ref, {PROP_APPLIED: encode_applied(after)})
        finally:
            tables.spark.conf.unset(USER_METADATA)
    return result if result.masked or result.dropped else None


def _unfinished(tables: SparkTables, ref: TableRef, applied: Applied, names: dict[int, str]) -> bool:
    """Whether a masked column's rebuild was cut short (its ``__masking`` column is still there)."""
    return bool(_temps(applied, names, {f.name for f in tables.read(ref).schema.fields}))


def _temps(applied: Applied, names: dict[int, str], schema) -> list[str]:
    """The masked columns whose ``__masking`` column the table holds (a rebuild under way)."""
    return [names[lin] for lin, rule in applied.items()
            if rule != EXCLUDE and lin in names and names[lin] + TEMP_SUFFIX in schema]


def _newest_tagged(tables: SparkTables, ref: TableRef) -> dict[int, str] | None:
    """The rules the newest commit tagged with them says the table's values reflect."""
    for _, metadata in tables.commit_user_metadata(ref, TAG_PROBE):
        tag = decode_tag(metadata)
        if tag is not None and TAG_KEY in tag:
            return decode_applied(tag[TAG_KEY])
    return None


def _clear_in_legacy(tables: SparkTables, ref: TableRef, present: Rules, names: dict[int, str],
                     schema: dict[str, str]) -> Rules:
    """A table written before rules were recorded: a STRING column whose every value already looks masked
    (the rule was there from the start) is left as it is; the rest are clear."""
    checks = {lin: rule for lin, rule in present.items() if rule in LOOKS_MASKED and schema[names[lin]] == "string"}
    if not checks:
        return present
    exprs = [f"count_if({quote_ident(names[lin])} IS NOT NULL AND NOT "
             f"({LOOKS_MASKED[rule].format(c=quote_ident(names[lin]))})) AS `c{i}`"
             for i, (lin, rule) in enumerate(checks.items())]
    row = tables.read(ref).selectExpr(*exprs).first()
    masked = {lin for i, lin in enumerate(checks) if row is not None and row[f"c{i}"] == 0}
    return {lin: rule for lin, rule in present.items() if lin not in masked}


def _update(tables: SparkTables, ref: TableRef, present: Rules, names: dict[int, str], schema: dict[str, str],
            salt: str, metadata: str) -> dict[str, tuple[str, int]]:
    """The one UPDATE of every row (after adding the STRING columns masks of other types go into)."""
    spark = tables.spark
    counts_of = [f"count({quote_ident(names[lin])}) AS `c{i}`" for i, lin in enumerate(present)]
    row = tables.read(ref).selectExpr(*counts_of).first()
    counts = {lin: int(row[f"c{i}"]) if row is not None else 0 for i, lin in enumerate(present)}
    temps = [names[lin] + TEMP_SUFFIX for lin, rule in present.items()
             if rule != EXCLUDE and schema[names[lin]] != "string" and names[lin] + TEMP_SUFFIX not in schema]
    if temps:
        spark.sql(f"ALTER TABLE {ref.sql} ADD COLUMNS ({', '.join(f'{quote_ident(t)} STRING' for t in temps)})")
    sets = []
    for lin, rule in present.items():
        column = quote_ident(names[lin])
        if rule == EXCLUDE:
            sets.append(f"{column} = NULL")
        elif schema[names[lin]] == "string":
            sets.append(f"{column} = {mask_sql(rule, salt, column)}")
        else:   # masked as the projection masks it: the value's text as Spark casts it
            temp = quote_ident(names[lin] + TEMP_SUFFIX)
            sets += [f"{temp} = {mask_sql(rule, salt, f'CAST({column} AS STRING)')}", f"{column} = NULL"]
    # Deletion vectors off: the files holding the clear values leave the table's current version.
    spark.conf.set(UPDATE_DVS, "false")
    spark.conf.set(USER_METADATA, metadata)
    try:
        spark.sql(f"UPDATE {ref.sql} SET {', '.join(sets)}")
    finally:
        spark.conf.unset(USER_METADATA)
        spark.conf.unset(UPDATE_DVS)
    return {names[lin]: (rule, counts[lin]) for lin, rule in present.items() if rule != EXCLUDE}


def _finish(tables: SparkTables, ref: TableRef, wanted: Applied, applied: Applied, names: dict[int, str],
            fault: Callable[[str], None]) -> list[str]:
    """After the UPDATE (this run's or a crashed one's): drop the excluded columns and the columns a
    ``__masking`` column replaces, and rename those into place. Guarded by the schema."""
    spark = tables.spark
    schema = {f.name for f in tables.read(ref).schema.fields}
    # A column masked before and excluded now goes too (its values are masked: nothing is lost but hashes).
    excluded = [names[lin] for lin, rule in wanted.items() if rule == EXCLUDE and lin in applied
                and names.get(lin) in schema]
    replaced = _temps(applied, names, schema)
    drops = excluded + [c for c in replaced if c in schema]
    if drops:
        spark.sql(f"ALTER TABLE {ref.sql} DROP COLUMNS ({', '.join(quote_ident(c) for c in drops)})")
        fault("dropped")
    for column in replaced:
        spark.sql(f"ALTER TABLE {ref.sql} RENAME COLUMN {quote_ident(column + TEMP_SUFFIX)} TO {quote_ident(column)}")
    return excluded


def lineage_names(planned, policies: tuple[DropColumns, Retype]) -> dict[int, str]:
    """Each lineage's column name in a table written without ``planned``'s exclusions (an excluded column
    the table still holds is named so), as of the batch's newest relation version; ``policies``: silver's
    drop policy and ``Retype.REWRITE`` (only names are asked: no retype is refused)."""
    columns, _ = evolve(planned.chain, planned.type_of, *policies, rules=ColumnRules(frozenset(), planned.rules.masked))
    return {c.lineage: c.name for c in columns}


def apply_to_table(tables: SparkTables, planned, policies: tuple[DropColumns, Retype], salt: str,
                   history: Callable[[], TableRef] | None, fault: Callable[[str], None]) -> str | None:
    """``planned``'s rules brought to the rows its silver table holds, then to its history table's
    (``history``: makes the history table ready and returns it; None: none kept). Returns the run's line
    saying what was done, or None when nothing was."""
    work, rules = planned.work, planned.rules
    if not rules.excluded and not rules.masked:
        return None
    names = lineage_names(planned, policies)
    tag = {"source": work.source, "relation": work.qualified_name, "part": PART}
    silver = apply_past_rules(tables, work.ref, rules, names, salt, tag,
                              lambda point: fault(f"past-rules:silver:{point}:{work.qualified_name}"))
    kept = None
    if history is not None:
        kept = apply_past_rules(tables, history(), rules, names, salt, {**tag, "history": True},
                                lambda point: fault(f"past-rules:history:{point}:{work.qualified_name}"))
    return describe(work.qualified_name, silver, kept)


def describe(table: str, silver: PastResult | None, history: PastResult | None) -> str | None:
    """The run's one line for a table the rules reached: what it did, and what time travel still reads."""
    done = [(what, r) for what, r in (("silver", silver), ("history", history)) if r is not None]
    if not done:
        return None
    parts = []
    for column in dict.fromkeys(c for _, r in done for c in r.masked):
        rule = next(r.masked[column][0] for _, r in done if column in r.masked)
        where = " and ".join(f"{r.masked[column][1]} {'rows' if what == 'silver' else 'versions'} in {what}"
                             for what, r in done if column in r.masked)
        parts.append(f"masked ({rule}) {table}.{column}: {where}")
    for column in dict.fromkeys(c for _, r in done for c in r.dropped):
        where = " and ".join(what for what, r in done if column in r.dropped)
        parts.append(f"dropped the excluded column {table}.{column} in {where}")
    return (f"cdc_apply: {'; '.join(parts)}; earlier Delta versions (time travel) and the change data feed of these "
            f"commits still hold the clear values until VACUUM removes their files (retention {done[0][1].retention}, "
            f"{RETENTION})")


__all__ = ["PROP_APPLIED", "PastResult", "apply_past_rules", "apply_to_table", "created_properties", "decode_applied",
           "describe", "encode_applied", "lineage_names", "rules_applied"]
