"""The configuration keys that take one of a fixed set of words, as ``str`` enums.

A member equals the word the TOML holds (``OnError.FAIL == "fail"``) and prints as it, so a value
read from the configuration compares, formats and serialises like the string it came from.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal, TypeVar

from cdc_apply.errors import ConfigError

# Keys whose words stay plain strings (read and checked by cdc_apply.config.values), typed by their words.
Origin = Literal["any", "none"]             # apply.origin, source.origin: "none" keeps changes without an Origin
Numeric = Literal["decimal", "string"]      # apply.numeric: numeric(p,s) as DECIMAL, or as its text
SourceFormat = Literal["pgoutput", "gaussdb"]   # [bronze.formats]: how a bronze source's payloads are encoded


class OnError(StrEnum):
    """``apply.on_error``: what a batch does with a message it cannot decode or apply."""

    FAIL = "fail"              # stop at the batch's first bad message (the lowest seq)
    QUARANTINE = "quarantine"  # keep it in the quarantine table and apply the rest


class DropColumns(StrEnum):
    """``silver.drop_columns``: what silver does with a column PostgreSQL dropped."""

    DROP = "drop"
    KEEP = "keep"   # keep it, NULL in rows written after the drop


class Retype(StrEnum):
    """``silver.retype``: a column retyped in a way Delta cannot widen in place."""

    REWRITE = "rewrite"   # rebuild the column (ADD, UPDATE, DROP, RENAME)
    FAIL = "fail"


class Readers(StrEnum):
    """``silver.readers``: who must be able to open the silver and history tables cdc_apply creates."""

    SPARK = "spark"         # Delta's reader features (column mapping, type widening, deletion vectors)
    DELTA_RS = "delta-rs"   # none of them: delta-rs (deltalake) and polars open the tables too


class Snapshot(StrEnum):
    """``source.snapshot``: which tables' existing rows the lander copies into bronze."""

    INITIAL = "initial"            # every published table, when the lander creates the slot
    WHEN_NEEDED = "when_needed"    # ... and tables added to the publication later
    NEVER = "never"


class Streaming(StrEnum):
    """``source.streaming``: pgoutput's ``streaming`` option (in-progress transactions)."""

    OFF = "off"
    ON = "on"
    PARALLEL = "parallel"


class Deletes(StrEnum):
    """``tables."ns.t".deletes``: what a Delete (or TRUNCATE) does to silver's row."""

    HARD = "hard"   # the row goes away
    SOFT = "soft"   # the row stays, marked ``<metadata_prefix>deleted = true`` with the delete's commit LSN/time


class CommitPosition(StrEnum):
    """``gaussdb.commit_position``: which position a GaussDB transaction commits at."""

    LSN = "lsn"   # the Commit record's LSN
    CSN = "csn"   # the commit sequence number


class HeartbeatUnit(StrEnum):
    """``gaussdb.heartbeat_unit``: the unit of a GaussDB heartbeat's timestamp."""

    SECONDS = "s"
    MILLISECONDS = "ms"
    MICROSECONDS = "us"
    AUTO = "auto"   # told from the number's size


E = TypeVar("E", bound=StrEnum)


def choose(kind: type[E], value: Any, key: str) -> E:
    """``value`` as a member of ``kind``; a :class:`ConfigError` naming ``key`` when it is none."""
    if isinstance(value, kind):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"expected a string, got {value!r}", key=key)
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"must be one of {', '.join(kind)}; got {value!r}", key=key) from None


def choose_fields(section: Any, prefix: str, **kinds: type[StrEnum]) -> None:
    """Turn the words a (frozen) configuration section was built with into its fields' enums."""
    for name, kind in kinds.items():
        object.__setattr__(section, name, choose(kind, getattr(section, name), f"{prefix}.{name}"))


ENUMS: dict[str, type[StrEnum]] = {kind.__name__: kind for kind in (
    OnError, DropColumns, Retype, Readers, Snapshot, Streaming, CommitPosition, HeartbeatUnit, Deletes)}
