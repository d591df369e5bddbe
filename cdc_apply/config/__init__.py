"""Typed configuration from ``conf/*.toml``; every error names the offending key.

See ``conf/example.toml`` for every option with its default. Relative paths
are resolved against the folder of the configuration file; URIs
(``s3://...``, ``abfss://...``, ``dbfs:/...``) are used as they are.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from cdc_apply.config.choices import (
    CommitPosition,
    Deletes,
    DropColumns,
    HeartbeatUnit,
    Numeric,
    OnError,
    Origin,
    Readers,
    Retype,
    Snapshot,
    SourceFormat,
    Streaming,
    choose,
    choose_fields,
)
from cdc_apply.config.columns import (
    ColumnPolicy,
    check_masks,
    check_table_columns,
    policy_for,
    read_salt,
    split_pattern,
)
from cdc_apply.config.values import read_section
from cdc_apply.errors import ConfigError


def _is_uri(text: str) -> bool:
    return "://" in text or text.startswith("dbfs:")


MAX_ARRAY_DIMENSIONS = 6   # PostgreSQL's MAXDIM (the type map checks the same bound: pgoutput.types)
# What Spark's processingTime trigger parses: a number and a unit, optionally after "interval".
_INTERVAL = re.compile(r"^\s*(interval\s+)?\d+(\.\d+)?\s*(microseconds?|milliseconds?|ms|seconds?|s|minutes?|"
                       r"min|hours?|h|days?|d|weeks?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class BronzeConfig:
    path: str | None = None          # a Delta table path, or
    table: str | None = None         # a catalog table name
    sources: tuple[str, ...] = ()    # apply only these sources (default: all)
    max_files_per_trigger: int | None = None
    max_bytes_per_trigger: str | None = None


@dataclass(frozen=True)
class GaussdbConfig:
    """Sources in GaussDB / openGauss binary decode-style (``[bronze.formats]`` says which)."""

    exclude_users: tuple[str, ...] = ()  # drop transactions of these users (Begin's user name)
    include_user: bool = False           # add the _cdc_user metadata column
    commit_position: CommitPosition = CommitPosition.LSN
    heartbeat_unit: HeartbeatUnit = HeartbeatUnit.AUTO

    def __post_init__(self) -> None:
        choose_fields(self, "gaussdb", commit_position=CommitPosition, heartbeat_unit=HeartbeatUnit)


@dataclass(frozen=True)
class SilverConfig:
    path: str | None = None              # silver root: relation ns.rel lives at <path>/<ns>/<rel>
    table_template: str | None = None    # or catalog tables, e.g. "main.silver.{namespace}__{name}"
    source_in_path: bool = False         # <path>/<source>/<ns>/<rel>: several databases into one silver root
    metadata_prefix: str = "_cdc_"
    include_xid: bool = False
    include_origin: bool = False
    drop_columns: DropColumns = DropColumns.DROP
    retype: Retype = Retype.REWRITE
    # "delta-rs": silver and history tables are created without column mapping, type widening and deletion
    # vectors, so delta-rs and polars open them; renames, drops and retypes then rewrite the table in one commit.
    readers: Readers = Readers.SPARK
    # On: a MERGE marks the rows it deletes or updates instead of copying the rest of their files, so its
    # cost follows the batch, not the table (docs/BENCHMARKS.md). Readers need Delta's deletionVectors feature.
    deletion_vectors: bool = True
    # ... except in a MERGE whose batch changes at least this share of the table's rows (and at least
    # REWRITE_MIN_CHANGES rows): it touches nearly every file anyway, and rewriting them is cheaper than
    # a pass that writes deletion vectors (and leaves readers none to apply). 0: every such MERGE rewrites.
    rewrite_share: float = 0.5
    # ... and in any MERGE into a table whose files total less than this many bytes: rewriting its files,
    # even all of them, costs less than the pass that builds deletion vectors. 0: mark rows in any table.
    rewrite_table_bytes: int = 8 * 1024 * 1024
    change_data_feed: bool = True
    # Tables that keep a history table (docs/HISTORY.md): wildcards like apply.tables. [tables."ns.t"] history
    # = true/false decides for one table over these.
    history: tuple[str, ...] = ()
    # History tables live beside silver's: <silver.path><suffix>/<ns>/<rel>, or the template's table + suffix.
    history_suffix: str = "_history"
    # Columns never in silver / masked, for many tables: "<table pattern>.<column pattern>" (docs/MASKING.md)
    exclude_columns: tuple[str, ...] = ()
    mask_columns: tuple[tuple[str, str], ...] = ()   # {"*.*.email" = "sha256"}
    mask_salt_env: str = "CDC_APPLY_MASK_SALT"       # the environment variable holding sha256's salt
    # Tables whose deletes are soft (wildcards like apply.tables): the row stays, marked deleted. [tables."ns.t"]
    # deletes = "soft"/"hard" decides for one table over these.
    soft_deletes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        choose_fields(self, "silver", drop_columns=DropColumns, retype=Retype, readers=Readers)
        if self.table_template is not None and "{name}" not in self.table_template:
            raise ConfigError("the template must contain {name} (and usually {namespace})",
                              key="silver.table_template")
        if self.table_template is not None and self.source_in_path:
            raise ConfigError("with a table template, put {source} in the template instead",
                              key="silver.source_in_path")
        if not self.metadata_prefix:
            raise ConfigError("must not be empty", key="silver.metadata_prefix")
        if not self.history_suffix or "/" in self.history_suffix or "." in self.history_suffix:
            raise ConfigError("must be a non-empty suffix without '/' or '.'", key="silver.history_suffix")
        if not self.rewrite_share >= 0:
            raise ConfigError("must be 0 or more (0: a large MERGE always rewrites)", key="silver.rewrite_share")
        if self.rewrite_table_bytes < 0:
            raise ConfigError("must be 0 or more (0: MERGEs mark rows in tables of any size)",
                              key="silver.rewrite_table_bytes")
        # Column exclusion and masking: the words, the wildcards' shape, and no configured key excluded.
        for pattern, key in [(p, "silver.exclude_columns") for p in self.exclude_columns] + [
                (p, "silver.mask_columns") for p, _ in self.mask_columns]:
            split_pattern(pattern, key)
        check_masks(self.mask_columns, "silver.mask_columns")
        if not self.mask_salt_env:
            raise ConfigError("must name an environment variable", key="silver.mask_salt_env")


@dataclass(frozen=True)
class StateConfig:
    path: str | None = None              # bookkeeping tables and the streaming checkpoint, or
    schema: str | None = None            # a catalog schema for the bookkeeping tables ...
    checkpoint: str | None = None        # ... plus a checkpoint location


@dataclass(frozen=True)
class ApplyConfig:
    trigger_interval: str = "10 seconds"
    tables: tuple[str, ...] = ()         # allow list with wildcards: public.t1, *.t3, my_schema.*
    exclude_tables: tuple[str, ...] = ()
    skip_empty_transactions: bool = True
    origin: Origin = "any"               # "any" or "none" (only changes without an Origin)
    on_error: OnError = OnError.FAIL
    numeric: Numeric = "decimal"         # "decimal" or "string"
    parallelism: int = 4                 # silver tables merged at once

    def __post_init__(self) -> None:
        choose_fields(self, "apply", on_error=OnError)
        if self.parallelism < 1:
            raise ConfigError("must be at least 1", key="apply.parallelism")
        if not _INTERVAL.match(self.trigger_interval):
            raise ConfigError(f"expected a number and a unit, e.g. \"10 seconds\" or \"2 minutes\"; got "
                              f"{self.trigger_interval!r}", key="apply.trigger_interval")


@dataclass(frozen=True)
class TableConfig:
    key: tuple[str, ...] = ()            # key columns (for REPLICA IDENTITY FULL tables with a primary key)
    history: bool | None = None          # keep a history table (None: as silver.history says)
    track_columns: tuple[str, ...] = ()  # history: only changes of these columns open a version (default: all)
    # Column exclusion and masking (docs/MASKING.md): columns never in silver, columns masked in silver.
    exclude_columns: tuple[str, ...] = ()
    mask_columns: tuple[tuple[str, str], ...] = ()   # {email = "sha256", ssn = "redact"}
    # "soft": a Delete or TRUNCATE keeps the row, marked deleted (None: as silver.soft_deletes says, else "hard")
    deletes: Deletes | None = None
    # Array columns of more than one dimension (docs/TYPES.md): {grid = 2}; a Relation message never says.
    array_dimensions: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.deletes is not None:
            object.__setattr__(self, "deletes", choose(Deletes, self.deletes, "tables.deletes"))


@dataclass(frozen=True)
class HistorySpec:
    """A table's history settings: ``track_columns`` empty means every column opens versions."""

    track_columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceConfig:
    """Where the lander reads (``[source]``): one PostgreSQL database, one slot."""

    name: str = "postgres"               # the bronze `source` value
    dsn: str | None = None
    dsn_env: str | None = "CDC_APPLY_DSN"
    slot: str = "cdc_apply"
    publication: str = "cdc_apply"
    proto_version: int = 4
    binary: bool = False
    messages: bool = True
    streaming: Streaming = Streaming.PARALLEL
    two_phase: bool = True
    origin: Origin = "any"
    create_slot: bool = False
    create_publication: bool = False
    publication_tables: tuple[str, ...] = ()  # empty: FOR ALL TABLES
    connect_timeout: float = 10.0        # seconds libpq waits for the server before "unreachable"
    # Existing rows into bronze (docs/SNAPSHOTS.md). Requests (cdc-apply snapshot, the DDL event trigger)
    # are served in every mode but "never".
    snapshot: Snapshot = Snapshot.INITIAL
    snapshot_workers: int = 4            # connections copying at once
    snapshot_check_seconds: float = 30.0  # when_needed: how often the publications are compared with bronze
    snapshot_batch_bytes: int = 1024 * 1024 * 1024  # copied rows per bronze commit (and one at the end of a round)
    # Tables with an integer key are copied in key ranges of about this many rows, each consistent with a
    # point of its own (docs/SNAPSHOTS.md); 0 copies every table whole.
    snapshot_chunk_rows: int = 500_000
    ddl_events: bool = False             # install the event trigger that reports ADD COLUMN defaults and rewrites

    def __post_init__(self) -> None:
        choose_fields(self, "source", streaming=Streaming, snapshot=Snapshot)
        if self.proto_version not in (1, 2, 3, 4):
            raise ConfigError("must be 1, 2, 3 or 4", key="source.proto_version")
        if self.snapshot_workers < 1:
            raise ConfigError("must be at least 1", key="source.snapshot_workers")
        if not self.snapshot_check_seconds > 0:
            raise ConfigError("must be more than 0", key="source.snapshot_check_seconds")
        if self.snapshot_chunk_rows < 0:
            raise ConfigError("must be 0 (whole tables) or more", key="source.snapshot_chunk_rows")


