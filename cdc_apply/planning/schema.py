"""Relation versions, column lineage and the silver schema they imply.

A relation's shape changes only through a new Relation message. Changes are
decoded with the version current when they were made: the latest version of
their relation with a smaller seq (PostgreSQL re-sends the Relation message
after every invalidation, before the next change of that relation).

Relation messages carry no attnum, so a column's identity across versions
(its *lineage*) is inferred the way PostgreSQL lays columns out: surviving
columns keep their order, dropped ones vanish, added ones are appended.

:func:`match_columns` picks, among the layouts PostgreSQL can produce, the
one keeping the most names, then the most types. So a swap of two names is
two renames, a differently typed trailing column is a drop plus an add, and
``DROP COLUMN x; ADD COLUMN y`` of the same type on the last column reads as
a rename: a documented limit (the bytes cannot tell them apart).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from cdc_apply.errors import SchemaError
from cdc_apply.pgoutput import messages as m


@dataclass(frozen=True, slots=True)
class RelationVersion:
    """One shape of a relation, valid for changes with seq greater than ``seq``."""

    relation_id: int
    seq: int
    lsn: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[m.RelationColumn, ...]
    lineage: tuple[int, ...]  # one lineage id per column, stable across versions
    # (lineage, text) of columns this version adds that rows existing before it read a value for:
    # PostgreSQL's missing value (attmissingval) of ADD COLUMN ... DEFAULT, from the source's event trigger.
    missing: tuple[tuple[int, str], ...] = ()

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.key)

    def same_shape(self, rel: m.Relation) -> bool:
        return (self.namespace, self.name, self.replica_identity, self.columns) == (
            rel.namespace, rel.name, rel.replica_identity, rel.columns)


def _pair_score(old: m.RelationColumn, new: m.RelationColumn) -> float:
    same_name, same_type = old.name == new.name, old.type_oid == new.type_oid
    if not same_name and not same_type:
        return -0.5  # rename and retype at once: allowed only when nothing else fits
    return 2.0 * same_name + 1.0 * same_type


def match_columns(old: tuple[m.RelationColumn, ...], new: tuple[m.RelationColumn, ...]) -> list[int | None]:
    """For each new column, the index of the old column it continues (``None``: added).

    Among the layouts PostgreSQL can produce (old columns kept in order, some
    dropped, some renamed or retyped in place, new ones appended) pick the one
    that keeps the most names, then the most types; ties keep more columns.
    """
    p, q = len(new), len(old)
    neg = float("-inf")
    # best[i][j]: best score with the first i new columns all matched within the first j old ones.
    best = [[0.0] * (q + 1)] + [[neg] * (q + 1) for _ in range(p)]
    took = [[False] * (q + 1) for _ in range(p + 1)]
    for i in range(1, p + 1):
        for j in range(1, q + 1):
            skip = best[i][j - 1]
            take = best[i - 1][j - 1] + _pair_score(old[j - 1], new[i - 1])
            if take >= skip:
                best[i][j], took[i][j] = take, True
            else:
                best[i][j] = skip
    k = max(range(p + 1), key=lambda i: (best[i][q], i))
    result: list[int | None] = [None] * p
    i, j = k, q
    while i > 0:
        if took[i][j]:
            result[i - 1] = j - 1
            i, j = i - 1, j - 1
        else:
            j -= 1
    return result


@dataclass
class RelationHistory:
    """All versions of one relation of one source, in seq order."""

    relation_id: int
    versions: list[RelationVersion] = field(default_factory=list)
    _seqs: list[int] = field(default_factory=list)
    _next_lineage: int = 0

    def add(self, rel: m.Relation, seq: int, lsn: int,
            missing: Mapping[str, str] | None = None) -> RelationVersion | None:
        """Record a Relation message; returns the new version, or ``None`` if the shape is unchanged.
        ``missing``: by column name, the value existing rows read for a column this version adds."""
        if self.versions:
            latest = self.versions[-1]
            if seq <= latest.seq:
                if any(v.seq == seq for v in self.versions):
                    return None  # already recorded (a re-run batch)
                raise SchemaError("Relation messages must be recorded in seq order",
                                  relation_id=rel.relation_id, seq=seq, latest_seq=latest.seq)
            if latest.same_shape(rel):
                return None
            matched = match_columns(latest.columns, rel.columns)
            lineage = []
            for i in matched:
                if i is None:
                    lineage.append(self._next_lineage)
                    self._next_lineage += 1
                else:
                    lineage.append(latest.lineage[i])
        else:
            lineage = list(range(len(rel.columns)))
            self._next_lineage = len(rel.columns)
        known = {lin for v in self.versions for lin in v.lineage}
        filled = tuple((lin, missing[c.name]) for lin, c in zip(lineage, rel.columns)
                       if missing and lin not in known and c.name in missing and self.versions)
        version = RelationVersion(rel.relation_id, seq, lsn, rel.namespace, rel.name, rel.replica_identity,
                                  rel.columns, tuple(lineage), filled)
        self.versions.append(version)
        self._seqs.append(seq)
        return version

    def at(self, seq: int) -> RelationVersion | None:
        """The version current for a change at ``seq``."""
        i = bisect.bisect_left(self._seqs, seq)
        return self.versions[i - 1] if i else None

    def between(self, first_seq: int, last_seq: int) -> list[RelationVersion]:
        """Versions current for some change with seq in ``[first_seq, last_seq]``."""
        lo = max(bisect.bisect_left(self._seqs, first_seq) - 1, 0)
        hi = bisect.bisect_left(self._seqs, last_seq)
        return self.versions[lo:hi]

    @property
    def latest(self) -> RelationVersion:
        return self.versions[-1]


@dataclass
class SchemaHistory:
    """Relation versions and the type cache of one source."""

    relations: dict[int, RelationHistory] = field(default_factory=dict)
    types: dict[int, tuple[str, str]] = field(default_factory=dict)

    def record(self, seq: int, lsn: int, message: m.Relation | m.Type,
               missing: Mapping[str, str] | None = None) -> RelationVersion | m.Type | None:
        """Record a Relation or Type message; returns what is new (``None`` if nothing is)."""
        if isinstance(message, m.Type):
            entry = (message.namespace, message.name)
            if self.types.get(message.type_oid) == entry:
                return None
            self.types[message.type_oid] = entry
            return message
        history = self.relations.setdefault(message.relation_id, RelationHistory(message.relation_id))
        return history.add(message, seq, lsn, missing)

    def version_at(self, relation_id: int, seq: int) -> RelationVersion | None:
        history = self.relations.get(relation_id)
        return history.at(seq) if history else None

    def load(self, rows: Iterable[tuple]) -> None:
        """Rebuild from stored ``(seq, lsn, message[, missing])`` rows (any order)."""
        for seq, lsn, message, *missing in sorted(rows, key=lambda r: r[0]):
            self.record(seq, lsn, message, missing[0] if missing else None)


def lineage_names(version: RelationVersion) -> Mapping[int, str]:
    return dict(zip(version.lineage, version.column_names))
