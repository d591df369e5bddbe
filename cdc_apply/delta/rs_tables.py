"""The delta-rs engine: :class:`~cdc_apply.delta.engine.Tables` without a JVM, for tables at local paths and
on object storage the environment configures delta-rs for (:func:`cdc_apply.delta.files.rs_uri`).

The lander's bronze writer (:mod:`cdc_apply.lander.bronze_rs`) and ``cdc-apply status`` without Spark
(:mod:`cdc_apply.lake.books.status_files`) reach Delta this way: ``deltalake`` reads the log and the files
itself, so answering takes no Spark job and no JVM start. Any other ref (a catalog table, a store whose
credentials only Spark holds) is a :class:`~cdc_apply.errors.ConfigError` here: its entry point picks a
Spark engine for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from cdc_apply.delta import files
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

    from cdc_apply.delta.engine import EngineName


class RsTables:
    """:class:`~cdc_apply.delta.engine.Tables` through delta-rs (each call reads the log afresh)."""

    engine: EngineName = "delta-rs"

    def _open(self, ref: TableRef) -> Any:
        if files.rs_uri(ref) is None:
            raise ConfigError(f"{ref} is not a path delta-rs reads here (a local path, or object storage the "
                              "environment holds credentials for): read it with Spark", table=str(ref))
        return files.open_table(ref)

    def exists(self, ref: TableRef) -> bool:
        return self._open(ref) is not None

    def version(self, ref: TableRef) -> int | None:
        table = self._open(ref)
        return None if table is None else int(table.version())

    def newest_version(self, ref: TableRef) -> int | None:
        return self.version(ref)   # delta-rs keeps no snapshot between calls: each read is the newest

    def commit_user_metadata(self, ref: TableRef, limit: int | None = None) -> list[tuple[int, str | None]]:
        table = self._open(ref)
        if table is None:
            return []
        commits = sorted(table.history(limit), key=lambda c: c.get("version", -1), reverse=True)
        return [(int(c["version"]), c.get("userMetadata")) for c in commits]

    def recorded_txn_version(self, ref: TableRef, app_id: str) -> int | None:
        table = self._open(ref)
        found = None if table is None else table.transaction_version(app_id)
        return None if found is None else int(found)

    def read_rows(self, ref: TableRef, columns: Sequence[str], predicate: str | None = None) -> pa.Table | None:
        """The rows of ``columns`` (those ``predicate``, DataFusion SQL, keeps) as Spark would read them;
        None: no table there."""
        table = self._open(ref)
        return None if table is None else files.read_rows(table, list(columns), predicate)