@dataclass(frozen=True)
class LandConfig:
    batch_messages: int = 50_000
    batch_bytes: int = 64 * 1024 * 1024
    batch_seconds: float = 5.0
    idle_exit_seconds: float = 3.0       # --once: stop after this long with nothing to land
    keepalive_seconds: float = 10.0
    retries: int = 8
    backoff_seconds: float = 0.5         # first wait before reconnecting; doubles per failed attempt
    backoff_max_seconds: float = 30.0    # ... up to this


@dataclass(frozen=True)
class VerifyConfig:
    """``cdc-apply verify`` (docs/VERIFY.md): how hard it reads the source, how it cuts tables, how long it waits."""

    max_source_rows_per_second: float | None = None   # None: unbounded
    range_rows: int = 100_000            # rows per compared key range
    wait_seconds: float = 300.0          # for the apply job to reach the source's point

    def __post_init__(self) -> None:
        if self.range_rows < 1:
            raise ConfigError("must be at least 1", key="verify.range_rows")
        if self.max_source_rows_per_second is not None and not self.max_source_rows_per_second > 0:
            raise ConfigError("must be more than 0 (leave it out for no bound)",
                              key="verify.max_source_rows_per_second")


@dataclass(frozen=True)
class MetricsConfig:
    """``[metrics]``: where ``cdc-apply land`` and the continuous ``cdc-apply apply`` serve ``/metrics`` and
    ``/healthz`` (docs/OPERATIONS.md). Off unless a port is given; the two commands share one configuration
    file, so each has its own port (0: any free port, printed at the start)."""

    address: str = "127.0.0.1"           # listen address; "0.0.0.0" exposes it beyond the host
    land_port: int | None = None         # None: the lander serves no endpoint
    apply_port: int | None = None        # None: the continuous apply serves no endpoint

    def __post_init__(self) -> None:
        if not self.address.strip():
            raise ConfigError("expected a host name or IP address to listen on", key="metrics.address")
        for key in ("land_port", "apply_port"):
            port = getattr(self, key)
            if port is not None and not 0 <= port <= 65535:
                raise ConfigError(f"must be a TCP port, 0 to 65535 (0: any free port), got {port}",
                                  key=f"metrics.{key}")


