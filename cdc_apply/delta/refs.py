"""Where tables live: a Delta table by path or by catalog name, and where the configuration puts each kind.

A silver table lives where its relation's first name puts it, its history table beside it, the
bookkeeping tables under the state location; every path is built from :func:`~cdc_apply.delta.names.path_segment`
and checked to stay under its root.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from cdc_apply.config import Config
from cdc_apply.delta.names import child_path, quote_ident

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True)
class TableRef:
    """A Delta table by path or by catalog name; ``sql`` is usable in SQL text."""

    path: str | None = None
    name: str | None = None

    @property
    def catalog_name(self) -> str:
        """``name`` of a table not given by path (a TableRef holds one of the two)."""
        assert self.name is not None, "a TableRef holds a path or a name"
        return self.name

    @property
    def sql(self) -> str:
        if self.path is not None:
            return "delta." + quote_ident(self.path)
        return self.catalog_name

    def load(self, reader):
        """The table from a ``DataFrameReader`` or ``DataStreamReader`` (format and options set): by path or name."""
        return reader.load(self.path) if self.path else reader.table(self.catalog_name)

    def __str__(self) -> str:
        return self.path or self.name or "?"

    def read(self, spark: SparkSession):
        if self.path:
            return spark.read.format("delta").load(self.path)
        return spark.read.table(self.catalog_name)

    def append(self, df, app_id: str | None, version: int, metadata: str | None = None) -> None:
        """Append ``df``; with an ``app_id``, once per ``version`` (Delta's idempotent writes). Options, not
        session settings: a DataFrame writes with its own session's, which may not be the caller's."""
        writer = df.write.format("delta").mode("append")
        if app_id is not None:
            writer = writer.option("txnAppId", app_id).option("txnVersion", str(version))
        if metadata is not None:
            writer = writer.option("userMetadata", metadata)
        if self.path:
            writer.save(self.path)
        else:
            writer.saveAsTable(self.name)


def _catalog_name(template: str, namespace: str, name: str, source: str, suffix: str = "") -> str:
    parts = [p.format(namespace=namespace, name=name, source=source) for p in template.split(".")]
    parts[-1] += suffix
    return ".".join(quote_ident(p) for p in parts)


def silver_ref(config: Config, namespace: str, name: str, source: str = "") -> TableRef:
    """``<silver root>/[<source>/]<namespace>/<relation>`` or the catalog name built from the template.

    Each name is one :func:`~cdc_apply.delta.names.path_segment`; a path that would still leave the
    silver root is a :class:`~cdc_apply.errors.PathError`.
    """
    if config.silver.path is not None:
        names = [source, namespace, name] if config.silver.source_in_path else [namespace, name]
        return TableRef(path=child_path(config.silver.path, names, f"{namespace}.{name}"))
    return TableRef(name=_catalog_name(config.silver.table_template, namespace, name, source))  # type: ignore[arg-type]


class RelationName(Protocol):
    """A relation version's name (planning's ``RelationVersion`` is one)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


def silver_ref_for(config: Config, source: str, versions: Sequence[RelationName]) -> TableRef:
    """Where a relation's silver table lives: under its first version's name (``versions``: the relation's
    versions, oldest first), whatever it was renamed to since. The one place that rule is written."""
    first = versions[0]
    return silver_ref(config, first.namespace, first.name, source)


def history_ref_for(config: Config, source: str, versions: Sequence[RelationName]) -> TableRef:
    """Where a relation's history table lives: beside its silver table (:func:`silver_ref_for`)."""
    first = versions[0]
    return history_ref(config, first.namespace, first.name, source)


def history_ref(config: Config, namespace: str, name: str, source: str = "") -> TableRef:
    """Where a silver table's history table lives: the same layout under ``<silver path><history_suffix>``,
    or the catalog table named by the template with ``history_suffix`` appended to its table name."""
    suffix = config.silver.history_suffix
    if config.silver.path is not None:
        names = [source, namespace, name] if config.silver.source_in_path else [namespace, name]
        return TableRef(path=child_path(config.silver.path.rstrip("/") + suffix, names, f"{namespace}.{name}"))
    return TableRef(name=_catalog_name(config.silver.table_template, namespace, name, source, suffix))  # type: ignore[arg-type]


def state_ref(config: Config, table: str) -> TableRef:
    """A bookkeeping table: ``<state location>/<table>`` or ``<state schema>.<table>``."""
    if config.state.path is not None:
        return TableRef(path=child_path(config.state.path, [table], table))
    return TableRef(name=f"{config.state.schema}.{quote_ident(table)}")


def bronze_ref(config: Config) -> TableRef:
    """The bronze table: ``bronze.path`` or ``bronze.table``."""
    return TableRef(path=config.bronze.path, name=config.bronze.table)
