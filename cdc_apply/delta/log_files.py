"""The files of a table's ``_delta_log``, listed and removed — for a forget that must leave no older commit
holding a removed row's column statistics (:mod:`cdc_apply.forgetting.vacuum`).

Two stores: a local folder through the OS, and any Hadoop file system (``s3a://``, ``abfss://``...) through a
classic session's JVM (:meth:`cdc_apply.delta.engine.SparkTables.file_store`).
"""

from __future__ import annotations

import os
import re
from typing import Any, Protocol

from cdc_apply.errors import SetupError

# A log file's version: commits, checksums, (multi-part) checkpoints and staged commits.
LOG_VERSION = re.compile(r"^(\d{20})\.(?:json|crc|checkpoint\.parquet|checkpoint\.\d+\.\d+\.parquet"
                         r"|checkpoint\.[0-9a-f-]+\.(?:json|parquet)|[0-9a-f-]+\.json)$")


class FileStore(Protocol):
    def names(self, folder: str) -> list[str]: ...

    def read_text(self, path: str) -> str | None: ...

    def remove(self, path: str) -> None: ...


def local_folder(location: str) -> str | None:
    """The local folder of ``location`` (a path or ``file:`` URI); None for another file system."""
    if location.startswith("file:"):
        return re.sub(r"^file:/*", "/", location)
    return None if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location) else location


class LocalStore:
    """A local folder's files through the OS."""

    def names(self, folder: str) -> list[str]:
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


class HadoopStore:
    """Any Hadoop file system's files through a classic session's JVM (the session's credentials and options)."""

    def __init__(self, spark: Any) -> None:
        self.jvm = spark.sparkContext._jvm
        self.conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, path: str):
        p = self.jvm.org.apache.hadoop.fs.Path(path)
        return p, p.getFileSystem(self.conf)

    def names(self, folder: str) -> list[str]:
        p, fs = self._fs(folder)
        if not fs.exists(p):
            return []
        return sorted(str(s.getPath().getName()) for s in fs.listStatus(p))

    def read_text(self, path: str) -> str | None:
        p, fs = self._fs(path)
        if not fs.exists(p):
            return None
        stream = fs.open(p)
        try:
            return str(self.jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def remove(self, path: str) -> None:
        p, fs = self._fs(path)
        fs.delete(p, False)


def store_for(location: str, hadoop: Any | None) -> tuple[FileStore, str]:
    """The store that reaches ``location`` and the location as it names it: a local folder by the OS, else
    ``hadoop`` (a classic session); a :class:`SetupError` when neither reaches it."""
    folder = local_folder(location)
    if folder is not None:
        return LocalStore(), folder
    if hadoop is None:
        raise SetupError(f"{location} is not a local folder and this session has no JVM to reach it "
                         "(Spark Connect): its log files cannot be removed from here", location=location)
    return HadoopStore(hadoop), location


def log_version(name: str) -> int | None:
    match = LOG_VERSION.match(name)
    return int(match.group(1)) if match else None