@dataclass(frozen=True)
class Config:
    pipeline: str
    bronze: BronzeConfig
    silver: SilverConfig
    state: StateConfig
    apply: ApplyConfig = ApplyConfig()
    tables: Mapping[str, TableConfig] = field(default_factory=dict)
    source: SourceConfig = SourceConfig()
    land: LandConfig = LandConfig()
    formats: Mapping[str, SourceFormat] = field(default_factory=dict)   # bronze source -> its format
    gaussdb: GaussdbConfig = GaussdbConfig()
    origin_file: str | None = None
    verify: VerifyConfig = VerifyConfig()
    metrics: MetricsConfig = MetricsConfig()

    def format_of(self, source: str) -> SourceFormat:
        return self.formats.get(source, "pgoutput")

    def table_selected(self, qualified_name: str) -> bool:
        """Whether ``namespace.name`` passes the allow and deny lists."""
        if self.apply.tables and not any(_match(p, qualified_name) for p in self.apply.tables):
            return False
        return not any(_match(p, qualified_name) for p in self.apply.exclude_tables)

    def key_for(self, qualified_name: str) -> tuple[str, ...]:
        table = self.tables.get(qualified_name)
        return table.key if table else ()

    def history_for(self, qualified_name: str) -> HistorySpec | None:
        """The table's history settings, or None when it keeps no history table."""
        table = self.tables.get(qualified_name)
        enabled = table.history if table is not None and table.history is not None else any(
            _match(p, qualified_name) for p in self.silver.history)
        if not enabled:
            return None
        return HistorySpec(table.track_columns if table is not None else ())

    def columns_for(self, qualified_name: str) -> ColumnPolicy:
        """The table's column exclusion and masking rules (empty when none apply)."""
        return policy_for(qualified_name, self.tables.get(qualified_name), self.silver)

    def array_dimensions(self) -> tuple[tuple[str, str, int], ...]:
        """``(qualified table, column, dimensions)`` of every array column ``[tables."ns.t"] array_dimensions``
        names (the type map's ``TypeOptions.array_dimensions``)."""
        return tuple((name, column, dimensions) for name, table in sorted(self.tables.items())
                     for column, dimensions in table.array_dimensions)

    def mask_salt(self) -> str:
        """The salt of ``"sha256"`` masks from ``silver.mask_salt_env`` ("" when nothing hashes); a
        :class:`ConfigError` naming that key when it is needed and not set."""
        return read_salt(self.tables, self.silver)

    def soft_deletes_for(self, qualified_name: str) -> bool:
        """Whether the table's deletes are soft (``[tables."ns.t"] deletes``, else ``silver.soft_deletes``)."""
        table = self.tables.get(qualified_name)
        if table is not None and table.deletes is not None:
            return table.deletes is Deletes.SOFT
        return any(_match(p, qualified_name) for p in self.silver.soft_deletes)

    @property
    def checkpoint_location(self) -> str:
        if self.state.checkpoint:
            return self.state.checkpoint
        return _join(self.state.path or "", "checkpoint")


