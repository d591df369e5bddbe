"""Comparing one table's two sides, pure: ranges by (row count, hash sum), then the rows of the ranges that differ.

Results name what each side has: ``missing`` (the source has the key, silver not), ``unexpected`` (silver
has it, the source not), ``changed`` (both, other values), ``duplicated`` (silver holds the key more than
once). A keyless table compares as a multiset of rows: a row's key is its canonical text and the sides
differ by the copies each holds.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Final, Literal

from cdc_apply.verification.encoding import RangeKind, sort_key

VerifyStatus = Literal["equal", "differs", "error"]   # a table's verification
KeyDifferenceKind = Literal["missing", "unexpected", "changed", "duplicated"]

EQUAL: Final = "equal"
DIFFERS: Final = "differs"
ERROR: Final = "error"
# As `cdc-apply status`: 0 fine, 1 a finding, 2 an error.
EXIT_CODES: dict[VerifyStatus, int] = {EQUAL: 0, DIFFERS: 1, ERROR: 2}


@dataclass(frozen=True)
class KeyDifference:
    key: tuple
    what: KeyDifferenceKind
    source_copies: int
    silver_copies: int

    def text(self) -> str:
        key = ", ".join(str(k) for k in self.key)
        key = key if len(key) <= 80 else key[:77] + "..."
        if self.what == "missing":
            return f"({key}) only in the source"
        if self.what == "unexpected":
            return f"({key}) only in silver"
        if self.what == "duplicated":
            return f"({key}) {self.silver_copies} copies in silver, {self.source_copies} in the source"
        return f"({key}) values differ"


@dataclass
class RangeDifference:
    index: int
    low: object
    high: object
    source_rows: int
    silver_rows: int


@dataclass
class TableResult:
    """One table's verification."""

    table: str
    status: VerifyStatus = EQUAL
    ranges: int = 0
    source_rows: int = 0
    silver_rows: int = 0
    excluded_keys: int = 0
    differing: list[RangeDifference] = field(default_factory=list)
    samples: list[KeyDifference] = field(default_factory=list)
    unhashed_columns: list[str] = field(default_factory=list)       # the columns not compared ...
    unhashed_reasons: dict[str, str] = field(default_factory=dict)  # ... and why each is not
    source_only_columns: list[str] = field(default_factory=list)
    silver_version: int | None = None
    error: str | None = None
    seconds: float = 0.0

    def line(self) -> str:
        if self.status == ERROR:
            return f"{self.table}: error: {self.error}"
        head = f"{self.table}: "
        if self.status == EQUAL:
            head += f"equal ({self.source_rows} rows, {self.ranges} ranges"
        else:
            head += (f"{len(self.differing)} of {self.ranges} ranges differ (source {self.source_rows} rows, "
                     f"silver {self.silver_rows}")
        head += f", {self.excluded_keys} keys changed since the point left out" if self.excluded_keys else ""
        head += ")"
        if self.samples:
            head += "; " + "; ".join(s.text() for s in self.samples)
        if self.unhashed_columns:
            head += "; not compared: " + ", ".join(f"{c} ({self.unhashed_reasons[c]})" if c in self.unhashed_reasons
                                                   else c for c in self.unhashed_columns)
        return head

    def not_compared(self, column: str, why: str) -> None:
        """Name ``column`` among those the row hashes leave out, with why."""
        self.unhashed_columns.append(column)
        self.unhashed_reasons[column] = why

    def as_dict(self) -> dict:
        out = asdict(self)
        out["differing"] = [{k: (v if isinstance(v, (int, type(None))) else str(v)) for k, v in asdict(d).items()}
                            for d in self.differing]
        out["samples"] = [{"key": [str(k) for k in s.key], "what": s.what, "source_copies": s.source_copies,
                           "silver_copies": s.silver_copies} for s in self.samples]
        return out


def differing_ranges(source: dict[int, tuple[int, int]], silver: dict[int, tuple[int, int]]) -> list[int]:
    """Range indexes whose (rows, hash sum) differ (an empty range is absent from its side's dict)."""
    return sorted(r for r in set(source) | set(silver) if source.get(r, (0, 0)) != silver.get(r, (0, 0)))


def subtract(sums: dict[int, tuple[int, int]], rows: list[tuple], index_of) -> dict[int, tuple[int, int]]:
    """``sums`` less ``rows`` (``(key..., hash)``), each in the range ``index_of(row)`` says."""
    out = dict(sums)
    for row in rows:
        r = index_of(row)
        n, s = out.get(r, (0, 0))
        out[r] = (n - 1, s - int(row[-1]))
        if out[r] == (0, 0):
            del out[r]
    return out


def range_index(kind: RangeKind | None, bounds: list, value) -> int:
    """The range a range column's value (as its key text) falls in, as :func:`spark_range_index` computes it."""
    if kind is None or not bounds:
        return 0
    order = sort_key(kind)
    return bisect.bisect_right([order(b) for b in bounds], order(value))


def key_differences(source_rows: list[tuple], silver_rows: list[tuple], keyed: bool) -> list[KeyDifference]:
    """What differs between the rows of the same ranges on both sides (``(key..., hash)`` each)."""
    if not keyed:
        src_n = Counter(r[0] for r in source_rows)
        dst_n = Counter(r[0] for r in silver_rows)
        found: list[KeyDifference] = []
        for row in sorted(set(src_n) | set(dst_n)):
            if src_n[row] != dst_n[row]:
                what: KeyDifferenceKind = "missing" if dst_n[row] < src_n[row] and dst_n[row] == 0 else (
                    "unexpected" if src_n[row] == 0 else "duplicated" if dst_n[row] > src_n[row] else "missing")
                found.append(KeyDifference((row,), what, src_n[row], dst_n[row]))
        return found
    src: dict[tuple, list[int]] = defaultdict(list)
    dst: dict[tuple, list[int]] = defaultdict(list)
    for r in source_rows:
        src[tuple(r[:-1])].append(int(r[-1]))
    for r in silver_rows:
        dst[tuple(r[:-1])].append(int(r[-1]))
    out = []
    for key in sorted(set(src) | set(dst), key=lambda k: tuple(map(str, k))):
        a, b = src.get(key, []), dst.get(key, [])
        if not b:
            out.append(KeyDifference(key, "missing", len(a), 0))
        elif not a:
            out.append(KeyDifference(key, "unexpected", 0, len(b)))
        elif len(b) > len(a):
            out.append(KeyDifference(key, "duplicated", len(a), len(b)))
        elif sorted(a) != sorted(b):
            out.append(KeyDifference(key, "changed", len(a), len(b)))
    return out


def exit_code(results: list[TableResult]) -> int:
    """0 every table equal, 1 some table differs, 2 some table could not be verified."""
    return max((EXIT_CODES[r.status] for r in results), default=0)
