"""What a silver table looks like after a batch, and the schema changes that get it there.

Pure planning: from a relation's chain of versions it derives the silver
columns (PostgreSQL names, Spark types), the schema operations between two
versions (add, rename, drop, retype — drop and incompatible retype by
policy), the identity used to match rows (key columns, or every column for
tables without one), and for each relation version how its columns land in
silver columns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Literal, Sequence

from cdc_apply.config import Config
from cdc_apply.config.choices import DropColumns, Retype
from cdc_apply.config.columns import Mask
from cdc_apply.errors import ConfigError, SchemaError
from cdc_apply.pgoutput.types import TypeOptions
from cdc_apply.planning.schema import RelationVersion

# Spark type changes Delta can make in place (type widening); anything else is rewritten.
_WIDENING = {
    ("TINYINT", "SMALLINT"), ("TINYINT", "INT"), ("TINYINT", "BIGINT"),
    ("SMALLINT", "INT"), ("SMALLINT", "BIGINT"), ("INT", "BIGINT"),
    ("FLOAT", "DOUBLE"), ("DATE", "TIMESTAMP_NTZ"),
}

TypeOf = Callable[[int, int, str], str]  # (type_oid, typmod, column name) -> Spark DDL


@dataclass(frozen=True, slots=True)
class SilverColumn:
    name: str
    spark_ddl: str
    lineage: int
    dropped: bool = False  # kept after PostgreSQL dropped it (drop policy "keep")


# "fill": a column just added set to its missing value in every row (cdc_apply.lake.silver.schema_changes).
SchemaOpKind = Literal["add", "rename", "drop", "retype", "fill"]


@dataclass(frozen=True, slots=True)
class SchemaOp:
    """One change to a silver table's schema (relation columns only)."""

    kind: SchemaOpKind
    column: str
    new_name: str | None = None    # set on every "rename"
    spark_ddl: str | None = None   # set on every "add", "retype" and "fill"
    old_ddl: str | None = None
    in_place: bool = False  # retype: Delta type widening, no rewrite

    @property
    def target(self) -> str:
        """A rename's new name (every rename is built with one)."""
        assert self.new_name is not None, f"{self.kind} of {self.column!r} has no new name"
        return self.new_name

    @property
    def ddl(self) -> str:
        """The Spark type an add, a retype or a fill gives the column (each is built with one)."""
        assert self.spark_ddl is not None, f"{self.kind} of {self.column!r} has no type"
        return self.spark_ddl


@dataclass(frozen=True, slots=True)
class ColumnRules:
    """Column exclusion and masking resolved to lineages: ``excluded`` lineages never become silver
    columns; ``masked`` lineages (lineage, "sha256" | "redact") become STRING columns."""

    excluded: frozenset[int] = frozenset()
    masked: tuple[tuple[int, Mask], ...] = ()

    def ddl(self, lineage: int, ddl: str) -> str:
        """The silver type of a column of ``lineage`` whose PostgreSQL type maps to ``ddl``."""
        return "STRING" if any(lin == lineage for lin, _ in self.masked) else ddl


NO_RULES = ColumnRules()


def resolve_rules(chain: Sequence[RelationVersion], policy) -> ColumnRules:
    """Lineages of the columns ``policy`` (:class:`cdc_apply.config.columns.ColumnPolicy`) names, each
    name read in the relation versions where it appears: a column renamed since keeps its rule."""
    if not policy:
        return NO_RULES
    excluded: set[int] = set()
    masked: dict[int, Mask] = {}
    for version in chain:
        for lin, col in zip(version.lineage, version.columns):
            if lin in excluded or lin in masked:
                continue
            if policy.excludes(col.name):
                excluded.add(lin)
            elif (kind := policy.mask_of(col.name)) is not None:
                masked[lin] = kind
    return ColumnRules(frozenset(excluded), tuple(sorted(masked.items())))


def decimal_shape(ddl: str) -> tuple[int, int] | None:
    if not ddl.startswith("DECIMAL("):
        return None
    p, s = ddl[len("DECIMAL("):-1].split(",")
    return int(p), int(s)


def widens(old: str, new: str) -> bool:
    """Whether Delta can change ``old`` to ``new`` in place (type widening)."""
    if (old, new) in _WIDENING:
        return True
    a, b = decimal_shape(old), decimal_shape(new)
    if a and b:
        return b[1] >= a[1] and (b[0] - b[1]) >= (a[0] - a[1]) and b != a
    return False


