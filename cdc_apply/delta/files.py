"""Reads of a Delta table at a path without a JVM: delta-rs (``deltalake``) and pyarrow.

For commands that run no Spark job (``cdc-apply status``): a table's rows as Spark's read gives them
(:func:`read_rows`: removed files and deletion vectors honoured, column mapping and partition columns
resolved, by delta-rs's own engine) and its live files with their statistics (:func:`live_files`), so a
question the statistics answer reads no data. Local paths, and paths on object storage that the
environment configures delta-rs for (:func:`rs_uri`, :mod:`cdc_apply.delta.storage`); the rest (a catalog
table, a store whose credentials live only in Spark's configuration) keep Spark.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa

from cdc_apply.delta import storage
from cdc_apply.delta.refs import TableRef


def local_path(ref: TableRef) -> str | None:
    """The table's local folder, or None for a catalog table or a path with a scheme (``s3://``,
    ``dbfs:/``): those are opened with what Spark's configuration holds."""
    path = ref.path
    if path is None:
        return None
    if path.startswith("file://"):
        return path[len("file://"):]
    if "://" in path or path.startswith("dbfs:"):
        return None
    return path


def rs_uri(ref: TableRef) -> str | None:
    """Where delta-rs opens the table: its local folder, or its URI on object storage when the environment
    configures delta-rs for that store (:func:`cdc_apply.delta.storage.rs_reachable`); None: Spark's to open."""
    path = local_path(ref)
    if path is not None:
        return path
    uri = storage.object_uri(ref.path) if ref.path is not None else None
    return uri if uri is not None and storage.rs_reachable(uri) else None


def open_uri(uri: str):
    """The ``deltalake.DeltaTable`` at ``uri`` (:func:`rs_uri`), or None when no Delta table is there."""
    from deltalake import DeltaTable

    options = _options(uri)
    if not DeltaTable.is_deltatable(uri, storage_options=options):
        return None
    return DeltaTable(uri, storage_options=options)


def open_table(ref: TableRef):
    """The ``deltalake.DeltaTable`` at the ref's path (:func:`rs_uri`), or None when no Delta table is there."""
    uri = rs_uri(ref)
    if uri is None:
        raise ValueError(f"{ref} is not a path delta-rs opens here: read it with Spark")
    return open_uri(uri)


def _options(uri: str) -> dict[str, str] | None:
    return storage.storage_options(uri) if storage.object_uri(uri) is not None else None


class StoreFiles:
    """A table's files on object storage through delta-rs's own store (the table's credentials): pyarrow
    reads them by :attr:`pyarrow`, and a file made in memory is written by :meth:`put`."""

    def __init__(self, uri: str) -> None:
        from deltalake._internal import DeltaFileSystemHandler

        self._handler = DeltaFileSystemHandler(uri, _options(uri))
        self.uri = uri

    @property
    def pyarrow(self):
        """A pyarrow file system rooted at the table."""
        from deltalake.fs import DeltaStorageHandler
        from pyarrow.fs import PyFileSystem

        return PyFileSystem(DeltaStorageHandler(self.uri, _options(self.uri)))

    def put(self, name: str, data: bytes) -> None:
        """Write ``data`` as the file ``name`` (relative to the table) by one upload."""
        out = self._handler.open_output_stream(name, None)
        try:
            out.write(data)   # delta-rs's stream takes bytes (pyarrow's file wrapper would hand it a Buffer)
        finally:
            out.close()   # type: ignore[attr-defined]  # the stubs name only `closed`; the stream has close()


def read_rows(table, columns: list[str], predicate: str | None = None) -> pa.Table:
    """The rows of ``columns`` (those ``predicate``, DataFusion SQL, keeps), as Spark would read them;
    string and binary views as plain strings and binaries."""
    got = _arrow(table.scan(columns=columns, predicate=predicate))
    fields = [pa.field(f.name, _plain(f.type), f.nullable) for f in got.schema]
    return got.cast(pa.schema(fields)).select(columns)


def _arrow(stream) -> pa.Table:
    """delta-rs's Arrow stream (arro3) as a pyarrow table (``pa.table`` would import pandas to ask: 0.3 s)."""
    return pa.RecordBatchReader.from_stream(stream).read_all()


def _plain(kind: pa.DataType) -> pa.DataType:
    if kind == pa.string_view():
        return pa.string()
    if kind == pa.binary_view():
        return pa.binary()
    return kind


@dataclass(frozen=True)
class LiveFile:
    """One file of the table's current version: its statistics for ``columns`` (None where it has none)."""

    path: str
    modified: datetime            # the add action's modificationTime (what Spark's ``_metadata`` says)
    records: int | None
    low: dict
    high: dict
    deleted_rows: bool            # a deletion vector hides some of its rows: its statistics over-count


def live_files(table, columns: list[str]) -> list[LiveFile]:
    """The table's live files (its log replayed: removed files are gone) with their statistics."""
    actions = _arrow(table.get_add_actions(flatten=True))
    names = set(actions.column_names)
    with_dv = _files_with_deletion_vectors(table)
    out = []
    for row in actions.to_pylist():
        low = {c: row.get(f"min.{c}") for c in columns if f"min.{c}" in names}
        high = {c: row.get(f"max.{c}") for c in columns if f"max.{c}" in names}
        for c in columns:   # a partition column is its file's one value
            if f"partition.{c}" in names:
                low[c] = high[c] = row[f"partition.{c}"]
        out.append(LiveFile(row["path"], datetime.fromtimestamp(row["modification_time"] / 1000, timezone.utc),
                            row.get("num_records"), low, high, os.path.basename(row["path"]) in with_dv))
    return out


def _files_with_deletion_vectors(table) -> set[str]:
    protocol = table.protocol()
    if "deletionVectors" not in (protocol.reader_features or ()):
        return set()
    found = _arrow(table.deletion_vectors())
    return {os.path.basename(uri) for uri in found.column("filepath").to_pylist()}


def file_rows(table, file: LiveFile, columns: list[str]) -> pa.Table:
    """One live file's rows of ``columns``, deletion vector applied (``read_rows`` cannot say which file a
    row came from). Physical names under column mapping; partition columns from the file's values."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema = table.schema()
    physical = {f.name: str(f.metadata.get("delta.columnMapping.physicalName", f.name)) for f in schema.fields}
    partitions = set(table.metadata().partition_columns)
    stored = [physical[c] for c in columns if c not in partitions]
    uri = table.table_uri.rstrip("/")
    if storage.object_uri(uri) is not None:
        data = pq.read_table(file.path, columns=stored, filesystem=StoreFiles(uri).pyarrow)
    else:
        root = local_path(TableRef(path=uri)) or uri
        path = file.path if os.path.isabs(file.path) else os.path.join(root.removeprefix("file://"), file.path)
        data = pq.read_table(path, columns=stored)
    arrays = {c: data.column(physical[c]) for c in columns if c not in partitions}
    for c in columns:
        if c in partitions:
            arrays[c] = pa.array([file.low[c]] * data.num_rows)
    out = pa.Table.from_pydict({c: arrays[c] for c in columns})
    if file.deleted_rows:
        keep = _selection(table, file.path)
        mask = keep + [True] * (out.num_rows - len(keep))   # rows past the vector's end are kept
        out = out.filter(pc.equal(pa.array(mask[:out.num_rows]), True))
    return out


def _selection(table, path: str) -> list[bool]:
    found = _arrow(table.deletion_vectors())
    for uri, keep in zip(found.column("filepath").to_pylist(), found.column("selection_vector").to_pylist()):
        if os.path.basename(uri) == os.path.basename(path):
            return keep
    return []
