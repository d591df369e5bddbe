"""What one silver write did: the counts every write path (MERGE, replace, append) reports the same way."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MergeResult:
    """Rows a silver write inserted, updated and deleted; ``missing``: updates of rows silver does not have,
    whose unchanged TOAST values could not be filled."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    missing: int = 0