def transition(columns: list[SilverColumn], old: RelationVersion, new: RelationVersion, type_of: TypeOf,
               drop_policy: DropColumns, retype_policy: Retype,
               rules: ColumnRules = NO_RULES) -> tuple[list[SilverColumn], list[SchemaOp]]:
    """Silver columns and operations for the step from version ``old`` to version ``new`` (an excluded
    lineage of ``rules`` is no silver column; a masked one is STRING whatever its type)."""
    ops: list[SchemaOp] = []
    new_by_lineage = {lin: col for lin, col in zip(new.lineage, new.columns) if lin not in rules.excluded}
    out: list[SilverColumn] = []
    for col in columns:
        if col.dropped or col.lineage in new_by_lineage:
            out.append(col)
        elif drop_policy == DropColumns.DROP:
            ops.append(SchemaOp("drop", col.name))
        else:
            out.append(SilverColumn(col.name, col.spark_ddl, col.lineage, dropped=True))
    # Renames; through temporary names when a target name is still taken (a <-> b swaps).
    renames = [(i, new_by_lineage[c.lineage].name) for i, c in enumerate(out)
               if not c.dropped and new_by_lineage[c.lineage].name != c.name]
    renaming = {i for i, _ in renames}
    if any(c.name == target for i, target in renames for j, c in enumerate(out) if j != i):
        for i, _ in renames:
            temp = f"{out[i].name}__renaming_{new.seq}"
            ops.append(SchemaOp("rename", out[i].name, new_name=temp))
            out[i] = replace(out[i], name=temp)
    for i, target in renames:
        holder = next((j for j, c in enumerate(out) if c.name == target and j not in renaming), None)
        if holder is not None:  # only a kept, dropped column can still hold the name
            aside = f"{target}__dropped_{new.seq}"
            ops.append(SchemaOp("rename", target, new_name=aside))
            out[holder] = replace(out[holder], name=aside)
        ops.append(SchemaOp("rename", out[i].name, new_name=target))
        out[i] = replace(out[i], name=target)
    # Retypes.
    for i, col in enumerate(out):
        if col.dropped:
            continue
        rc = new_by_lineage[col.lineage]
        ddl = rules.ddl(col.lineage, type_of(rc.type_oid, rc.type_modifier, rc.name))
        if ddl != col.spark_ddl:
            in_place = widens(col.spark_ddl, ddl)
            if not in_place and retype_policy == Retype.FAIL:
                raise SchemaError(f"column {col.name!r} of {new.qualified_name} changed type from {col.spark_ddl} to "
                                  f"{ddl}; set silver.retype = \"rewrite\" to rewrite the column", seq=new.seq)
            ops.append(SchemaOp("retype", col.name, spark_ddl=ddl, old_ddl=col.spark_ddl, in_place=in_place))
            out[i] = SilverColumn(col.name, ddl, col.lineage)
    # Additions, at the end as in PostgreSQL.
    known = {c.lineage for c in out}
    for lin, rc in zip(new.lineage, new.columns):
        if lin in known or lin in rules.excluded:
            continue
        ddl = rules.ddl(lin, type_of(rc.type_oid, rc.type_modifier, rc.name))
        clash = next((j for j, c in enumerate(out) if c.name == rc.name), None)
        if clash is not None:  # only a kept, dropped column can hold the name
            aside = f"{rc.name}__dropped_{new.seq}"
            ops.append(SchemaOp("rename", rc.name, new_name=aside))
            out[clash] = SilverColumn(aside, out[clash].spark_ddl, out[clash].lineage, dropped=True)
        ops.append(SchemaOp("add", rc.name, spark_ddl=ddl))
        out.append(SilverColumn(rc.name, ddl, lin))
    return out, ops


def initial_columns(version: RelationVersion, type_of: TypeOf, rules: ColumnRules = NO_RULES) -> list[SilverColumn]:
    return [SilverColumn(c.name, rules.ddl(lin, type_of(c.type_oid, c.type_modifier, c.name)), lin)
            for lin, c in zip(version.lineage, version.columns) if lin not in rules.excluded]


def evolve(chain: Sequence[RelationVersion], type_of: TypeOf, drop_policy: DropColumns = DropColumns.DROP,
           retype_policy: Retype = Retype.REWRITE, start: int = 0,
           rules: ColumnRules = NO_RULES) -> tuple[list[SilverColumn], list[SchemaOp]]:
    """Silver columns after ``chain[-1]`` and the operations from ``chain[start]`` on."""
    columns = initial_columns(chain[0], type_of, rules)
    ops: list[SchemaOp] = []
    for i in range(1, len(chain)):
        columns, step = transition(columns, chain[i - 1], chain[i], type_of, drop_policy, retype_policy, rules)
        if i > start:
            ops.extend(step)
    return columns, ops


def identity_of(version: RelationVersion, configured: Sequence[str] | None = None) -> tuple[str, ...] | None:
    """Key columns that identify a row, or ``None`` when rows are identified by all their values.

    REPLICA IDENTITY FULL flags every column as key in the Relation message, so it
    says nothing about a primary key: such tables are matched on all values unless
    keys are configured for them.
    """
    if configured:
        missing = [k for k in configured if k not in version.column_names]
        if missing:
            raise ConfigError(f"configured key column(s) {missing} are not columns of {version.qualified_name}",
                              key=f"tables.{version.qualified_name}.key")
        return tuple(configured)
    if version.replica_identity == "f":
        return None
    keys = version.key_names
    return keys or None


def slot_mapping(version: RelationVersion, columns: Sequence[SilverColumn]) -> tuple[int | None, ...]:
    """For each column of ``version``, the index of the silver column it writes (``None``: dropped from silver)."""
    by_lineage = {c.lineage: i for i, c in enumerate(columns)}
    return tuple(by_lineage.get(lin) for lin in version.lineage)


__all__ = ["NO_RULES", "ColumnRules", "SchemaOp", "SilverColumn", "evolve", "resolve_rules", "identity_of",
           "initial_columns", "slot_mapping", "transition", "widens"]


def type_options_of(config: Config) -> TypeOptions:
    """The type map's policies the configuration sets (``apply.numeric``, each table's ``array_dimensions``):
    the one place they are read, so the decode, silver's columns and verify type a column alike."""
    return TypeOptions(numeric=config.apply.numeric, array_dimensions=config.array_dimensions())