def _match(pattern: str, name: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern)


def _join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])




def _check_separate(paths: Mapping[str, str | None]) -> None:
    """Bronze, silver and state each need a location of their own: the same or a nested folder would
    put one's tables inside another's (a silver namespace named like a state table, say). The
    checkpoint may live under state.path, its default."""
    given = [(key, path.rstrip("/") + "/") for key, path in paths.items() if path]
    for i, (key, path) in enumerate(given):
        for other, other_path in given[i + 1:]:
            if {key, other} == {"state.path", "state.checkpoint"}:
                continue
            if path.startswith(other_path) or other_path.startswith(path):
                how = "the same location as" if path == other_path else "nested with"
                raise ConfigError(f"{key} is {how} {other} ({paths[other]}): give each its own folder",
                                  key=key)


def _resolve(path: str | None, base: Path) -> str | None:
    if path is None or _is_uri(path) or os.path.isabs(path):
        return path
    return str((base / path).resolve())


def parse_config(raw: Mapping[str, Any], base_dir: Path | None = None, origin_file: str | None = None) -> Config:
    """Validate a parsed TOML document; ``base_dir`` anchors relative paths."""
    base = base_dir or Path.cwd()
    allowed = {"pipeline", "bronze", "silver", "state", "apply", "tables", "source", "land", "gaussdb", "verify",
               "metrics"}
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"unknown section (known: {', '.join(sorted(allowed))})", key=key)
    bronze_raw = dict(raw.get("bronze") or {})
    formats = bronze_raw.pop("formats", {})
    if not isinstance(formats, Mapping) or any(v not in ("pgoutput", "gaussdb") for v in formats.values()):
        raise ConfigError('expected a table of source = "pgoutput" | "gaussdb"', key="bronze.formats")
    bronze = read_section(BronzeConfig, bronze_raw, "bronze")
    silver = read_section(SilverConfig, raw.get("silver"), "silver")
    state = read_section(StateConfig, raw.get("state"), "state")
    if (bronze.path is None) == (bronze.table is None):
        raise ConfigError("set exactly one of bronze.path and bronze.table", key="bronze.path")
    if (silver.path is None) == (silver.table_template is None):
        raise ConfigError("set exactly one of silver.path and silver.table_template", key="silver.path")
    if state.path is None and (state.schema is None or state.checkpoint is None):
        raise ConfigError("set state.path, or both state.schema and state.checkpoint", key="state.path")
    bronze = BronzeConfig(**{**bronze.__dict__, "path": _resolve(bronze.path, base)})
    silver = SilverConfig(**{**silver.__dict__, "path": _resolve(silver.path, base)})
    state = StateConfig(**{**state.__dict__, "path": _resolve(state.path, base),
                           "checkpoint": _resolve(state.checkpoint, base)})
    _check_separate({"bronze.path": bronze.path, "silver.path": silver.path, "state.path": state.path,
                     "state.checkpoint": state.checkpoint,
                     "silver.history_suffix": silver.path.rstrip("/") + silver.history_suffix if silver.path else None})
    apply = read_section(ApplyConfig, raw.get("apply"), "apply")
    tables_raw = raw.get("tables") or {}
    if not isinstance(tables_raw, Mapping):
        raise ConfigError("expected a table of tables", key="tables")
    tables = {name: read_section(TableConfig, value, f"tables.{name}") for name, value in tables_raw.items()}
    for name, table in tables.items():
        keeps = table.history if table.history is not None else any(_match(p, name) for p in silver.history)
        if table.track_columns and not keeps:
            raise ConfigError("track_columns needs history (it says which changes open a version)",
                              key=f"tables.{name}.track_columns")
    for name, table in tables.items():
        check_table_columns(name, table, table.key)
        for column, dimensions in table.array_dimensions:
            if not 1 <= dimensions <= MAX_ARRAY_DIMENSIONS:
                raise ConfigError(f"column {column!r}: an array has 1 to {MAX_ARRAY_DIMENSIONS} dimensions, "
                                  f"not {dimensions}", key=f"tables.{name}.array_dimensions")
    source = read_section(SourceConfig, raw.get("source"), "source")
    land = read_section(LandConfig, raw.get("land"), "land")
    gaussdb = read_section(GaussdbConfig, raw.get("gaussdb"), "gaussdb")
    pipeline = raw.get("pipeline", None)
    if pipeline is None:
        pipeline = Path(state.path or state.schema or "cdc_apply").name or "cdc_apply"
    if not isinstance(pipeline, str) or not pipeline or "\x00" in pipeline:
        raise ConfigError("expected a non-empty string without NUL", key="pipeline")
    verify = read_section(VerifyConfig, raw.get("verify"), "verify")
    metrics = read_section(MetricsConfig, raw.get("metrics"), "metrics")
    return Config(pipeline, bronze, silver, state, apply, tables, source, land, dict(formats), gaussdb, origin_file,
                  verify, metrics)


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a TOML configuration file."""
    file = Path(path)
    try:
        with open(file, "rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError("configuration file not found", file=str(file)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start}): TOML files are UTF-8", file=str(file)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file: {exc.strerror or exc}", file=str(file)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=str(file)) from None
    try:
        return parse_config(raw, file.resolve().parent, str(file))
    except ConfigError as err:
        raise err.with_context(file=str(file)) from None


def config_from_dict(raw: Mapping[str, Any], base_dir: str | os.PathLike[str] | None = None) -> Config:
    """A configuration from a dict shaped like the TOML file (``{"bronze": {"path": ...}, ...}``).

    Validated exactly as a file is (every error a :class:`ConfigError` naming the key); relative paths
    are resolved against ``base_dir`` (default: the current folder).
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"expected a dict of sections, got {type(raw).__name__}")
    return parse_config(raw, Path(base_dir).resolve() if base_dir is not None else None)


def as_config(config: Config | Mapping[str, Any] | str | os.PathLike[str]) -> Config:
    """A :class:`Config` from what the Python API accepts: a ``Config`` (as it is), a dict shaped like
    the TOML file (:func:`config_from_dict`), or the path of a TOML file (:func:`load_config`)."""
    if isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        return config_from_dict(config)
    if isinstance(config, (str, os.PathLike)):
        return load_config(config)
    raise ConfigError(f"expected a Config, a dict or the path of a TOML file, got {type(config).__name__}")
