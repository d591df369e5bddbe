"""Which of a table's columns never reach silver (``exclude_columns``) and which reach it masked
(``mask_columns``): per table in ``[tables."ns.t"]`` by exact column name, for many tables in
``[silver]`` by ``"<table pattern>.<column pattern>"`` wildcards (``"*.*.ssn"``).

The configuration names columns; the planning layer resolves each name to a column lineage at the
relation version where the name appears, so a renamed column keeps its rule (docs/MASKING.md).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Iterable, Literal, cast

from cdc_apply.errors import ConfigError

# How a masked column's values reach silver: "sha256", the hex SHA-256 of the salt followed by the value's
# text (stable, joinable); "redact", the fixed text REDACTED (NULL stays NULL under both).
Mask = Literal["sha256", "redact"]
SHA256: Mask = "sha256"
REDACT: Mask = "redact"
MASKS: tuple[Mask, ...] = (SHA256, REDACT)
REDACTED = "REDACTED"


@dataclass(frozen=True)
class ColumnPolicy:
    """One table's column rules: ``exclude`` and ``masks`` as (column pattern, exact) / (pattern, exact, kind)."""

    exclude: tuple[tuple[str, bool], ...] = ()
    masks: tuple[tuple[str, bool, Mask], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.exclude or self.masks)

    def excludes(self, column: str) -> bool:
        """Whether a column of this name is left out of silver."""
        return any(_fits(p, exact, column) for p, exact in self.exclude)

    def mask_of(self, column: str) -> Mask | None:
        """The mask (``"sha256"`` or ``"redact"``) of a column of this name, or None; a table's own rule
        wins over a ``[silver]`` wildcard (they come first)."""
        return next((kind for p, exact, kind in self.masks if _fits(p, exact, column)), None)


def _fits(pattern: str, exact: bool, column: str) -> bool:
    return pattern == column if exact else fnmatch.fnmatchcase(column, pattern)


def split_pattern(pattern: str, key: str) -> tuple[str, str]:
    """``"ns.t.col"`` (wildcards allowed) → (table pattern, column pattern): the column is after the last dot."""
    table, dot, column = pattern.rpartition(".")
    if not dot or "." not in table or not column:
        raise ConfigError(f"expected \"<namespace>.<table>.<column>\" (wildcards allowed), got {pattern!r}", key=key)
    return table, column


def _mask(word: str) -> Mask:
    # The configuration holds a mask as the word it was given; check_masks refused every other word when
    # the configuration was read.
    return cast(Mask, word)


def check_masks(masks: Iterable[tuple[str, str]], key: str) -> None:
    for column, kind in masks:
        if kind not in MASKS:
            raise ConfigError(f"mask of {column!r} must be one of {', '.join(MASKS)}; got {kind!r}", key=key)


def check_table_columns(name: str, table, key_columns: tuple[str, ...]) -> None:
    """A table's own rules: known mask words, no column both excluded and masked, and no configured key
    column excluded or redacted (rows could no longer be told apart)."""
    check_masks(table.mask_columns, f"tables.{name}.mask_columns")
    both = sorted(set(table.exclude_columns) & {c for c, _ in table.mask_columns})
    if both:
        raise ConfigError(f"column {both[0]!r} is both excluded and masked", key=f"tables.{name}.exclude_columns")
    for column in key_columns:
        if column in table.exclude_columns:
            raise ConfigError(f"key column {column!r} cannot be excluded (tables.{name}.key names it)",
                              key=f"tables.{name}.exclude_columns")
        if dict(table.mask_columns).get(column) == REDACT:
            raise ConfigError(f"key column {column!r} cannot be redacted (every row would share one key); "
                              "mask it with \"sha256\"", key=f"tables.{name}.mask_columns")


def policy_for(qualified_name: str, table, silver) -> ColumnPolicy:
    """The column rules of ``namespace.name``: its own table's, then the ``[silver]`` wildcards matching it."""
    exclude = [(c, True) for c in (table.exclude_columns if table is not None else ())]
    masks = [(c, True, _mask(k)) for c, k in (table.mask_columns if table is not None else ())]
    for pattern in silver.exclude_columns:
        t, c = split_pattern(pattern, "silver.exclude_columns")
        if fnmatch.fnmatchcase(qualified_name, t):
            exclude.append((c, False))
    for pattern, kind in silver.mask_columns:
        t, c = split_pattern(pattern, "silver.mask_columns")
        if fnmatch.fnmatchcase(qualified_name, t):
            masks.append((c, False, _mask(kind)))
    return ColumnPolicy(tuple(exclude), tuple(masks))


def needs_salt(tables, silver) -> bool:
    """Whether any rule hashes (``"sha256"``): then the salt's environment variable must be set."""
    return any(k == SHA256 for _, k in silver.mask_columns) or any(
        k == SHA256 for t in tables.values() for _, k in t.mask_columns)


def read_salt(tables, silver) -> str:
    """The hashing salt from the environment variable ``silver.mask_salt_env`` ("" when nothing hashes).
    Never printed: an error names the variable, not its value."""
    if not needs_salt(tables, silver):
        return ""
    salt = os.environ.get(silver.mask_salt_env, "")
    if not salt:
        raise ConfigError(f"columns are masked with \"sha256\" but the environment variable "
                          f"{silver.mask_salt_env} that holds the salt is not set (or empty)",
                          key="silver.mask_salt_env")
    return salt


__all__ = ["ColumnPolicy", "MASKS", "Mask", "REDACT", "REDACTED", "SHA256", "check_masks", "check_table_columns",
           "needs_salt", "policy_for", "read_salt", "split_pattern"]
