"""Keep a Spark Python worker's zip importers from re-reading their archives at every task.

PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task
(``worker_util.setup_spark_files``). On Python 3.10 and 3.11 a ``zipimporter`` answers that by re-reading
its archive's whole central directory, eagerly (CPython gh-103200, made lazy in 3.12), and a worker's
``sys.path`` holds ``pyspark.zip``, py4j's zip and spark-core's jar, with one importer per package
imported from them: ~0.09 s of CPU per task on this project's machine, paid by every decode task of
every batch. Those archives do not change while a worker runs, so :func:`keep_zip_directories` makes
each importer re-read its archive only when the file's size or modification time has changed, and
leaves importers alone on Python 3.12+ and outside a Spark worker.
"""

from __future__ import annotations

import os
import sys
import zipimport

_ARCHIVE_STAMPS: dict[str, tuple[int, int] | None] = {}


def _stamp(archive: str) -> tuple[int, int] | None:
    try:
        st = os.stat(archive)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class _CheckedZipImporter(zipimport.zipimporter):
    """A ``zipimporter`` whose ``invalidate_caches`` re-reads the archive only when the file changed."""

    def invalidate_caches(self):
        stamp = _stamp(self.archive)
        if stamp is None or _ARCHIVE_STAMPS.get(self.archive) != stamp:
            super().invalidate_caches()
            _ARCHIVE_STAMPS[self.archive] = stamp


def needs_keeping() -> bool:
    """True in a PySpark worker on a Python whose zip importers re-read their archives eagerly."""
    return sys.version_info < (3, 12) and "pyspark.worker" in sys.modules


def keep_zip_directories(force: bool = False) -> bool:
    """Make this process's zip importers check their archive's stamp before re-reading it (once per
    process; ``force`` installs outside a Spark worker, for tests). Returns whether it is installed."""
    if _CheckedZipImporter in sys.path_hooks:
        return True
    if not (force or needs_keeping()):
        return False
    for importer in list(sys.path_importer_cache.values()):
        if type(importer) is zipimport.zipimporter:
            importer.__class__ = _CheckedZipImporter
            _ARCHIVE_STAMPS.setdefault(importer.archive, _stamp(importer.archive))
    # Importers made later (a new package imported from a zip) come from the path hook.
    sys.path_hooks[:] = [_CheckedZipImporter if hook is zipimport.zipimporter else hook for hook in sys.path_hooks]
    return True
